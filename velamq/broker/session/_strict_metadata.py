"""A SEND's MessageMetadata checked in one parse: decodable, required fields set, strings UTF-8.

Every SEND's metadata must decode (consumers read it), carry its proto2 `required` fields and hold
only UTF-8 strings (_text_fields.py). Done as the protobuf runtime offers it, that is two parses
per entry: the MessageMetadata itself (upb checks no proto2 string) and its proto3 twin (upb checks
proto3 strings), plus IsInitialized(). Issue 22 counts each in the broker's cost per entry.

Here the whole of _pulsar_api.proto is rebuilt once as an editions (2023) file: the same messages,
field numbers and types, `required` kept as LEGACY_REQUIRED, strings with VERIFY (edition 2023's
default: upb refuses bad UTF-8 while it parses), closed enums and expanded repeated scalars as in
proto2. Parsing a SEND's metadata bytes into that strict twin and asking IsInitialized() accepts
exactly what the two parses and the check accept, in one parse. A refused one is parsed the old way
to say why (the error names the field). The broker reads the metadata itself only for a chunk.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

from velamq.protocol import pb

_PACKAGE = "velamq.strict"


def _strict_file() -> descriptor_pb2.FileDescriptorProto:
    source = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(source)
    old_prefix = f".{source.package}."
    file = descriptor_pb2.FileDescriptorProto()
    file.CopyFrom(source)
    file.name = "velamq/strict_pulsar_api.proto"
    file.package = _PACKAGE
    file.syntax = "editions"
    file.edition = descriptor_pb2.EDITION_2023
    file.options.ClearField("optimize_for")
    file.options.features.utf8_validation = descriptor_pb2.FeatureSet.VERIFY
    file.options.features.enum_type = descriptor_pb2.FeatureSet.CLOSED
    file.options.features.repeated_field_encoding = descriptor_pb2.FeatureSet.EXPANDED
    pending: list[Any] = list(file.message_type)
    while pending:
        message = pending.pop()
        pending.extend(message.nested_type)
        for field in message.field:
            if field.type_name.startswith(old_prefix):
                field.type_name = f".{_PACKAGE}.{field.type_name[len(old_prefix):]}"
            if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED:
                field.label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
                field.options.features.field_presence = descriptor_pb2.FeatureSet.LEGACY_REQUIRED
            if field.options.HasField("packed"):  # proto2's [packed = true] is a feature in editions
                field.options.ClearField("packed")
                field.options.features.repeated_field_encoding = descriptor_pb2.FeatureSet.PACKED
    return file


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_strict_file())
_StrictMetadata: type[Message] = message_factory.GetMessageClass(
    _pool.FindMessageTypeByName(f"{_PACKAGE}.MessageMetadata")
)


def metadata_accepted(raw: bytes) -> bool:
    """Whether these MessageMetadata bytes decode, carry every required field and hold only UTF-8
    strings. A new message each time: parsing into a kept one would grow its arena (upb frees an
    arena only with its message) by a copy of every SEND's metadata, without end."""
    try:
        return bool(_StrictMetadata.FromString(raw).IsInitialized())
    except (DecodeError, RuntimeError, ValueError):  # as parse_entry_metadata_bytes catches
        return False
