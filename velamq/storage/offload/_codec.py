"""What an offloaded row holds, and the interface of what makes rows of entries and entries of rows.

Storage stores opaque entries; the rows of an offloaded ledger are one per message, so something
that reads the entry format must make them: an EntryRows, handed to Storage by whoever built it (the
broker's is velamq/broker/log/_offload_rows.PulsarEntryRows). It must give back, from the rows,
exactly the entries it was given (the broker sends stored entries as they are): the columns
entry_metadata, message_metadata and entry_payload are there for that (docs/offload.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# The columns, in file order (_parquet.SCHEMA types them; docs/offload.md says what each holds).
COLUMNS = (
    "ledger_id", "entry_id", "batch_index", "batch_size", "partition", "key", "value", "properties",
    "event_time", "publish_time", "producer_name", "sequence_id", "ordering_key", "schema_version",
    "encrypted", "encryption_keys", "chunk_uuid", "chunk_id", "num_chunks", "entry_metadata",
    "message_metadata", "entry_payload",
)


# Columns with one value per entry (repeated on each of its rows when the table is built), and
# columns with one value per message. ledger_id and partition are the file's.
ENTRY_COLUMNS = (
    "entry_id", "batch_size", "publish_time", "producer_name", "schema_version", "encrypted", "encryption_keys",
    "chunk_uuid", "chunk_id", "num_chunks",
)
MESSAGE_COLUMNS = (
    "batch_index", "key", "value", "properties", "event_time", "sequence_id", "ordering_key", "entry_metadata",
    "message_metadata", "entry_payload",
)


@dataclass(slots=True)
class RowColumns:
    """Rows under construction: per entry, its entry columns once and its message columns as
    lists (pyarrow makes arrays of them, repeating entry columns over the entry's rows)."""

    partition: int
    entries: dict[str, list[object]] = field(default_factory=lambda: {name: [] for name in ENTRY_COLUMNS})
    messages: dict[str, list[object]] = field(default_factory=lambda: {name: [] for name in MESSAGE_COLUMNS})
    counts: list[int] = field(default_factory=list)  # rows of each entry
    rows: int = 0

    def add(self, entry: dict[str, object], messages: dict[str, list[object]], count: int) -> None:
        """One entry: its entry columns (a name left out is null), and `count` rows of message
        columns (each list `count` long; a name left out is null on every row)."""
        for name in ENTRY_COLUMNS:
            self.entries[name].append(entry.get(name))
        nulls: list[object] | None = None
        for name in MESSAGE_COLUMNS:
            column = messages.get(name)
            if column is None:
                column = nulls = nulls or [None] * count
            elif len(column) != count:
                raise ValueError(f"column {name} has {len(column)} values for {count} rows")
            self.messages[name] += column
        self.counts.append(count)
        self.rows += count


class EntryRows(Protocol):
    """Rows of stored entries, and the stored entries back from their rows."""

    def add_entry(self, rows: RowColumns, ledger_id: int, entry_id: int, entry: bytes) -> None:
        """Append the rows of one entry; StorageError if it cannot be offloaded."""
        ...

    def rebuild_entry(self, entry_metadata: bytes, entry_payload: bytes | None, value: bytes,
                      framed: bytes | None) -> bytes:
        """The stored entry from the reconstruction columns of its rows: the first row's
        entry_metadata, entry_payload and value, and (when its rows have message_metadata) every
        row framed as [u32 big-endian length of message_metadata][message_metadata][value], in
        batch order, end to end."""
        ...
