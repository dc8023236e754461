"""The read path of a managed ledger: tail cache → write cache → read cache → entry log.

For each position asked for, in order:

    1. tail cache   entries of topics with an active cursor, put there when they became durable
                    (ME-3): a consumer that keeps up is served from here and nothing else
    2. write cache  both halves (ME-4): durable entries not yet (or just being) flushed
    3. read cache   entries loaded by an earlier read-ahead (ME-5)
    4. entry log    a miss everywhere: the run holding the entry is found in the index (the index
                    cache, else the storage database, in a storage thread), then one pread of the
                    entries asked for plus a read-ahead of up to read_ahead_bytes /
                    read_ahead_entries_max more of the same run, which go to the read cache

Entries of a ledger below the first one held in the write cache are in the entry logs and indexed
(the write cache drops a half only after its index transaction committed), so the log read never
reaches into the write cache. Records are checked on every read (CRCs, and that the record is the
entry asked for): a corrupt entry raises CorruptEntryError naming the ledger and entry, it is never
skipped. A read that finds its log gone (the garbage collector moved the run and deleted the log
after the index said where it was) looks the run up again and retries once.

The read path also answers whether the topic has an active cursor (ME-3), which decides whether
new entries go to the tail cache: some read came within active_cursor_lag_entries of the end. It
keeps an ordinal for the furthest entry any read returned (entries counted since the managed ledger
was opened), so no broker hook is needed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from velamq._errors import CorruptEntryError, StorageError
from velamq.storage import _layout
from velamq.storage._config import active_cursor_lag_entries, read_ahead_entries_max
from velamq.storage._position import Entry, Position
from velamq.storage.formats._entry_log import Run, parse_records, read_span
from velamq.storage.ledger._context import ReadableLog, StorageContext


def run_size(run: Run) -> int:
    return run.memory_bytes


def _run_holding(span: list[Run], entry_id: int) -> Run:
    for run in span:
        if run.covers(entry_id):
            return run
    raise AssertionError(f"entry {entry_id} is not in the span")


def _offset_of(span: list[Run], entry_id: int) -> int:
    """Where the record of entry_id starts in the log."""
    return _run_holding(span, entry_id).byte_range(entry_id, entry_id)[0]


def _end_of(span: list[Run], entry_id: int) -> int:
    """Where the record of entry_id ends in the log."""
    return _run_holding(span, entry_id).byte_range(entry_id, entry_id)[1]


_NEVER_READ = -(1 << 62)


class ReadPath:
    """One managed ledger's reads through the caches to the entry logs, and its tail activity."""

    __slots__ = ("_ctx", "_hint", "_ml", "_read_ordinal")

    def __init__(self, ml: ReadableLog, ctx: StorageContext) -> None:
        self._ml = ml
        self._ctx = ctx
        self._read_ordinal = _NEVER_READ  # one past the furthest entry any read returned
        self._hint: Run | None = None  # the run the last log read used

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
                if ledger.local:
                    datas = await self._read_file(ledger_id, e, last)
                else:
                    datas = await self._read_offloaded(ledger_id, e, last)
                for k, data in enumerate(datas, e):
                    out.append(Entry(Position(ledger_id, k), data))
                e += len(datas)
                counters.read_entries_disk_total += len(datas)
            pos = ml.first_at_or_after(Position(ledger_id, e))
        if out:
            self.note_position(out[-1].position)
        return out

    async def _read_file(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries first..last (or fewer: up to the end of their run, or to where the write cache
        takes over) from the entry log, reading ahead into the read cache."""
        ml = self._ml
        ctx = self._ctx
        where = f"{ml.name} ledger {ledger_id}"
        for attempt in range(2):
            run = await self._run_of(ledger_id, first)
            ledger = ml.ledger_state(ledger_id)
            if ledger is None:
                return []  # trimmed while the index was read
            if run is None:
                raise CorruptEntryError(where, f"entry {first} is neither cached nor in the index")
            in_file = ctx.write_cache.first_cached(ledger_id)
            if in_file is None:
                in_file = ledger.entries
            if first >= in_file:
                raise StorageError(f"{where}: entry {first} is neither cached nor in the entry logs")
            span = self._contiguous(run, min(in_file - 1, last + read_ahead_entries_max))
            want_last = min(last, in_file - 1, span[-1].end_entry - 1)
            ahead_last = self._read_ahead_end(span, want_last, in_file)
            start, end = _offset_of(span, first), _end_of(span, ahead_last)
            path = ctx.logs_dir / _layout.log_file_name(run.log_id)
            ctx.counters.ledger_file_reads_total += 1
            try:
                buf = await ml.run(read_span, path, start, end)
            except FileNotFoundError:
                ml.check_readable()
                self._forget(run)
                if attempt:
                    raise StorageError(f"{where}: entry log {path} is gone") from None
                continue  # the collector moved the run: look it up again
            count = ahead_last - first + 1
            wanted = want_last - first + 1
            datas = parse_records(buf, where, ledger_id, first, count, wanted)
            if ahead_last > want_last:
                read_cache = ctx.read_cache
                for k in range(wanted, len(datas)):
                    read_cache.put(Position(ledger_id, first + k), datas[k])
                ctx.counters.read_ahead_entries_total += len(datas) - wanted
            return datas[:wanted]
        raise AssertionError("unreachable")

    async def _read_offloaded(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries first..last (or fewer) of a ledger whose local copy is gone: the offload reads
        the row group holding `first`; what it returns past `last` goes to the read cache, as a
        read-ahead does (so a reader going on finds the row group's entries cached)."""
        reads = self._ctx.offloaded
        if reads is None:
            raise StorageError(f"{self._ml.name} ledger {ledger_id} is offloaded, and offloading is not configured")
        datas = await reads.read(self._ml.name, ledger_id, first, last)
        wanted = min(len(datas), last - first + 1)
        put = self._ctx.read_cache.put
        for k in range(wanted, len(datas)):
            put(Position(ledger_id, first + k), datas[k])
        self._ctx.counters.read_ahead_entries_total += len(datas) - wanted
        return datas[:wanted]

    def _contiguous(self, run: Run, last: int) -> list[Run]:
        """The run, and the runs after it that continue it in the same log, up to entry `last`
        (a ledger alone in a flush, or compacted, lies in one piece: one read covers it all)."""
        span = [run]
        peek = self._ctx.index_cache.peek
        while span[-1].end_entry <= last:
            tail = span[-1]
            following = peek((tail.ledger_id, tail.end_entry))
            if following is None or following.log_id != tail.log_id:
                break
            if following.offset != tail.offset + tail.size_bytes:
                break
            span.append(following)
        return span

    def _read_ahead_end(self, span: list[Run], want_last: int, in_file: int) -> int:
        """The last entry to read: want_last, plus a read-ahead within the span, bounded by
        read_ahead_bytes and read_ahead_entries_max."""
        budget = self._ctx.config.read_ahead_bytes
        if budget <= 0:
            return want_last
        ahead_last = min(in_file - 1, span[-1].end_entry - 1, want_last + read_ahead_entries_max)
        base = _end_of(span, want_last)
        if _end_of(span, ahead_last) - base > budget:
            lo, hi = want_last, ahead_last  # the largest k whose records after want_last fit the budget
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if _end_of(span, mid) - base <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            ahead_last = lo
        return ahead_last

    async def _run_of(self, ledger_id: int, entry_id: int) -> Run | None:
        """The run holding the entry: the last one used, the index cache, else the database."""
        hint = self._hint
        if hint is not None and hint.ledger_id == ledger_id:
            if hint.covers(entry_id):
                return hint
            if entry_id == hint.end_entry:  # a reader going on: the next run starts there
                cached = self._ctx.index_cache.get((ledger_id, entry_id))
                if cached is not None:
                    self._hint = cached
                    return cached
        dbs = self._ctx.dbs
        runs = await self._ml.run(lambda: dbs.get().locate(ledger_id, entry_id))
        if not runs:
            return None
        for run in runs:
            self._ctx.index_cache.put((run.ledger_id, run.first_entry), run)
        self._hint = runs[0]
        return runs[0]

    def _forget(self, run: Run) -> None:
        self._ctx.index_cache.pop((run.ledger_id, run.first_entry))
        if self._hint is run:
            self._hint = None
