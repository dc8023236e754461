"""Reading offloaded ledgers straight from their Parquet files, in the executors (docs/offload.md).

With the `offloadPath` option (the root the broker offloads to: a path, file://, or s3://bucket
with pyarrow's query parameters, e.g. s3://tier?endpoint_override=minio:9000&scheme=http), the
planner splits each partition's range (start, end] at its offloaded ledgers: one task per
offloaded ledger the range covers reads that ledger's file with pyarrow and no broker round trip;
the rest of the range (the ledgers still local) is read through the broker as before. Offsets,
ranges and exactly-once do not change: a range yields the same messages either way.

A task reads its ledger's file (`<root>/<domain>/<tenant>/<namespace>/<topic>/ledger-<id:020d>
.parquet`, the layout of docs/offload.md), keeps the rows with start < (ledger, entry, batch
index) <= end, and builds the source's columns from them, with the message ids the broker path
gives (serialized MessageIdData), leaving out the broker's replicated-subscription markers (which the
broker never delivers either). It falls back to the broker for its range when the file is
missing (retention deleted it meanwhile: the broker path reports the data loss), or holds encrypted
payloads or chunks (the broker path delivers those as the reader would), or values are decoded by a
schema (decodeValues).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.fs as pafs  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from velamq.client import MessageId
from velamq.spark._admin import ConnectorAdmin, parse_topic
from velamq.spark._offsets import WHOLE, PartitionOffset
from velamq.spark._read import TopicRange, read_range
from velamq.spark._schema import arrow_schema, source_schema

log = logging.getLogger("velamq.spark")

_COLUMNS = ["entry_id", "batch_index", "batch_size", "key", "value", "properties", "event_time", "publish_time",
            "encrypted", "num_chunks", "producer_name", "sequence_id"]
# The broker's own markers (replicated subscriptions, RP-10) are messages of this producer with
# sequence id 0, as Pulsar writes them; the broker never delivers them, and neither does this path.
MARKER_PRODUCER = "pulsar.marker"


class OffloadedRange(TopicRange):
    """A task over one offloaded ledger: the messages of (start, end] inside ledger_id."""

    def __init__(self, base: TopicRange, ledger_id: int, root: str) -> None:
        super().__init__(base.topic, base.partition, base.partition_topic, base.start, base.end, base.settings)
        self.ledger_id = ledger_id
        self.root = root

    def __repr__(self) -> str:
        return f"OffloadedRange({self.partition_topic} ledger {self.ledger_id}, ({self.start}, {self.end}])"


def ledger_file(root: str, partition_topic: str, ledger_id: int) -> str:
    """The ledger's Parquet file under the root (docs/offload.md, "The layout")."""
    domain, _, rest = partition_topic.partition("://")
    parts = [domain, *rest.split("/")]
    directory = "/".join(quote(part, safe="-_.=:") for part in parts)
    return f"{root.rstrip('/')}/{directory}/ledger-{ledger_id:020d}.parquet"


def split_offloaded(ranges: list[TopicRange], admin: ConnectorAdmin, root: str) -> list[TopicRange]:
    """Each range cut at its partition's offloaded ledgers: a task per offloaded ledger, and the
    rest through the broker, starting before the first ledger not offloaded (so the broker's
    reader, which starts at its start entry, reads nothing offloaded)."""
    out: list[TopicRange] = []
    for task in ranges:
        rest_start = task.start
        for ledger_id, entries, offloaded in admin.ledger_flags(parse_topic(task.partition_topic)):
            if not offloaded:
                if rest_start > task.start:
                    rest_start = max(rest_start, PartitionOffset(ledger_id, -1, -1))
                break
            if entries <= 0:
                continue
            first, last = PartitionOffset(ledger_id, -1, -1), PartitionOffset(ledger_id, entries - 1, -1)
            lo, hi = max(task.start, first), min(task.end, last)
            if hi > lo:
                part = TopicRange(task.topic, task.partition, task.partition_topic, lo, hi, task.settings)
                out.append(OffloadedRange(part, ledger_id, root))
            rest_start = max(rest_start, last)
        if task.end > rest_start:
            out.append(TopicRange(task.topic, task.partition, task.partition_topic, rest_start, task.end,
                                  task.settings))
    return out


def read_task(task: TopicRange) -> Iterator[Any]:
    """What a Spark task reads: an offloaded ledger's file, or a range through the broker."""
    if isinstance(task, OffloadedRange):
        return _read_offloaded(task)
    return read_range(task)


def _broker(task: OffloadedRange) -> TopicRange:
    return TopicRange(task.topic, task.partition, task.partition_topic, task.start, task.end, task.settings)


def _read_offloaded(task: OffloadedRange) -> Iterator[Any]:
    if task.settings.decoding is not None:
        yield from read_range(_broker(task))
        return
    fs, path = pafs.FileSystem.from_uri(ledger_file(task.root, task.partition_topic, task.ledger_id))
    try:
        table = pq.read_table(path, filesystem=fs, columns=_COLUMNS)
    except FileNotFoundError:
        log.info("%r: the file is gone, reading the range through the broker", task)
        yield from read_range(_broker(task))
        return
    table = table.filter(pc.and_(_in_range(table, task.ledger_id, task.start, task.end), _not_marker(table)))
    if table.num_rows and (pc.any(table.column("encrypted")).as_py() or table.column("num_chunks").null_count
                           != table.num_rows):
        yield from read_range(_broker(task))  # encrypted or chunked: as the reader delivers them
        return
    if table.num_rows:
        yield _source_batch(table, task)


def _in_range(table: pa.Table, ledger_id: int, start: PartitionOffset, end: PartitionOffset) -> pa.Array:
    entry = table.column("entry_id")
    index = pc.if_else(pc.less(table.column("batch_index"), 0), WHOLE, table.column("batch_index"))
    mask = pa.scalar(True)
    if start.ledger_id == ledger_id:
        s_entry, s_index = start.key()[1:]
        after = pc.or_(pc.greater(entry, s_entry), pc.and_(pc.equal(entry, s_entry), pc.greater(index, s_index)))
        mask = pc.and_(mask, after)
    if end.ledger_id == ledger_id:
        e_entry, e_index = end.key()[1:]
        upto = pc.or_(pc.less(entry, e_entry), pc.and_(pc.equal(entry, e_entry), pc.less_equal(index, e_index)))
        mask = pc.and_(mask, upto)
    if start.ledger_id > ledger_id or end.ledger_id < ledger_id:
        mask = pa.scalar(False)
    return pc.and_(pc.equal(entry, entry), mask)  # an array as long as the table


def _not_marker(table: pa.Table) -> pa.Array:
    marker = pc.and_(pc.equal(table.column("producer_name"), MARKER_PRODUCER), pc.equal(table.column("sequence_id"), 0))
    return pc.invert(pc.fill_null(marker, False))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _message_ids(ledger_id: int, partition: int, entries: list[int], indexes: list[int],
                 sizes: list[int]) -> list[bytes]:
    """Serialized MessageIdData of each row, byte for byte what MessageId.serialize() gives: the
    entry's id without a batch index, then batch_index (field 4) and batch_size (field 6), as
    protobuf writes them in field order. One serialize per entry, not per message."""
    out: list[bytes] = []
    entry_prefix: dict[int, bytes] = {}
    index_fields: dict[int, bytes] = {}
    size_fields: dict[int, bytes] = {}
    for entry_id, index, size in zip(entries, indexes, sizes, strict=True):
        prefix = entry_prefix.get(entry_id)
        if prefix is None:
            prefix = entry_prefix[entry_id] = MessageId(ledger_id, entry_id, partition).serialize()
        if index < 0:
            out.append(prefix)
            continue
        field = index_fields.get(index)
        if field is None:
            field = index_fields[index] = b"\x20" + _varint(index)
        suffix = size_fields.get(size)
        if suffix is None:
            suffix = size_fields[size] = b"\x30" + _varint(size)
        out.append(prefix + field + suffix)
    return out


def _source_batch(table: pa.Table, task: OffloadedRange) -> Any:
    """The source's columns, as the broker path makes them (velamq.client's Messages.to_arrow)."""
    include_properties = task.settings.include_properties
    schema = arrow_schema(source_schema(include_properties))
    n = table.num_rows
    entries = table.column("entry_id").to_pylist()
    indexes = table.column("batch_index").to_pylist()
    sizes = table.column("batch_size").to_pylist()
    ids = _message_ids(task.ledger_id, task.partition, entries, indexes, sizes)
    columns = {
        "key": table.column("key"),
        "value": table.column("value"),
        "topic": pa.repeat(pa.scalar(task.topic, pa.string()), n),
        "partition": pa.repeat(pa.scalar(task.partition, pa.int32()), n),
        "messageId": pa.array(ids, pa.binary()),
        "publishTime": table.column("publish_time"),
        "eventTime": table.column("event_time"),
    }
    if include_properties:
        columns["properties"] = table.column("properties")
    arrays = [pa.chunked_array(columns[f.name]).combine_chunks().cast(f.type) if isinstance(columns[f.name],
              pa.ChunkedArray) else columns[f.name].cast(f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
