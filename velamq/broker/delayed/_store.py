"""Where the delayed-delivery index of a durable subscription is stored: its own managed ledger.

Pulsar stores each bucket snapshot in a BookKeeper ledger and lists them in cursor properties;
velamq appends them to one managed ledger per subscription, named `<topic>#delayed/<subscription>`,
through the storage's public API. Three kinds of record:

    S  a segment: count, then the time, ledger and entry columns (int64 each)
    H  a bucket header, written after its segments: per segment where it is stored, its count
       and time range; then the bucket's positions (a PositionBitmap)
    M  the manifest: per live bucket, where its header is and how many segments are released

The manifest is always the last record written, so a restart reads the last entry (or, after a
crash between a bucket and its manifest, the newest manifest before it). Ledgers older than every
record still needed are trimmed; an empty index deletes its ledger. Entries of the bucket still
being filled are not stored: after a restart the subscription reads them from the topic again,
skipping every position a stored bucket holds, so nothing is lost and the log is not rescanned.

Non-durable subscriptions (readers) have no ledger: their sealed buckets keep their segments in
memory as bytes (24 bytes an entry).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

from velamq.broker.delayed._bitmap import PositionBitmap
from velamq.broker.delayed._buckets import SEGMENT_INFO, SealedBucket, Segment, SegmentInfo
from velamq.storage import LedgerStore, ManagedLedger, Position

DELAYED_INDEX_INFIX = "#delayed/"
_COUNT = struct.Struct("<I")
_BUCKET = struct.Struct("<qqI")  # header ledger, header entry, released segments
_SCAN_ENTRIES = 256


def delayed_index_name(topic: str, subscription: str) -> str:
    return topic + DELAYED_INDEX_INFIX + subscription


@dataclass(slots=True)
class Restored:
    buckets: list[SealedBucket]
    pending: PositionBitmap  # positions not yet released, of all buckets


class DelayedIndexStore:
    """One subscription's stored delayed index (module docstring). Only the index's persister
    task calls it, one call at a time."""

    def __init__(self, storage: LedgerStore | None, name: str) -> None:
        self._storage = storage
        self.name = name
        self._ledger: ManagedLedger | None = None

    @property
    def durable(self) -> bool:
        return self._storage is not None

    async def _open(self) -> ManagedLedger:
        assert self._storage is not None
        if self._ledger is None:
            self._ledger = await self._storage.open_ledger(self.name)
        return self._ledger

    # ---- restart ---------------------------------------------------------------------------------

    async def load(self) -> Restored:
        """The stored buckets with their current segment loaded, and their pending positions."""
        empty = Restored([], PositionBitmap())
        if self._storage is None:
            return empty
        ledger = await self._storage.open_ledger_if_exists(self.name)
        if ledger is None:
            return empty
        self._ledger = ledger
        manifest = await _newest_manifest(ledger)
        if manifest is None:
            return empty
        restored = await asyncio.gather(*(self._restore_bucket(at, released) for at, released in manifest))
        pending = PositionBitmap()
        for _, bitmap in restored:
            pending.merge(bitmap)
        return Restored([bucket for bucket, _ in restored], pending)

    async def _restore_bucket(self, header_at: Position, released: int) -> tuple[SealedBucket, PositionBitmap]:
        data = await self._read(header_at, b"H")
        (count,) = _COUNT.unpack_from(data, 1)
        offset = 1 + _COUNT.size
        infos: list[SegmentInfo] = []
        stored_at: list[Position] = []
        for _ in range(count):
            ledger_id, entry_id, entries, min_time, max_time = SEGMENT_INFO.unpack_from(data, offset)
            offset += SEGMENT_INFO.size
            infos.append(SegmentInfo(min_time, max_time, entries))
            stored_at.append(Position(ledger_id, entry_id))
        bucket = SealedBucket(infos=infos, stored_at=stored_at, header_at=header_at, released=released)
        pending = PositionBitmap.from_bytes(memoryview(data)[offset:])
        # Positions of released segments are not pending: if unacknowledged, the subscription
        # reads them from the topic again (they are due).
        for index in range(min(released, count)):
            for position in (await self.read_segment(bucket, index)).positions():
                pending.discard(position)
        if not bucket.done:
            bucket.loaded = await self.read_segment(bucket, bucket.released)
        return bucket, pending

    # ---- the persister's calls -------------------------------------------------------------------

    async def read_segment(self, bucket: SealedBucket, index: int) -> Segment:
        data = bucket.segment_bytes(index)
        if data is not None:
            return Segment.from_bytes(data)
        return Segment.from_bytes(memoryview(await self._read(bucket.stored_at[index], b"S"))[1:])

    async def write_bucket(self, bucket: SealedBucket, positions: PositionBitmap) -> None:
        """Store a sealed bucket's segments, then its header; then its bytes leave memory."""
        if self._storage is None or bucket.unwritten is None:
            return
        ledger = await self._open()
        segments = bucket.unwritten
        futures = [ledger.append_nowait(b"S" + data) for data in segments]
        stored_at = list(await asyncio.gather(*futures))
        header = [b"H", _COUNT.pack(len(segments))]
        for at, info in zip(stored_at, bucket.infos, strict=True):
            header.append(SEGMENT_INFO.pack(at.ledger_id, at.entry_id, info.count, info.min_time, info.max_time))
        header.append(positions.to_bytes())
        bucket.header_at = await ledger.append(b"".join(header))
        bucket.stored_at = stored_at
        bucket.unwritten = None

    async def write_manifest(self, buckets: list[SealedBucket]) -> None:
        """Record which stored buckets are live and how far each is released; trim what no live
        record needs. No live bucket: the ledger goes."""
        if self._storage is None:
            return
        live = [b for b in buckets if b.header_at is not None and not b.done]
        if not live:
            if self._ledger is not None or await self._storage.ledger_exists(self.name):
                self._ledger = None
                await self._storage.delete_ledger(self.name)
            return
        ledger = await self._open()
        parts = [b"M", _COUNT.pack(len(live))]
        for bucket in live:
            assert bucket.header_at is not None
            parts.append(_BUCKET.pack(bucket.header_at.ledger_id, bucket.header_at.entry_id, bucket.released))
        at = await ledger.append(b"".join(parts))
        needed = [at]
        for bucket in live:
            assert bucket.header_at is not None
            needed.append(bucket.header_at)
            needed.extend(bucket.stored_at[bucket.released :])
        lowest = min(needed)
        await ledger.trim(Position(lowest.ledger_id, lowest.entry_id - 1))

    async def drop(self) -> None:
        """Forget everything stored (seek, clear backlog, unsubscribe)."""
        if self._storage is None:
            return
        self._ledger = None
        await self._storage.delete_ledger(self.name)

    async def close(self) -> None:
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            await ledger.close()

    async def _read(self, at: Position, kind: bytes) -> bytes:
        assert self._ledger is not None
        found = await self._ledger.read_entries(at, 1)
        if not found or found[0].position != at or found[0].data[:1] != kind:
            raise ValueError(f"delayed index {self.name}: no {kind!r} record at {at}")
        return found[0].data


async def _newest_manifest(ledger: ManagedLedger) -> list[tuple[Position, int]] | None:
    last = ledger.last_confirmed
    if last is None:
        return None
    tail = await ledger.read_entries(last, 1)
    data: bytes | None = tail[0].data if tail and tail[0].data[:1] == b"M" else None
    if data is None:  # a crash between a bucket and its manifest: the newest manifest before it
        position = ledger.first_position
        while position is not None and position <= last:
            entries = await ledger.read_entries(position, _SCAN_ENTRIES)
            if not entries:
                break
            for entry in entries:
                if entry.data[:1] == b"M":
                    data = entry.data
            position = ledger.next_position(entries[-1].position)
    if data is None:
        return None
    (count,) = _COUNT.unpack_from(data, 1)
    out = []
    for i in range(count):
        ledger_id, entry_id, released = _BUCKET.unpack_from(data, 1 + _COUNT.size + i * _BUCKET.size)
        out.append((Position(ledger_id, entry_id), released))
    return out


async def delete_delayed_indexes(storage: LedgerStore, topic: str) -> None:
    """Delete the delayed indexes of every subscription of a deleted topic."""
    prefix = topic + DELAYED_INDEX_INFIX
    after = prefix
    while True:
        names = [n for n in await storage.ledger_names(after, 100) if n.startswith(prefix)]
        for name in names:
            await storage.delete_ledger(name)
        if len(names) < 100:
            return
        after = names[-1]
