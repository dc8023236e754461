"""Entries: MessageMetadata + payload in checksummed form, the unit the broker stores (WC-5).

Byte layout (big-endian):

    [u16 0x0e01 magic][u32 CRC32C][u32 metadata_size][MessageMetadata][payload]

The CRC32C (Castagnoli) covers [metadata_size][MessageMetadata][payload]. A batch entry's payload
is a batch (see _batch.py), compressed as a whole with metadata.compression.
"""

from __future__ import annotations

import struct

import crc32c as _crc32c
from google.protobuf.message import DecodeError

from velamq._errors import ChecksumMismatchError, ProtocolError
from velamq.protocol import _pulsar_api_pb2 as pb

CHECKSUM_MAGIC = 0x0E01
BROKER_ENTRY_MAGIC = 0x0E02
_HEAD = struct.Struct(">HII")  # magic, crc, metadata_size
_U32 = struct.Struct(">I")
HEAD_BYTES = _HEAD.size  # 10


def crc32c(data: bytes | memoryview) -> int:
    return int(_crc32c.crc32c(data))


def build_entry(metadata: pb.MessageMetadata, payload: bytes) -> bytes:
    meta = metadata.SerializeToString()
    body = _U32.pack(len(meta)) + meta + payload
    return struct.pack(">HI", CHECKSUM_MAGIC, crc32c(body)) + body


def with_checksum(unchecked: bytes | memoryview) -> bytes:
    """[metadata_size][metadata][payload] -> the checksummed form."""
    return struct.pack(">HI", CHECKSUM_MAGIC, crc32c(unchecked)) + unchecked


def verify_entry(entry: bytes | memoryview) -> None:
    if len(entry) < HEAD_BYTES:
        raise ProtocolError("truncated entry")
    magic, expected, meta_size = _HEAD.unpack_from(entry, 0)
    if magic != CHECKSUM_MAGIC:
        raise ProtocolError(f"bad entry magic {magic:#06x}")
    if meta_size > len(entry) - HEAD_BYTES:
        raise ProtocolError(f"metadata size {meta_size} exceeds the entry")
    actual = crc32c(memoryview(entry)[6:])
    if actual != expected:
        raise ChecksumMismatchError(expected, actual)


def entry_metadata_bytes(entry: bytes) -> bytes:
    """The MessageMetadata bytes of a checksummed entry, as they are in it."""
    if len(entry) < HEAD_BYTES:
        raise ProtocolError("truncated entry")
    (meta_size,) = _U32.unpack_from(entry, 6)
    return entry[HEAD_BYTES : HEAD_BYTES + meta_size]


def parse_entry_metadata(entry: bytes) -> pb.MessageMetadata:
    """The MessageMetadata of a checksummed entry (no checksum check: stored entries were verified)."""
    return parse_entry_metadata_bytes(entry)[0]


def parse_entry_metadata_bytes(entry: bytes) -> tuple[pb.MessageMetadata, bytes]:
    """`parse_entry_metadata`, and the metadata's bytes as they are in the entry."""
    if len(entry) < HEAD_BYTES:
        raise ProtocolError("truncated entry")
    metadata = pb.MessageMetadata()
    raw = entry_metadata_bytes(entry)
    try:
        metadata.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ProtocolError(f"undecodable message metadata: {exc}") from None
    if not metadata.IsInitialized():
        raise ProtocolError("message metadata is missing required fields")
    return metadata, raw


def split_entry(entry: bytes) -> tuple[pb.MessageMetadata, bytes]:
    """(metadata, payload) of a checksummed entry; the payload is still compressed."""
    metadata = parse_entry_metadata(entry)
    (meta_size,) = _U32.unpack_from(entry, 6)
    return metadata, entry[HEAD_BYTES + meta_size :]
