"""Batches: many messages in one entry (PR-6, PR-7).

Byte layout of an uncompressed batch payload, repeated once per message (big-endian):

    [u32 single_metadata_size][SingleMessageMetadata][payload of single_metadata.payload_size bytes]

The entry's MessageMetadata has num_messages_in_batch = N and compression / uncompressed_size
for the whole batch payload.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from velamq._errors import ProtocolError
from velamq.protocol import _pulsar_api_pb2 as pb
from velamq.protocol._compression import decompress
from velamq.protocol._entry import split_entry

_U32 = struct.Struct(">I")


def build_batch(messages: Iterable[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    parts: list[bytes] = []
    for single, payload in messages:
        single.payload_size = len(payload)
        meta = single.SerializeToString()
        parts.append(_U32.pack(len(meta)))
        parts.append(meta)
        parts.append(payload)
    return b"".join(parts)


def parse_batch(payload: bytes, count: int) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    out: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    offset = 0
    for _ in range(count):
        if len(payload) - offset < 4:
            raise ProtocolError("truncated batch: missing single-message metadata size")
        (meta_size,) = _U32.unpack_from(payload, offset)
        offset += 4
        if meta_size > len(payload) - offset:
            raise ProtocolError("truncated batch: single-message metadata")
        single = pb.SingleMessageMetadata()
        try:
            single.ParseFromString(payload[offset : offset + meta_size])
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise ProtocolError(f"undecodable single-message metadata: {exc}") from None
        offset += meta_size
        if not single.HasField("payload_size"):
            # Required in the protocol (proto2): the Java client refuses such a batch too. Without
            # it a message would silently read as empty.
            raise ProtocolError("single-message metadata without payload_size")
        size = single.payload_size
        if size < 0 or size > len(payload) - offset:
            raise ProtocolError("truncated batch: payload")
        out.append((single, payload[offset : offset + size]))
        offset += size
    return out


def entry_messages(entry: bytes) -> tuple[pb.MessageMetadata, list[tuple[pb.SingleMessageMetadata | None, bytes]]]:
    """Decompress an entry and return its messages; an unbatched entry is one message with no
    single-message metadata."""
    metadata, payload = split_entry(entry)
    payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    if metadata.HasField("num_messages_in_batch"):
        batch = parse_batch(payload, metadata.num_messages_in_batch)
        return metadata, [(s, p) for s, p in batch]
    return metadata, [(None, payload)]
