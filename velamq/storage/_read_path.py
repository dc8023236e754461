"""The read path of a managed ledger: tail cache → write cache → read cache → ledger file.

For each position asked for, in order:

    1. tail cache   entries of topics with an active cursor, put there when they became durable
                    (ME-3): a consumer that keeps up is served from here and nothing else
    2. write cache  both halves (ME-4): durable entries not yet (or just being) flushed
    3. read cache   entries loaded by an earlier read-ahead (ME-5)
    4. ledger file  a miss everywhere: one pread (in a storage thread) of the entries asked for
                    plus a read-ahead of up to read_ahead_bytes / read_ahead_entries_max more of
                    the same ledger, which go to the read cache for the reads that follow

Entries of a ledger below the first one held in the write cache are in its file (the write cache
drops a half only after the flusher wrote it), so the file read never reaches into the write cache.
Records are CRC-checked on every file read: a corrupt entry raises CorruptEntryError naming the
ledger and entry, it is never skipped.

Offsets of a sealed ledger come from its index file, through the shared index cache; those of the
current ledger (and of a just-sealed one) are kept by the managed ledger in memory.

The read path also answers whether the topic has an active cursor (ME-3), which decides whether
new entries go to the tail cache: some read came within active_cursor_lag_entries of the end. It
keeps an ordinal for the furthest entry any read returned (entries counted since the managed ledger
was opened), so no broker hook is needed.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from velamq._errors import CorruptEntryError, StorageError
from velamq.storage import _layout
from velamq.storage._config import active_cursor_lag_entries, read_ahead_entries_max
from velamq.storage._ledger_file import read_index, read_records
from velamq.storage._position import Entry, Position

if TYPE_CHECKING:
    from velamq.storage._managed_ledger import ManagedLedger, StorageContext


class Offsets(Protocol):
    def offset(self, entry_id: int) -> int: ...

    @property
    def size_bytes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ArrayOffsets:
    """Offsets held in memory: the current ledger's, or a just-sealed one's until its index is on disk."""

    offsets: array[int]
    file_bytes: int

    def offset(self, entry_id: int) -> int:
        return self.offsets[entry_id] if entry_id < len(self.offsets) else self.file_bytes

    @property
    def size_bytes(self) -> int:
        return 8 * len(self.offsets) + 64


def offsets_size(offsets: Offsets) -> int:
    return offsets.size_bytes


_NEVER_READ = -(1 << 62)


class ReadPath:
    """One managed ledger's reads through the caches to the ledger files, and its tail activity."""

    __slots__ = ("_ctx", "_ml", "_read_ordinal")

    def __init__(self, ml: ManagedLedger, ctx: StorageContext) -> None:
        self._ml = ml
        self._ctx = ctx
        self._read_ordinal = _NEVER_READ  # one past the furthest entry any read returned

    def tail_active(self, assigned_total: int) -> bool:
        return assigned_total - self._read_ordinal <= active_cursor_lag_entries

    def note_position(self, last: Position) -> None:
        """A read returned entries up to `last` (or a cursor reads on from just after it)."""
        ledger = self._ml.ledger_state(last.ledger_id)
        if ledger is not None:
            ordinal = ledger.first_ordinal + last.entry_id + 1
            if ordinal > self._read_ordinal:
                self._read_ordinal = ordinal

    async def find_first(self, spans: list[tuple[int, int]], predicate: Callable[[bytes], bool]) -> Position | None:
        """Binary search over the durable entries (spans: (ledger id, entries) in log order) for the
        first whose data satisfies a predicate monotone over the log."""
        starts: list[int] = []
        total = 0
        for _, count in spans:
            starts.append(total)
            total += count

        def position_at(n: int) -> Position:
            k = bisect_right(starts, n) - 1
            return Position(spans[k][0], n - starts[k])

        lo, hi = 0, total
        while lo < hi:
            mid = (lo + hi) // 2
            probe = await self.read_entries(position_at(mid), 1)
            if not probe:
                raise StorageError(f"{self._ml.name}: entry {position_at(mid)} vanished during find_first")
            if predicate(probe[0].data):
                hi = mid
            else:
                lo = mid + 1
        return position_at(lo) if lo < total else None

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        ml = self._ml
        ctx = self._ctx
        tail, write_cache, read_cache, counters = ctx.tail_cache, ctx.write_cache, ctx.read_cache, ctx.counters
        out: list[Entry] = []
        pos = ml.first_at_or_after(start)
        while pos is not None and len(out) < max_entries:
            ml.check_readable()
            ledger_id, entry_id = pos
            ledger = ml.ledger_state(ledger_id)
            if ledger is None:  # trimmed meanwhile
                pos = ml.first_at_or_after(Position(ledger_id + 1, 0))
                continue
            last = min(ledger.entries - 1, entry_id + max_entries - len(out) - 1)
            e = entry_id
            while e <= last:
                p = Position(ledger_id, e)
                data = tail.get(p)
                if data is None:
                    data = write_cache.get(p)
                    if data is None:
                        data = read_cache.get(p)
                        if data is None:
                            break
                out.append(Entry(p, data))
                e += 1
            counters.read_entries_cache_total += e - entry_id
            if e <= last:
                datas = await self._read_file(ledger_id, e, last)
                for k, data in enumerate(datas, e):
                    out.append(Entry(Position(ledger_id, k), data))
                e += len(datas)
                counters.read_entries_disk_total += len(datas)
            pos = ml.first_at_or_after(Position(ledger_id, e))
        if out:
            self.note_position(out[-1].position)
        return out

    async def _read_file(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries first..last (or fewer, up to where the write cache takes over) from the file,
        reading ahead into the read cache."""
        ml = self._ml
        ctx = self._ctx
        offsets = await self._offsets_of(ledger_id)
        ledger = ml.ledger_state(ledger_id)
        if ledger is None:
            return []  # trimmed while the index loaded
        in_file = ctx.write_cache.first_cached(ledger_id)
        if in_file is None:
            in_file = ledger.entries
        if first >= in_file:
            raise StorageError(f"{ml.name} ledger {ledger_id}: entry {first} is neither cached nor in the file")
        want_last = min(last, in_file - 1)
        ahead_last = want_last
        budget = ctx.config.read_ahead_bytes
        if budget > 0:
            ahead_last = min(in_file - 1, want_last + read_ahead_entries_max)
            base = offsets.offset(want_last + 1)
            if offsets.offset(ahead_last + 1) - base > budget:
                lo, hi = want_last, ahead_last  # the largest k with offset(k + 1) - base <= budget
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if offsets.offset(mid + 1) - base <= budget:
                        lo = mid
                    else:
                        hi = mid - 1
                ahead_last = lo
        start, end = offsets.offset(first), offsets.offset(ahead_last + 1)
        where = f"{ml.name} ledger {ledger_id}"
        path = ml.ledger_path(ledger_id)
        ctx.counters.ledger_file_reads_total += 1
        try:
            count = ahead_last - first + 1
            datas = await ml.run(read_records, path, where, first, start, end, count, want_last - first + 1)
        except FileNotFoundError as exc:
            ml.check_readable()
            if ml.ledger_state(ledger_id) is None:
                return []  # trimmed meanwhile
            raise StorageError(f"{where}: file is gone") from exc
        wanted = want_last - first + 1
        if ahead_last > want_last:
            read_cache = ctx.read_cache
            for k in range(wanted, len(datas)):
                read_cache.put(Position(ledger_id, first + k), datas[k])
            ctx.counters.read_ahead_entries_total += len(datas) - wanted
        return datas[:wanted]

    async def _offsets_of(self, ledger_id: int) -> Offsets:
        in_memory = self._ml.memory_offsets(ledger_id)
        if in_memory is not None:
            return in_memory
        index_cache = self._ctx.index_cache
        cached = index_cache.get(ledger_id)
        if cached is not None:
            return cached
        path = self._ml.ledger_path(ledger_id).with_name(_layout.index_file_name(ledger_id))
        index = await self._ml.run(read_index, path, ledger_id)
        if index is None:
            raise CorruptEntryError(f"{self._ml.name} ledger {ledger_id}", f"index {path} is missing or damaged")
        index_cache.put(ledger_id, index)
        return index
