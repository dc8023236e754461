"""Topic compaction: the latest value per key, for `read_compacted` readers and TableView.

Compaction is two passes over the topic up to a horizon (the last entry when it starts):

    pass 1   for every key, the position (entry, batch index) of its newest message, and whether
             that message is a tombstone (null value or empty payload: the key is deleted)
    pass 2   every entry that holds a surviving message is written to the compacted store; a
             batch whose other messages were superseded is rebuilt without them. (Pulsar keeps
             them as empty `compacted_out` slots, but the C++ client behind pulsar-client ignores
             that flag and hands them to the application as empty messages; so velamq drops them,
             and batch indexes inside a rebuilt batch count the surviving messages only.)
             Messages without a key are kept.

The compacted store is its own managed ledger, named "<topic>#compacted", of records:

    [i64 original ledger id][i64 original entry id][entry bytes, checksummed form]
    [i64 -2][i64 0][i64 horizon ledger id][i64 horizon entry id]          the last record

A store without its closing horizon record (a crash mid-compaction) is ignored and rebuilt.
A read_compacted subscription reads the compacted store for positions up to the horizon and the
live topic after it; messages keep their original ids.
"""

from __future__ import annotations

import bisect
import logging
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

from velamq.protocol import build_batch, build_entry, compress, entry_messages, pb, split_entry
from velamq.storage import Entry, LedgerStore, ManagedLedger, Position

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">qq")
_HORIZON = struct.Struct(">qqqq")
_HORIZON_MARK = -2
scan_batch_entries = 500
COMPACTED_SUFFIX = "#compacted"


def compacted_store_name(topic: str) -> str:
    return topic + COMPACTED_SUFFIX


@dataclass(frozen=True, slots=True)
class CompactionStatus:
    """Where the last compaction of a topic stands (Pulsar's LongRunningProcessStatus)."""

    status: str = "NOT_RUN"  # NOT_RUN | RUNNING | SUCCESS | ERROR
    last_error: str = ""


class CompactedView:
    """The compacted store of a topic, indexed by original position."""

    def __init__(self, store: ManagedLedger, horizon: Position, index: list[tuple[Position, Position]]) -> None:
        self.store = store
        self.horizon = horizon
        self._originals = [o for o, _ in index]
        self._stored = [s for _, s in index]

    @classmethod
    async def load(cls, store: ManagedLedger) -> CompactedView | None:
        index: list[tuple[Position, Position]] = []
        position = store.first_position
        last = store.last_confirmed
        horizon: Position | None = None
        while position is not None and last is not None and position <= last:
            entries = await store.read_entries(position, scan_batch_entries)
            if not entries:
                break
            for entry in entries:
                ledger_id, entry_id = _HEADER.unpack_from(entry.data, 0)
                if ledger_id == _HORIZON_MARK:
                    _, _, h_ledger, h_entry = _HORIZON.unpack_from(entry.data, 0)
                    horizon = Position(h_ledger, h_entry)
                else:
                    index.append((Position(ledger_id, entry_id), entry.position))
            position = store.next_position(entries[-1].position)
        if horizon is None:
            return None
        return cls(store, horizon, index)

    async def last_message(self) -> tuple[Position, int] | None:
        """The newest retained message: (original position, batch index or -1)."""
        if not self._originals:
            return None
        entries = await self.store.read_entries(self._stored[-1], 1)
        if not entries:
            return None
        metadata, messages = entry_messages(entries[0].data[_HEADER.size :])
        batch_index = len(messages) - 1 if metadata.HasField("num_messages_in_batch") else -1
        return self._originals[-1], batch_index

    async def read_from(self, start: Position, max_entries: int) -> list[Entry]:
        """Entries with original position >= start (up to the horizon), with their original ids."""
        i = bisect.bisect_left(self._originals, start)
        if i >= len(self._originals):
            return []
        stored = await self.store.read_entries(self._stored[i], max_entries)
        out: list[Entry] = []
        for offset, entry in enumerate(stored):
            if i + offset >= len(self._originals) or entry.position != self._stored[i + offset]:
                break
            out.append(Entry(self._originals[i + offset], entry.data[_HEADER.size :]))
        return out


def _message_key(metadata: pb.MessageMetadata, single: pb.SingleMessageMetadata | None) -> str | None:
    if single is not None:
        return single.partition_key if single.HasField("partition_key") else None
    return metadata.partition_key if metadata.HasField("partition_key") else None


def _is_tombstone(single: pb.SingleMessageMetadata | None, metadata: pb.MessageMetadata, payload: bytes) -> bool:
    null_value = single.null_value if single is not None else metadata.null_value
    return null_value or len(payload) == 0


async def compact(storage: LedgerStore, ledger: ManagedLedger) -> CompactedView | None:
    """Build a new compacted store for the ledger's topic; returns its view (None if empty)."""
    horizon = ledger.last_confirmed
    if horizon is None:
        return None
    # Pass 1: the newest message of every key.
    latest: dict[str, tuple[Position, int, bool]] = {}
    async for entry in _scan(ledger, horizon):
        metadata, messages = entry_messages(entry.data)
        for index, (single, payload) in enumerate(messages):
            key = _message_key(metadata, single)
            if key is not None:
                latest[key] = (entry.position, index, _is_tombstone(single, metadata, payload))
    # Pass 2: write what survives to a fresh store.
    name = compacted_store_name(ledger.name)
    await storage.delete_ledger(name)
    store = await storage.open_ledger(name)
    index_entries: list[tuple[Position, Position]] = []
    async for entry in _scan(ledger, horizon):
        kept = _surviving_entry(entry, latest)
        if kept is None:
            continue
        stored = await store.append(_HEADER.pack(entry.position.ledger_id, entry.position.entry_id) + kept)
        index_entries.append((entry.position, stored))
    await store.append(_HORIZON.pack(_HORIZON_MARK, 0, horizon.ledger_id, horizon.entry_id))
    return CompactedView(store, horizon, index_entries)


def _surviving_entry(entry: Entry, latest: dict[str, tuple[Position, int, bool]]) -> bytes | None:
    metadata, messages = entry_messages(entry.data)
    retained: list[bool] = []
    for index, (single, _) in enumerate(messages):
        key = _message_key(metadata, single)
        if key is None:
            retained.append(True)
            continue
        position, newest_index, tombstone = latest[key]
        retained.append(position == entry.position and newest_index == index and not tombstone)
    if not any(retained):
        return None
    if all(retained) or not metadata.HasField("num_messages_in_batch"):
        return entry.data
    # Rebuild the batch with the surviving messages only.
    singles = [(single, payload) for keep, (single, payload) in zip(retained, messages, strict=True) if keep]
    raw = build_batch((single, payload) for single, payload in singles if single is not None)
    new_metadata = pb.MessageMetadata()
    new_metadata.CopyFrom(split_entry(entry.data)[0])
    new_metadata.uncompressed_size = len(raw)
    new_metadata.num_messages_in_batch = len(singles)
    return build_entry(new_metadata, compress(new_metadata.compression, raw))


async def _scan(ledger: ManagedLedger, horizon: Position) -> AsyncIterator[Entry]:
    position = ledger.first_position
    while position is not None and position <= horizon:
        entries = await ledger.read_entries(position, scan_batch_entries)
        if not entries:
            return
        for entry in entries:
            if entry.position > horizon:
                return
            yield entry
        position = ledger.next_position(entries[-1].position)
