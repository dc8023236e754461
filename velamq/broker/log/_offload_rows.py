"""Stored entries as offloaded rows, one per message, and back to the exact stored bytes: the
broker's EntryRows (velamq/storage/offload/_codec.py), handed to Storage by the composition root,
since storage itself never reads the Pulsar entry format. An offloaded ledger must give
consumers back what the broker would have sent from the local copy (the broker sends stored
entries as they are and never unpacks a batch), so the rows keep, beside the columns a query
engine reads, what rebuilds each entry byte for byte:

    entry_metadata    the entry's MessageMetadata bytes, on the first row of each entry (null on
                      the others)
    message_metadata  a batched message's SingleMessageMetadata bytes (null when unbatched)
    value             the message's payload, decompressed (a batch is undone into its messages);
                      an encrypted entry is one row whose value is the payload as stored
    entry_payload     null, unless rebuilding the payload from the rows did not give the stored
                      bytes back (a compressor that is not this one's, trailing bytes): then the
                      stored payload itself, so a rebuild is exact in every case

A rebuild compresses the re-joined batch with the entry's codec and compares: `to_rows` checks every
entry this way when it offloads it, and keeps `entry_payload` where the check fails.
"""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError

from velamq._errors import ProtocolError, StorageError, VelamqError
from velamq.protocol import compress, decompress, pb, with_checksum
from velamq.storage import RowColumns

_U32 = struct.Struct(">I")
_MAGIC = struct.Struct(">H")
_CHECKSUM_MAGIC = 0x0E01
_HEAD = 10  # [u16 magic][u32 crc][u32 metadata size]

def _metadata(entry: bytes) -> tuple[pb.MessageMetadata, bytes, bytes]:
    if len(entry) < _HEAD:
        raise StorageError("an entry too short to be a message: cannot offload it")
    magic, size = _MAGIC.unpack_from(entry, 0)[0], _U32.unpack_from(entry, 6)[0]
    if magic != _CHECKSUM_MAGIC or size > len(entry) - _HEAD:
        raise StorageError("an entry that is not a checksummed message: cannot offload it")
    raw = entry[_HEAD : _HEAD + size]
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise StorageError(f"an entry whose metadata does not decode ({exc}): cannot offload it") from None
    if not metadata.IsInitialized():
        raise StorageError("an entry whose metadata lacks required fields: cannot offload it")
    return metadata, raw, entry[_HEAD + size :]


def _split_batch(payload: bytes, count: int) -> list[tuple[bytes, pb.SingleMessageMetadata, bytes]]:
    """(single metadata bytes, parsed, value) of each message of an uncompressed batch."""
    out = []
    o = 0
    for _ in range(count):
        (size,) = _U32.unpack_from(payload, o)
        raw = payload[o + 4 : o + 4 + size]
        single = pb.SingleMessageMetadata()
        single.ParseFromString(raw)
        o += 4 + size
        value = payload[o : o + single.payload_size]
        if len(value) != single.payload_size:
            raise ProtocolError("truncated batch")
        o += single.payload_size
        out.append((raw, single, value))
    return out


def _entry_columns(metadata: pb.MessageMetadata) -> dict[str, object]:
    """The columns every row of an entry shares."""
    chunked = metadata.HasField("num_chunks_from_msg") and metadata.num_chunks_from_msg > 1
    return {
        "publish_time": metadata.publish_time,
        "producer_name": metadata.producer_name,
        "schema_version": metadata.schema_version if metadata.HasField("schema_version") else None,
        "encrypted": bool(metadata.encryption_keys),
        "encryption_keys": [{"key": k.key, "value": k.value} for k in metadata.encryption_keys] or None,
        "chunk_uuid": metadata.uuid if chunked else None,
        "chunk_id": metadata.chunk_id if chunked else None,
        "num_chunks": metadata.num_chunks_from_msg if chunked else None,
    }


def _properties(kvs: object) -> list[tuple[str, str]] | None:
    out = [(kv.key, kv.value) for kv in kvs]  # type: ignore[attr-defined]
    return out or None


def _opaque(metadata: pb.MessageMetadata) -> bool:
    """An encrypted payload, or a chunk (a piece of a larger, compressed message), is kept as stored."""
    return bool(metadata.encryption_keys) or metadata.num_chunks_from_msg > 1


def _join_batch(messages: list[tuple[bytes, bytes]]) -> bytes:
    parts: list[bytes] = []
    for raw, value in messages:
        parts += (_U32.pack(len(raw)), raw, value)
    return b"".join(parts)


def add_entry(rows: RowColumns, ledger_id: int, entry_id: int, entry: bytes) -> None:
    """Append the rows of one stored entry (a checksummed Pulsar entry)."""
    metadata, meta_raw, payload = _metadata(entry)
    shared = _entry_columns(metadata)
    shared["entry_id"] = entry_id
    batched = metadata.HasField("num_messages_in_batch")
    codec, size = metadata.compression, metadata.uncompressed_size
    try:
        if _opaque(metadata) or not batched:
            value = payload if _opaque(metadata) else decompress(codec, payload, size)
            exact = _opaque(metadata) or compress(codec, value) == payload
            shared["batch_size"] = metadata.num_messages_in_batch if batched else 0
            rows.add(shared, {
                "batch_index": [-1], "value": [value], "sequence_id": [metadata.sequence_id],
                "key": [metadata.partition_key if metadata.HasField("partition_key") else None],
                "properties": [_properties(metadata.properties)], "event_time": [metadata.event_time or None],
                "ordering_key": [metadata.ordering_key if metadata.HasField("ordering_key") else None],
                "entry_metadata": [meta_raw], "entry_payload": [None if exact else payload],
            }, 1)
            return
        messages = _split_batch(decompress(codec, payload, size), metadata.num_messages_in_batch)
    except (DecodeError, RuntimeError, ValueError, struct.error, VelamqError) as exc:
        raise StorageError(f"entry {ledger_id}:{entry_id} does not decode ({exc}): cannot offload it") from None
    exact = compress(codec, _join_batch([(raw, value) for raw, _, value in messages])) == payload
    count = len(messages)
    shared["batch_size"] = count
    singles = [single for _, single, _ in messages]
    base_sequence = metadata.sequence_id
    columns: dict[str, list[object]] = {
        "batch_index": list(range(count)),
        "value": [value for _, _, value in messages],
        "message_metadata": [raw for raw, _, _ in messages],
        "sequence_id": [s.sequence_id if s.HasField("sequence_id") else base_sequence + i
                        for i, s in enumerate(singles)],
        "entry_metadata": [meta_raw, *[None] * (count - 1)],
        "entry_payload": [None if exact else payload, *[None] * (count - 1)],
    }
    if any(s.HasField("partition_key") for s in singles):
        columns["key"] = [s.partition_key if s.HasField("partition_key") else None for s in singles]
    if any(s.properties for s in singles):
        columns["properties"] = [_properties(s.properties) for s in singles]
    if any(s.event_time for s in singles):
        columns["event_time"] = [s.event_time or None for s in singles]
    if any(s.HasField("ordering_key") for s in singles):
        columns["ordering_key"] = [s.ordering_key if s.HasField("ordering_key") else None for s in singles]
    rows.add(shared, columns, count)


def rebuild_entry(entry_metadata: bytes, entry_payload: bytes | None, value: bytes, framed: bytes | None) -> bytes:
    """The stored entry from its rows' reconstruction columns (EntryRows.rebuild_entry): a batch's
    framed rows are the uncompressed batch payload itself ([u32 size][SingleMessageMetadata][value]
    per message, _batch.py), compressed again with the entry's codec."""
    if entry_payload is None:
        metadata = pb.MessageMetadata()
        metadata.ParseFromString(entry_metadata)
        if _opaque(metadata):
            entry_payload = value
        else:
            entry_payload = compress(metadata.compression, framed if framed is not None else value)
    return with_checksum(_U32.pack(len(entry_metadata)) + entry_metadata + entry_payload)


class PulsarEntryRows:
    """The EntryRows of Pulsar entries (checksummed MessageMetadata + payload, WC-5)."""

    def add_entry(self, rows: RowColumns, ledger_id: int, entry_id: int, entry: bytes) -> None:
        add_entry(rows, ledger_id, entry_id, entry)

    def rebuild_entry(self, entry_metadata: bytes, entry_payload: bytes | None, value: bytes,
                      framed: bytes | None) -> bytes:
        return rebuild_entry(entry_metadata, entry_payload, value, framed)
