"""Parquet files of offloaded ledgers: the Arrow schema, writing one ledger, reading a row group.

One file per ledger, one row per message (_codec.py has the columns; the EntryRows given to
Storage makes the rows of entries and the entries of rows). Row
groups hold whole entries, at most row_group_rows rows or row_group_bytes of values each (a reader
fetches and caches a row group at a time, so it is the unit of memory as well as of I/O). The
file's key-value metadata names the topic and the ledger, so a file found alone still says what
it is. Everything here blocks: call it from the offloader's threads.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.fs as pafs  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from velamq.storage.offload._codec import COLUMNS, ENTRY_COLUMNS, MESSAGE_COLUMNS, EntryRows, RowColumns

_KV = pa.struct([("key", pa.string()), ("value", pa.binary())])
_TS = pa.timestamp("ms", tz="UTC")

SCHEMA = pa.schema([
    ("ledger_id", pa.int64()),
    ("entry_id", pa.int64()),
    ("batch_index", pa.int32()),
    ("batch_size", pa.int32()),
    ("partition", pa.int32()),
    ("key", pa.string()),
    ("value", pa.binary()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("event_time", _TS),
    ("publish_time", _TS),
    ("producer_name", pa.string()),
    ("sequence_id", pa.int64()),
    ("ordering_key", pa.binary()),
    ("schema_version", pa.binary()),
    ("encrypted", pa.bool_()),
    ("encryption_keys", pa.list_(_KV)),
    ("chunk_uuid", pa.string()),
    ("chunk_id", pa.int32()),
    ("num_chunks", pa.int32()),
    ("entry_metadata", pa.binary()),
    ("message_metadata", pa.binary()),
    ("entry_payload", pa.binary()),
])
assert tuple(SCHEMA.names) == COLUMNS

# The columns a rebuild of the stored entries reads (a consumer's read of an offloaded ledger).
REBUILD_COLUMNS = ["entry_id", "value", "entry_metadata", "message_metadata", "entry_payload"]


@dataclass(frozen=True, slots=True)
class RowGroup:
    """Entries first_entry..last_entry of the ledger are the rows of this row group."""

    first_entry: int
    last_entry: int
    rows: int

    def to_json(self) -> list[int]:
        return [self.first_entry, self.last_entry, self.rows]


@dataclass(frozen=True, slots=True)
class WriteLimits:
    row_group_rows: int = 65536
    row_group_bytes: int = 16 << 20
    compression: str = "zstd"


def _table(rows: RowColumns, ledger_id: int, metadata: dict[bytes, bytes]) -> pa.Table:
    """The rows as a table: entry columns made once per entry and repeated over its rows (a take),
    message columns as they are, the file's constants filled in."""
    index = pa.array([k for k, count in enumerate(rows.counts) for _ in range(count)], type=pa.int32())
    entries = pa.table({name: pa.array(rows.entries[name], type=SCHEMA.field(name).type) for name in ENTRY_COLUMNS})
    repeated = entries.take(index)
    n = rows.rows
    columns: dict[str, pa.Array] = {
        "ledger_id": pa.repeat(pa.scalar(ledger_id, pa.int64()), n),
        "partition": pa.repeat(pa.scalar(rows.partition, pa.int32()), n),
    }
    for name in ENTRY_COLUMNS:
        columns[name] = repeated.column(name)
    for name in MESSAGE_COLUMNS:
        columns[name] = pa.array(rows.messages[name], type=SCHEMA.field(name).type)
    return pa.table([columns[name] for name in COLUMNS], schema=SCHEMA.with_metadata(metadata))


class LedgerFileWriter:
    """One ledger's Parquet file, written as its entries come (entry id, stored bytes, in order):
    `add` as often as needed, then `close` (the file appears whole) or `abort` (nothing is left).
    The file appears whole or not at all where the filesystem can promise it (a local file is
    written aside and renamed; an S3 object exists only once its upload completes)."""

    def __init__(self, fs: pafs.FileSystem, path: str, *, ledger_id: int, topic: str, partition: int,
                 limits: WriteLimits, codec: EntryRows) -> None:
        self._fs = fs
        self._codec = codec
        self._path = path
        self._aside = _aside(fs, path)
        self._ledger_id = ledger_id
        self._limits = limits
        self._metadata = {b"velamq.topic": topic.encode(), b"velamq.ledger_id": str(ledger_id).encode(),
                          b"velamq.format": b"1"}
        self._sink = fs.open_output_stream(self._aside)
        self._writer = pq.ParquetWriter(self._sink, SCHEMA.with_metadata(self._metadata),
                                        compression=limits.compression,
                                        write_statistics=["ledger_id", "entry_id", "publish_time"])
        self._rows = RowColumns(partition)
        self._first = -1
        self._last = -1
        self._value_bytes = 0
        self.groups: list[RowGroup] = []

    def add(self, entries: Iterable[tuple[int, bytes]]) -> None:
        limits = self._limits
        for entry_id, data in entries:
            if self._first < 0:
                self._first = entry_id
            self._codec.add_entry(self._rows, self._ledger_id, entry_id, data)
            self._last = entry_id
            self._value_bytes += len(data)
            if self._rows.rows >= limits.row_group_rows or self._value_bytes >= limits.row_group_bytes:
                self._flush()

    def _flush(self) -> None:
        rows = self._rows
        if rows.rows:
            self._writer.write_table(_table(rows, self._ledger_id, self._metadata), row_group_size=rows.rows)
            self.groups.append(RowGroup(self._first, self._last, rows.rows))
        self._rows = RowColumns(rows.partition)
        self._first, self._value_bytes = -1, 0

    def close(self) -> int:
        """Finish the file; returns its size in bytes."""
        self._flush()
        self._writer.close()
        self._sink.close()
        if self._aside != self._path:
            self._fs.move(self._aside, self._path)
        return int(self._fs.get_file_info(self._path).size or 0)

    def abort(self) -> None:
        """Give up: close what is open and remove what was written (best effort)."""
        for close in (self._writer.close, self._sink.close):
            try:
                close()
            except (OSError, ValueError, pa.ArrowException):
                pass
        try:
            self._fs.delete_file(self._aside)
        except (OSError, pa.ArrowException):
            pass


def _aside(fs: pafs.FileSystem, path: str) -> str:
    """Where a local file is written before its rename ('.'-prefixed: Spark, pyarrow datasets and
    DuckDB's hive readers skip it); an object store writes in place (its upload is atomic)."""
    if isinstance(fs, pafs.LocalFileSystem):
        head, _, tail = path.rpartition("/")
        return f"{head}/.{tail}.writing"
    return path


def read_row_group(fs: pafs.FileSystem, path: str, index: int, codec: EntryRows) -> list[tuple[int, bytes]]:
    """The stored entries (entry id, bytes) of one row group, rebuilt exactly by the codec."""
    with fs.open_input_file(path) as source:
        table = pq.ParquetFile(source).read_row_group(index, columns=REBUILD_COLUMNS)
    return entries_of(table, codec)


def entries_of(table: pa.Table, codec: EntryRows) -> list[tuple[int, bytes]]:
    """The entries of a table of rows. Each entry starts at a row with entry_metadata; its rows'
    message metadata and values are framed together in Arrow ([u32 big-endian length][message
    metadata][value] per row, no Python object per row) and handed to the codec as one slice."""
    n = table.num_rows
    if not n:
        return []
    singles = table.column("message_metadata").combine_chunks()
    values = table.column("value").combine_chunks()
    lengths = pc.binary_length(singles).fill_null(0).to_pylist()
    sizes = pa.py_buffer(struct.pack(f">{n}I", *lengths))
    prefix = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), n, [None, sizes]).cast(pa.binary())
    framed = pc.binary_join_element_wise(prefix, singles, values, pa.scalar(b"", pa.binary()))
    framed = framed.fill_null(b"")
    ends = pa.Array.from_buffers(pa.int32(), n + 1, [None, framed.buffers()[1]], offset=framed.offset).to_pylist()
    data = framed.buffers()[2].to_pybytes() if framed.buffers()[2] is not None else b""
    entry_ids = table.column("entry_id").to_pylist()
    metas = table.column("entry_metadata").to_pylist()
    payloads = table.column("entry_payload").to_pylist()
    has_single = singles.is_valid().to_pylist()
    starts = [i for i, meta in enumerate(metas) if meta is not None]
    out: list[tuple[int, bytes]] = []
    for k, i in enumerate(starts):
        j = starts[k + 1] if k + 1 < len(starts) else n
        batch = data[ends[i] : ends[j]] if has_single[i] else None
        out.append((entry_ids[i], codec.rebuild_entry(metas[i], payloads[i], values[i].as_py(), batch)))
    return out


def manifest_bytes(*, topic: str, ledger_id: int, entries: int, size_bytes: int, file_name: str,
                   file_bytes: int, groups: list[RowGroup], created_ms: int) -> bytes:
    return json.dumps({
        "format": 1, "topic": topic, "ledger_id": ledger_id, "entries": entries, "size_bytes": size_bytes,
        "file": file_name, "file_bytes": file_bytes, "rows": sum(g.rows for g in groups),
        "row_groups": [g.to_json() for g in groups], "created_ms": created_ms,
    }, indent=1).encode()
