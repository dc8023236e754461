"""Every string field a client sends must be UTF-8: checked before a command does anything.

The protobuf runtime (upb) does not check proto2 `string` fields when it parses: a field whose
bytes are not UTF-8 comes out as `bytes` instead of `str`. Left alone, such a value became a
producer name, a subscription name or a property, was registered and stored, and later broke
what reads it (a 500 from /stats, tracebacks from name parsing). So the connection asks
`non_utf8_field` of each command before its handler runs, and the producer commands ask it of each
SEND's MessageMetadata; the answer is the dotted path of the first offending field, for the error
message ("producer.producer_name is not valid UTF-8").

Which fields of a message type can hold a string (directly or in a nested message) is worked out
once per type into a plan. Checking a message then reads just those fields, the singular strings
and the repeated fields each with one `attrgetter` call: a command body without strings (SEND,
FLOW, ACK) costs a dictionary lookup, and a SEND's MessageMetadata (checked for every entry, issue
12) about a microsecond instead of a walk over every set field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from velamq.protocol import pb

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


def _getter(names: list[str]) -> Callable[[Message], tuple[Any, ...]] | None:
    """One C call that reads every named field, as a tuple (attrgetter of one name is no tuple)."""
    if not names:
        return None
    if len(names) == 1:
        get_one = attrgetter(names[0])
        return lambda message: (get_one(message),)
    return attrgetter(*names)


@dataclass(frozen=True, slots=True)
class _Plan:
    """The string-bearing fields of one message type, by how they are checked."""

    strings: tuple[str, ...]  # singular string fields
    read_strings: Callable[[Message], tuple[Any, ...]] | None
    lists: tuple[tuple[str, bool], ...]  # repeated fields: (name, True for messages / False for strings)
    read_lists: Callable[[Message], tuple[Any, ...]] | None
    # Finds a repeated field's tag in the message's wire bytes; no match: every one of them is empty.
    list_tags: re.Pattern[bytes] | None
    messages: tuple[str, ...]  # singular message fields that can hold strings

    @classmethod
    def of(cls, descriptor: Any) -> _Plan:
        strings: list[str] = []
        lists: list[tuple[str, bool]] = []
        tags: list[bytes] = []
        messages: list[str] = []
        for field in sorted(descriptor.fields, key=lambda f: f.number):
            is_string = field.type == FieldDescriptor.TYPE_STRING
            is_message = field.type == FieldDescriptor.TYPE_MESSAGE and _holds_strings(field.message_type)
            if not is_string and not is_message:
                continue
            if field.is_repeated:
                lists.append((field.name, not is_string))
                tags.append(_length_delimited_tag(field.number))
            elif is_string:
                strings.append(field.name)
            else:
                messages.append(field.name)
        list_tags = re.compile(b"|".join(re.escape(tag) for tag in tags)) if tags else None
        return cls(
            tuple(strings), _getter(strings), tuple(lists), _getter([n for n, _ in lists]), list_tags, tuple(messages)
        )


def _length_delimited_tag(number: int) -> bytes:
    """A string or message field's tag as it is on the wire: varint(number << 3 | 2)."""
    value = number << 3 | 2
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_plans: dict[type[Message], _Plan] = {}
_ONLY_STR = {str}


def non_utf8_field(message: Message, wire: bytes | None = None) -> str | None:
    """The dotted path of a string field of `message` that is not valid UTF-8, or None.

    `wire`: the bytes `message` was parsed from, if the caller has them. A repeated field whose
    tag is nowhere in them is empty and is not read: reading one makes its container (a Python
    object) on a freshly parsed message, the costliest part of the check."""
    plan = _plans.get(type(message))
    if plan is None:
        plan = _plans[type(message)] = _Plan.of(message.DESCRIPTOR)
    if plan.read_strings is not None:
        strings = plan.read_strings(message)
        if set(map(type, strings)) != _ONLY_STR:  # all in C: the common case is one set lookup
            for name, value in zip(plan.strings, strings, strict=True):
                if type(value) is not str:
                    return name
    if plan.read_lists is None or (wire is not None and plan.list_tags is not None and not plan.list_tags.search(wire)):
        lists: tuple[Any, ...] = ()
    else:
        lists = plan.read_lists(message)
    if any(lists):  # most messages leave every repeated field empty
        for (name, of_messages), values in zip(plan.lists, lists, strict=True):
            if not values:
                continue
            if not of_messages:
                if any(type(value) is not str for value in values):
                    return name
                continue
            for item in values:
                inner = non_utf8_field(item)
                if inner is not None:
                    return f"{name}.{inner}"
    for name in plan.messages:
        if message.HasField(name):
            inner = non_utf8_field(getattr(message, name))
            if inner is not None:
                return f"{name}.{inner}"
    return None


def non_utf8_command_field(command: pb.BaseCommand) -> str | None:
    """`non_utf8_field` of a BaseCommand, reading only its body (the field its type names: the
    other fields are never read), which spares walking the command (a microsecond or two)."""
    body = _BODY_OF_TYPE.get(command.type)
    if body is None:
        return non_utf8_field(command)
    inner = non_utf8_field(getattr(command, body))
    return None if inner is None else f"{body}.{inner}"


# BaseCommand's body fields are numbered as the command types they belong to.
_BODY_OF_TYPE = {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.number > 1}
