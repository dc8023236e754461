"""The double-buffered write cache (ME-4): durable entries on their way to the ledger files.

Two halves: `active` takes every entry the journal has made durable, `flushing` (when there is
one) is being written to the ledger files by the flusher thread. When the active half is full
(write_cache_bytes / 2) or old (flush_interval_ms) and no flush is running, the halves swap: the
active one is frozen and handed to the flusher, a new empty one takes appends. Reads look in the
active half, then in the flushing one; an entry in neither is in its ledger file.

Within a half, each ledger's entries form one contiguous run (a Segment), so a flush writes each
ledger's entries together, with one writev, to its own file. A half also remembers the journal
location its newest entry reached (the checkpoint the flush may write once done) and the ledgers
sealed since the last swap (whose index files the flush writes once their entries are in).

Lives on the event loop. A frozen half is never changed again: the flusher thread reads it while
the loop still serves reads from it, and the loop drops it when the flusher reports it flushed.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path

from velamq._clock import Clock
from velamq.storage._config import write_cache_entry_overhead_bytes
from velamq.storage._journal import LedgerHandle
from velamq.storage._journal_file import JournalLocation
from velamq.storage._position import Position


@dataclass(eq=False, slots=True)
class Segment:
    """One ledger's consecutive entries in one half of the write cache."""

    handle: LedgerHandle
    first_entry_id: int
    file_offset: int  # where the record of first_entry_id goes in the ledger file
    datas: list[bytes] = field(default_factory=list)
    crcs: array[int] = field(default_factory=lambda: array("I"))

    @property
    def end_entry_id(self) -> int:
        return self.first_entry_id + len(self.datas)


@dataclass(frozen=True, slots=True)
class SealInfo:
    """A rolled-over ledger whose index file is to be written once its entries are flushed."""

    handle: LedgerHandle
    index_path: Path
    offsets: array[int]
    file_bytes: int
    created_ms: int
    closed_ms: int


@dataclass(eq=False, slots=True)
class WriteBuffer:
    generation: int
    segments: dict[int, Segment] = field(default_factory=dict)  # by ledger id
    size_bytes: int = 0  # data plus per-entry overhead
    entries: int = 0
    journal_end: JournalLocation | None = None
    seals: list[SealInfo] = field(default_factory=list)
    started_s: float = 0.0  # the clock's monotonic time of its first entry

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        segment = self.segments.get(ledger_id)
        if segment is None:
            return None
        i = entry_id - segment.first_entry_id
        if 0 <= i < len(segment.datas):
            return segment.datas[i]
        return None


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
        self.hits_total = 0
        self.misses_total = 0
        self.swaps_total = 0
        self.bytes_peak = 0

    @property
    def size_bytes(self) -> int:
        return self.active.size_bytes + (self.flushing.size_bytes if self.flushing is not None else 0)

    @property
    def has_room(self) -> bool:
        return self.active.size_bytes < self.half_bytes_max

    def add(self, handle: LedgerHandle, entry_id: int, data: bytes, crc: int) -> bool:
        """Add a durable entry; False if it does not continue its ledger's run (a bug upstream)."""
        active = self.active
        segment = active.segments.get(handle.ledger_id)
        if segment is None:
            file_offset = handle.owner.file_offset(handle.ledger_id, entry_id)
            segment = active.segments[handle.ledger_id] = Segment(handle, entry_id, file_offset)
        elif segment.end_entry_id != entry_id:
            return False
        segment.datas.append(data)
        segment.crcs.append(crc)
        if not active.entries:
            active.started_s = self._clock.monotonic_s()
        active.entries += 1
        active.size_bytes += len(data) + write_cache_entry_overhead_bytes
        return True

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
        """The lowest entry id of that ledger held in either half (entries below it are in the file)."""
        flushing = self.flushing.segments.get(ledger_id) if self.flushing is not None else None
        if flushing is not None:
            return flushing.first_entry_id
        active = self.active.segments.get(ledger_id)
        return active.first_entry_id if active is not None else None

    def holds_any(self, ledger_ids: list[int]) -> bool:
        for buffer in (self.active, self.flushing):
            if buffer is not None and any(i in buffer.segments for i in ledger_ids):
                return True
        return False

    def add_seal(self, seal: SealInfo) -> None:
        self.active.seals.append(seal)

    def drop_ledger(self, ledger_id: int) -> None:
        """Forget a deleted ledger's entries in the active half (the flusher skips them anyway)."""
        active = self.active
        segment = active.segments.pop(ledger_id, None)
        if segment is not None:
            active.entries -= len(segment.datas)
            overhead = write_cache_entry_overhead_bytes * len(segment.datas)
            active.size_bytes -= sum(len(d) for d in segment.datas) + overhead
        active.seals = [s for s in active.seals if s.handle.ledger_id != ledger_id]

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
