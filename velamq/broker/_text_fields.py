"""Every string field a client sends must be UTF-8: checked before a command does anything.

The protobuf runtime (upb) does not check proto2 `string` fields when it parses: a field whose
bytes are not UTF-8 comes out as `bytes` instead of `str`. Left alone, such a value became a
producer name, a subscription name or a property, was registered and stored, and later broke
what reads it (a 500 from /stats, tracebacks from name parsing). So the connection asks
`non_utf8_field` of each command before its handler runs, and the producer commands ask it of each
SEND's MessageMetadata; the answer is the dotted path of the first offending field, for the error
message ("producer.producer_name is not valid UTF-8").

Which message types can hold a string at all (directly or in a nested message) is worked out once
per type, so a command without strings (SEND, FLOW, ACK) costs one dictionary lookup.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_has_strings: dict[str, bool] = {}


def _holds_strings(descriptor: Any, visiting: frozenset[str] = frozenset()) -> bool:
    """Whether a message of this type (a protobuf Descriptor) can hold a string field."""
    known = _has_strings.get(descriptor.full_name)
    if known is not None:
        return known
    found = False
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            found = True
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.full_name not in visiting:
            found = _holds_strings(field.message_type, visiting | {descriptor.full_name}) or found
    if not visiting:  # a value computed inside a cycle may be partial: keep only top-level ones
        _has_strings[descriptor.full_name] = found
    return found


def non_utf8_field(message: Message) -> str | None:
    """The dotted path of the first string field of `message` that is not valid UTF-8, or None."""
    if not _holds_strings(message.DESCRIPTOR):
        return None
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            values = value if field.is_repeated else (value,)
            if any(not isinstance(v, str) for v in values):
                return field.name
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            for item in value if field.is_repeated else (value,):
                inner = non_utf8_field(item)
                if inner is not None:
                    return f"{field.name}.{inner}"
    return None
