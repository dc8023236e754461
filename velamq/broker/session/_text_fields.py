"""Every string field a client sends must be UTF-8: checked before a command does anything.

The protobuf runtime (upb) does not check proto2 `string` fields when it parses: a field whose
bytes are not UTF-8 comes out as `bytes` instead of `str`. Left alone, such a value became a
producer name, a subscription name or a property, was registered and stored, and later broke
what reads it (a 500 from /stats, tracebacks from name parsing). So the connection asks
`non_utf8_command_field` of each command before its handler runs, and the producer commands ask
`non_utf8_field` of each SEND's MessageMetadata; the answer is the dotted path of the first
offending field, for the error message ("producer.producer_name is not valid UTF-8").

Two ways to check, both worked out once per message type:

- From the wire bytes (a SEND's metadata, once per entry, issue 12): upb does check `string`
  fields of proto3 messages when it parses, exactly as Python decodes UTF-8 (surrogates and
  overlong forms refused). So each type gets a proto3 twin holding only its string-bearing fields
  (nested twins for nested messages); parsing the wire bytes into the twin is the whole check,
  about 0.2 µs in C. Only when it fails is the message read to name the field.
- From the message: a plan of the string-bearing fields, the singular strings and the repeated
  fields each read with one `attrgetter` call. A command body without strings (SEND, FLOW, ACK)
  costs a dictionary lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

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


def _string_bearing(descriptor: Any) -> list[Any]:
    """The fields of a type that are strings or messages that can hold one, by field number."""
    return [
        f for f in sorted(descriptor.fields, key=lambda f: f.number)
        if f.type == FieldDescriptor.TYPE_STRING
        or (f.type == FieldDescriptor.TYPE_MESSAGE and _holds_strings(f.message_type))
    ]


# ---- from the wire: a proto3 twin ---------------------------------------------------------------

_twin_pool = descriptor_pool.DescriptorPool()
_twins: dict[type[Message], type[Message]] = {}


def _twin_name(descriptor: Any) -> str:
    return str(descriptor.full_name).replace(".", "_")


def _twin_of(message_type: type[Message]) -> type[Message]:
    """The class of the proto3 twin of `message_type` (made on first use)."""
    twin = _twins.get(message_type)
    if twin is not None:
        return twin
    root = message_type.DESCRIPTOR
    package = f"velamq.utf8.{_twin_name(root)}"
    file = descriptor_pb2.FileDescriptorProto(name=f"{package}.proto", package=package, syntax="proto3")
    pending, made = [root], set()
    while pending:
        descriptor = pending.pop()
        if descriptor.full_name in made:
            continue
        made.add(descriptor.full_name)
        twin_type = file.message_type.add(name=_twin_name(descriptor))
        for field in _string_bearing(descriptor):
            label = FieldDescriptor.LABEL_REPEATED if field.is_repeated else FieldDescriptor.LABEL_OPTIONAL
            twin_field = twin_type.field.add(name=field.name, number=field.number, label=label, type=field.type)
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                twin_field.type_name = f".{package}.{_twin_name(field.message_type)}"
                pending.append(field.message_type)
    _twin_pool.Add(file)
    twin_class = message_factory.GetMessageClass(_twin_pool.FindMessageTypeByName(f"{package}.{_twin_name(root)}"))
    _twins[message_type] = twin_class
    return twin_class


# ---- from the message: a plan of the fields to read --------------------------------------------


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
    """The string-bearing fields of one message type, by how they are read."""

    strings: tuple[str, ...]  # singular string fields
    read_strings: Callable[[Message], tuple[Any, ...]] | None
    lists: tuple[tuple[str, bool], ...]  # repeated fields: (name, True for messages / False for strings)
    read_lists: Callable[[Message], tuple[Any, ...]] | None
    messages: tuple[str, ...]  # singular message fields that can hold strings

    @classmethod
    def of(cls, descriptor: Any) -> _Plan:
        strings: list[str] = []
        lists: list[tuple[str, bool]] = []
        messages: list[str] = []
        for field in _string_bearing(descriptor):
            is_string = field.type == FieldDescriptor.TYPE_STRING
            if field.is_repeated:
                lists.append((field.name, not is_string))
            elif is_string:
                strings.append(field.name)
            else:
                messages.append(field.name)
        return cls(tuple(strings), _getter(strings), tuple(lists), _getter([n for n, _ in lists]), tuple(messages))


_plans: dict[type[Message], _Plan] = {}
_ONLY_STR = {str}


def non_utf8_field(message: Message, wire: bytes | None = None) -> str | None:
    """The dotted path of a string field of `message` that is not valid UTF-8, or None.

    `wire`: the bytes `message` was parsed from, if the caller has them; then the check is one
    parse into the type's proto3 twin, and the message is read only if that fails."""
    if wire is not None:
        twin = _twins.get(type(message)) or _twin_of(type(message))
        try:
            # A new message each time: parsing into a kept one would grow its arena (upb frees
            # an arena only with its message) by a copy of every SEND's metadata, without end.
            twin.FromString(wire)
            return None
        except DecodeError:
            pass  # a string is not UTF-8: find out which below
    plan = _plans.get(type(message))
    if plan is None:
        plan = _plans[type(message)] = _Plan.of(message.DESCRIPTOR)
    if plan.read_strings is not None:
        strings = plan.read_strings(message)
        if set(map(type, strings)) != _ONLY_STR:  # all in C: the common case is one set lookup
            for name, value in zip(plan.strings, strings, strict=True):
                if type(value) is not str:
                    return name
    lists = plan.read_lists(message) if plan.read_lists is not None else ()
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
    if not _BODY_HOLDS_STRINGS[command.type]:
        return None  # SEND, FLOW, ACK...: nothing to check
    inner = non_utf8_field(getattr(command, body))
    return None if inner is None else f"{body}.{inner}"


# BaseCommand's body fields are numbered as the command types they belong to.
_BODY_OF_TYPE = {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.number > 1}
_BODY_HOLDS_STRINGS = {
    f.number: _holds_strings(f.message_type) for f in pb.BaseCommand.DESCRIPTOR.fields if f.number > 1
}
