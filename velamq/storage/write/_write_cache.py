"""The double-buffered write cache (ME-4): durable entries on their way to the entry logs.

Two halves: `active` takes every entry the journal has made durable, `flushing` (when there is
one) is being written to the entry logs by the flusher thread. When the active half is full
(write_cache_bytes / 2) or old (flush_interval_ms) and no flush is running, the halves swap: the
active one is frozen and handed to the flusher, a new empty one takes appends. Reads look in the
active half, then in the flushing one; an entry in neither is in an entry log and the index.

Within a half, each ledger's entries form one contiguous run (a Segment), and the flush writes
them sorted by (ledger, entry), so a ledger's entries of one half lie together in one entry log.
A half also carries the metadata operations that became durable with its entries (_meta_ops, in
journal order; the flush applies them to the storage database) and the journal location its newest
complete group reached (the checkpoint the flush may write once done).

Lives on the event loop. A frozen half is never changed again: the flusher thread reads it while
the loop still serves reads from it, and the loop drops it when the flusher reports it flushed.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from velamq._clock import Clock
from velamq.storage._config import write_cache_entry_overhead_bytes
from velamq.storage._position import Position
from velamq.storage.formats._journal_file import JournalLocation
from velamq.storage.formats._meta_ops import MetaOp
from velamq.storage.journal._journal import LedgerHandle


@dataclass(eq=False, slots=True)
class Segment:
    """One ledger's consecutive entries in one half of the write cache."""

    ledger_id: int
    first_entry_id: int
    handle: LedgerHandle | None = None  # None in recovery's halves
    datas: list[bytes] = field(default_factory=list)
    crcs: array[int] = field(default_factory=lambda: array("I"))

    @property
    def end_entry_id(self) -> int:
        return self.first_entry_id + len(self.datas)


@dataclass(eq=False, slots=True)
class WriteBuffer:
    generation: int
    segments: dict[int, Segment] = field(default_factory=dict)  # by ledger id
    metadata: list[MetaOp] = field(default_factory=list)  # in journal order
    size_bytes: int = 0  # data plus per-entry overhead
    entries: int = 0
    journal_end: JournalLocation | None = None
    started_s: float = 0.0  # the clock's monotonic time of its first entry

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        segment = self.segments.get(ledger_id)
        if segment is None:
            return None
        i = entry_id - segment.first_entry_id
        if 0 <= i < len(segment.datas):
            return segment.datas[i]
        return None

    def add(self, ledger_id: int, entry_id: int, data: bytes, crc: int, handle: LedgerHandle | None = None) -> bool:
        """Add an entry; False if it does not continue its ledger's run (a bug upstream)."""
        segment = self.segments.get(ledger_id)
        if segment is None:
            segment = self.segments[ledger_id] = Segment(ledger_id, entry_id, handle)
        elif segment.end_entry_id != entry_id:
            return False
        segment.datas.append(data)
        segment.crcs.append(crc)
        self.entries += 1
        self.size_bytes += len(data) + write_cache_entry_overhead_bytes
        return True

    def add_metadata(self, op: MetaOp) -> None:
        op.generation = self.generation
        self.metadata.append(op)
        self.size_bytes += op.size_bytes + write_cache_entry_overhead_bytes

    @property
    def empty(self) -> bool:
        return not self.entries and not self.metadata


class WriteCache:
    """The two halves of the write cache (ME-4), on the loop: `active` takes durable entries, a
    frozen `flushing` half is being written by the flusher; reads look in both. Bounded by
    bytes_max for both halves together, each half swapped once full or old."""

    def __init__(self, bytes_max: int, clock: Clock) -> None:
        self._clock = clock
        self.bytes_max = bytes_max  # both halves
        self.half_bytes_max = max(1, bytes_max // 2)
        self.active = WriteBuffer(1)
        self.flushing: WriteBuffer | None = None
        self.flushed_generation = 0  # every half up to this one is in the entry logs
        self.hits_total = 0
        self.misses_total = 0
        self.swaps_total = 0
        self.bytes_peak = 0

    @property
    def size_bytes(self) -> int:
        return self.active.size_bytes + (self.flushing.size_bytes if self.flushing is not None else 0)

    def resize(self, bytes_max: int) -> None:
        """A new bound for both halves (ShardedStorage shares one write cache budget among the
        shards open). A half already fuller than the new half bound is swapped at the next chance,
        and groups park meanwhile, as with any full half."""
        self.bytes_max = bytes_max
        self.half_bytes_max = max(1, bytes_max // 2)

    @property
    def has_room(self) -> bool:
        return self.active.size_bytes < self.half_bytes_max

    def add(self, handle: LedgerHandle, entry_id: int, data: bytes, crc: int) -> bool:
        """Add a durable entry; False if it does not continue its ledger's run (a bug upstream)."""
        active = self.active
        if active.empty:
            active.started_s = self._clock.monotonic_s()
        return active.add(handle.ledger_id, entry_id, data, crc, handle)

    def start_active(self) -> None:
        """Entries are about to be added to the active half with `active.add` (the write path's
        loop, once per entry without this method's check): its age starts now if it is empty."""
        active = self.active
        if active.empty:
            active.started_s = self._clock.monotonic_s()

    def add_metadata(self, op: MetaOp) -> None:
        active = self.active
        if active.empty:
            active.started_s = self._clock.monotonic_s()
        active.add_metadata(op)

    def get(self, pos: Position) -> bytes | None:
        ledger_id, entry_id = pos
        data = self.active.get(ledger_id, entry_id)
        if data is None and self.flushing is not None:
            data = self.flushing.get(ledger_id, entry_id)
        if data is None:
            self.misses_total += 1
        else:
            self.hits_total += 1
        return data

    def first_cached(self, ledger_id: int) -> int | None:
        """The lowest entry id of that ledger held in either half (entries below it are in the logs)."""
        flushing = self.flushing.segments.get(ledger_id) if self.flushing is not None else None
        if flushing is not None:
            return flushing.first_entry_id
        active = self.active.segments.get(ledger_id)
        return active.first_entry_id if active is not None else None

    def drop_ledger(self, ledger_id: int) -> None:
        """Forget a deleted ledger's entries in the active half (the flush skips them anyway)."""
        active = self.active
        segment = active.segments.pop(ledger_id, None)
        if segment is not None:
            active.entries -= len(segment.datas)
            overhead = write_cache_entry_overhead_bytes * len(segment.datas)
            active.size_bytes -= sum(len(d) for d in segment.datas) + overhead

    def swap(self) -> WriteBuffer:
        """Freeze the active half for the flusher and start a new one. No flush may be running."""
        assert self.flushing is None, "a flush is still running"
        frozen = self.active
        self.flushing = frozen
        self.active = WriteBuffer(frozen.generation + 1, journal_end=frozen.journal_end)
        self.swaps_total += 1
        self.note_bytes()
        return frozen

    def flushed(self, buffer: WriteBuffer) -> None:
        if self.flushing is buffer:
            self.flushing = None
        self.flushed_generation = max(self.flushed_generation, buffer.generation)

    def note_bytes(self) -> None:
        total = self.size_bytes
        if total > self.bytes_peak:
            self.bytes_peak = total

    def metrics(self) -> dict[str, float]:
        flushing = self.flushing
        return {
            "velamq_storage_write_cache_bytes": self.size_bytes,
            "velamq_storage_write_cache_bytes_max": self.bytes_max,
            "velamq_storage_write_cache_bytes_peak": self.bytes_peak,
            "velamq_storage_write_cache_entries": self.active.entries + (flushing.entries if flushing else 0),
            "velamq_storage_write_cache_hits_total": self.hits_total,
            "velamq_storage_write_cache_misses_total": self.misses_total,
            "velamq_storage_write_cache_swaps_total": self.swaps_total,
        }
