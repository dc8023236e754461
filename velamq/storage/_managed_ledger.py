"""The managed ledger: one topic's durable log, a list of ledgers, and its cursors.

A managed ledger lives on the event loop and is changed only there. Positions are assigned when
append is called (so in call order), the bytes go to the writer thread (_writer), and the append
resolves once the writer reports the entry durable; `last_confirmed` only ever covers a
contiguous prefix of the log, since the writer reports each file's appends in order.

Ledgers: every ledger but the newest is sealed (its file has an offset index, _ledger_file). The
newest is the current ledger, where appends go; when it holds ledger_entries_max entries or
ledger_bytes_max bytes, the next append first seals it and opens a new one, whose entries start
again at 0. Recovery (`open`, see _ledger_dir) runs in a storage thread: sealed ledgers are known
from their index files, the unsealed one is scanned and a torn tail is cut off; appending then
continues in that ledger.

Reads are served from the tail cache (the latest entries, by bytes) when they can be, otherwise
from the ledger file in a storage thread. Cursor state goes to `cursors/*.json` through a task of
this ledger, at most once per cursor_persist_interval_s, and on close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal, Protocol, TypeVar

from velamq._errors import CorruptEntryError, LedgerClosedError, StorageError
from velamq.storage import _layout
from velamq.storage._config import (
    Counters,
    StorageConfig,
    entry_bytes_max,
    index_cache_ledgers_max,
    tail_cache_bytes_max,
)
from velamq.storage._cursor import CursorState, ManagedCursor
from velamq.storage._ledger_dir import LedgerState, recover_dir, remove_file, write_cursor_files
from velamq.storage._ledger_file import (
    RECORD_HEADER_BYTES,
    new_offsets,
    read_index,
    read_records,
)
from velamq.storage._position import Entry, LedgerInfo, Position
from velamq.storage._writer import AppendOp, CloseOp, FileHandle, OpenOp, SealOp, Writer

log = logging.getLogger("velamq.storage")

_T = TypeVar("_T")


class _Offsets(Protocol):
    def offset(self, entry_id: int) -> int: ...


@dataclass(frozen=True, slots=True)
class _ArrayOffsets:
    """Offsets held in memory: the current ledger's, or a just-sealed one's until its index is on disk."""

    offsets: array[int]
    file_bytes: int

    def offset(self, entry_id: int) -> int:
        return self.offsets[entry_id] if entry_id < len(self.offsets) else self.file_bytes


@dataclass(frozen=True, slots=True)
class StorageContext:
    """What every managed ledger of one Storage shares."""

    config: StorageConfig
    writer: Writer
    io: Executor
    allocate_ledger_id: Callable[[], int]
    counters: Counters
    on_closed: Callable[[ManagedLedger], None]


class ManagedLedger:
    def __init__(self, name: str, directory: Path, ctx: StorageContext, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self._dir = directory
        self._ctx = ctx
        self._config = ctx.config
        self._writer = ctx.writer
        self._loop = loop
        self._ledger_ids: list[int] = []
        self._ledgers: dict[int, LedgerState] = {}
        self._entries_total = 0
        self._size_bytes = 0
        self._last_confirmed: Position | None = None
        # The current ledger, as assigned (ahead of durable while appends are in flight).
        self._current_id = -1
        self._current = LedgerState(-1, 0, 0, 0)
        self._assigned_total = 0
        self._handle: FileHandle | None = None
        self._offsets = new_offsets()
        self._assigned_bytes = 0
        self._tail: OrderedDict[Position, bytes] = OrderedDict()
        self._tail_bytes = 0
        self._indexes: OrderedDict[int, _Offsets] = OrderedDict()  # LRU of sealed ledgers' offsets
        self._sealing: dict[int, _ArrayOffsets] = {}  # sealed here, index file not yet written
        self._cursors: dict[str, ManagedCursor] = {}
        self._dirty: set[str] = set()
        self._persist_task: asyncio.Task[None] | None = None
        self._persist_lock = asyncio.Lock()
        self._last_persist_s = 0.0
        self._state: Literal["open", "closing", "closed"] = "open"
        self._closed = loop.create_future()
        self._failure: StorageError | None = None

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    async def open(cls, name: str, directory: Path, ctx: StorageContext) -> ManagedLedger:
        loop = asyncio.get_running_loop()
        ml = cls(name, directory, ctx, loop)
        found = await loop.run_in_executor(ctx.io, recover_dir, directory, ctx.config.sync)
        ctx.counters.torn_tails_truncated_total += found.torn_tails
        for ledger in found.ledgers:
            ml._ledger_ids.append(ledger.ledger_id)
            ml._ledgers[ledger.ledger_id] = ledger
            ml._entries_total += ledger.entries
            ml._assigned_total += ledger.entries
            ml._size_bytes += ledger.size_bytes
            if ledger.entries:
                ml._last_confirmed = Position(ledger.ledger_id, ledger.entries - 1)
        for ledger_id, index in found.indexes.items():
            ml._remember_offsets(ledger_id, index)
        opened = loop.create_future()
        if found.last_sealed:
            ml._start_ledger(opened)
        else:
            current = found.ledgers[-1]
            ml._current_id = current.ledger_id
            ml._current = current
            ml._offsets = found.current_offsets
            ml._assigned_bytes = current.size_bytes
            ml._handle = FileHandle(ml._ledger_path(current.ledger_id), current.ledger_id, ml)
            ml._writer.submit(OpenOp(ml._handle, False, None, opened))
            first_tail = current.entries - len(found.tail)
            for i, data in enumerate(found.tail):
                ml._tail_put(Position(current.ledger_id, first_tail + i), data)
        end = ml._last_confirmed or Position(ml._current_id, -1)
        for state in found.cursors:
            cursor = ml._cursors[state.name] = ManagedCursor.from_state(state, ml)
            cursor.clip_to(end)
        await opened
        return ml

    def _start_ledger(self, opened: asyncio.Future[None] | None) -> None:
        """Make a new, empty current ledger. Synchronous: ids are handed out in call order."""
        ledger_id = self._ctx.allocate_ledger_id()
        self._handle = FileHandle(self._ledger_path(ledger_id), ledger_id, self)
        self._writer.submit(OpenOp(self._handle, True, ledger_id + 1, opened))
        self._ledger_ids.append(ledger_id)
        self._current = LedgerState(ledger_id, 0, 0, 0)
        self._ledgers[ledger_id] = self._current
        self._current_id = ledger_id
        self._offsets = new_offsets()
        self._assigned_bytes = 0

    def _roll(self) -> None:
        assert self._handle is not None
        old_id = self._current_id
        offsets = _ArrayOffsets(self._offsets, self._assigned_bytes)
        sealed = self._loop.create_future()
        self._sealing[old_id] = offsets
        sealed.add_done_callback(lambda f: self._on_sealed(old_id, offsets, f))
        self._writer.submit(SealOp(self._handle, offsets.offsets, offsets.file_bytes, sealed))
        self._start_ledger(None)
        self._ctx.counters.ledgers_rolled_total += 1

    def _on_sealed(self, ledger_id: int, offsets: _ArrayOffsets, future: asyncio.Future[None]) -> None:
        self._sealing.pop(ledger_id, None)
        error = future.exception()
        if error is None:
            self._remember_offsets(ledger_id, offsets)
        elif isinstance(error, StorageError):
            self.on_write_failed(ledger_id, error)

    def _ledger_path(self, ledger_id: int) -> Path:
        return self._dir / _layout.ledger_file_name(ledger_id)

    # -- appending -----------------------------------------------------------------------------

    async def append(self, data: bytes) -> Position:
        """Append one entry; resolves with its position once it is durable under the sync policy."""
        if self._state != "open":
            raise LedgerClosedError(f"managed ledger {self.name} is closed")
        if self._failure is not None:
            raise StorageError(f"managed ledger {self.name} failed; close and reopen it: {self._failure}")
        if type(data) is not bytes:
            data = bytes(data)  # a caller's bytearray could change under the cache
        size = len(data)
        if size == 0 or size > entry_bytes_max:
            raise ValueError(f"an entry must be 1 to {entry_bytes_max} bytes, not {size}")
        # Everything up to the submit stays synchronous, so positions follow call order.
        config = self._config
        if len(self._offsets) >= config.ledger_entries_max or self._assigned_bytes >= config.ledger_bytes_max:
            self._roll()
        assert self._handle is not None
        pos = Position(self._current_id, len(self._offsets))
        self._current.assigned += 1
        self._assigned_total += 1
        self._offsets.append(self._assigned_bytes)
        self._assigned_bytes += RECORD_HEADER_BYTES + size
        self._tail_put(pos, data)
        future: asyncio.Future[Position] = self._loop.create_future()
        self._writer.submit(AppendOp(self._handle, pos, data, future))
        return await future

    def on_durable(self, ledger_id: int, last_entry_id: int, entries: int, size_bytes: int) -> None:
        """Called by the writer (on the loop): entries up to last_entry_id of ledger_id are durable."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return  # deleted meanwhile
        ledger.entries = last_entry_id + 1
        ledger.size_bytes += size_bytes
        self._entries_total += entries
        self._size_bytes += size_bytes
        pos = Position(ledger_id, last_entry_id)
        if self._last_confirmed is None or pos > self._last_confirmed:
            self._last_confirmed = pos

    def on_write_failed(self, ledger_id: int, error: StorageError) -> None:
        # Positions after the failure may never reach the file: stop appending. Closing and
        # reopening the managed ledger recovers to what is really on disk.
        if self._failure is None:
            log.error("managed ledger %s: ledger %d failed, appends refused: %s", self.name, ledger_id, error)
            self._failure = error

    def _tail_put(self, pos: Position, data: bytes) -> None:
        self._tail[pos] = data
        self._tail_bytes += len(data)
        tail = self._tail
        while self._tail_bytes > tail_cache_bytes_max and len(tail) > 1:
            self._tail_bytes -= len(tail.popitem(last=False)[1])

    # -- the log's shape -----------------------------------------------------------------------

    @property
    def last_confirmed(self) -> Position | None:
        return self._last_confirmed

    @property
    def first_position(self) -> Position | None:
        for ledger_id in self._ledger_ids:
            if self._ledgers[ledger_id].entries:
                return Position(ledger_id, 0)
        return None

    @property
    def current_ledger_id(self) -> int:
        return self._current_id

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def entries_total(self) -> int:
        return self._entries_total

    @property
    def pending_appends(self) -> int:
        """Appends handed to the writer and not yet durable."""
        return self._assigned_total - self._entries_total

    def ledgers(self) -> list[LedgerInfo]:
        return [LedgerInfo(i, self._ledgers[i].entries, self._ledgers[i].size_bytes) for i in self._ledger_ids]

    def entry_exists(self, pos: Position) -> bool:
        """Whether pos names a durable entry of this log."""
        ledger = self._ledgers.get(pos[0])
        return ledger is not None and 0 <= pos[1] < ledger.entries

    def next_position(self, pos: Position) -> Position:
        """The position after pos; after a ledger's last entry that is the next ledger's first."""
        ledger_id, entry_id = pos
        ledger = self._ledgers.get(ledger_id)
        # `assigned`, not `entries`: a sealed ledger may still have appends in flight.
        if ledger_id == self._current_id or (ledger is not None and entry_id + 1 < ledger.assigned):
            return Position(ledger_id, entry_id + 1)
        ids = self._ledger_ids
        i = bisect_right(ids, ledger_id)
        while i < len(ids):
            candidate = ids[i]
            if candidate == self._current_id or self._ledgers[candidate].assigned:
                return Position(candidate, 0)
            i += 1
        return Position(ledger_id, entry_id + 1)  # beyond the log: nothing better to say

    def count_entries(self, after: Position, up_to: Position) -> int:
        """Durable entries in (after, up_to]."""
        if up_to <= after:
            return 0
        ids = self._ledger_ids
        total = 0
        for i in range(bisect_left(ids, after.ledger_id), len(ids)):
            ledger_id = ids[i]
            if ledger_id > up_to.ledger_id:
                break
            entries = self._ledgers[ledger_id].entries
            lo = after.entry_id + 1 if ledger_id == after.ledger_id else 0
            hi = up_to.entry_id if ledger_id == up_to.ledger_id else entries - 1
            hi = min(hi, entries - 1)
            if hi >= lo:
                total += hi - max(lo, 0) + 1
        return total

    def _first_at_or_after(self, pos: Position) -> Position | None:
        """The first durable entry at or after pos, if any."""
        ledger_id, entry_id = pos
        ids = self._ledger_ids
        for i in range(bisect_left(ids, ledger_id), len(ids)):
            candidate = ids[i]
            first = max(entry_id, 0) if candidate == ledger_id else 0
            ledger = self._ledgers[candidate]
            if first < ledger.entries:
                return Position(candidate, first)
            if first < ledger.assigned:
                return None  # not durable yet (and nothing after it is)
        return None

    # -- reading -------------------------------------------------------------------------------

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to max_entries durable entries from start on (inclusive), across ledgers."""
        out: list[Entry] = []
        pos = self._first_at_or_after(start)
        while pos is not None and len(out) < max_entries:
            self._check_readable()
            ledger_id, entry_id = pos
            entries = self._ledgers[ledger_id].entries
            last = min(entries - 1, entry_id + max_entries - len(out) - 1)
            if pos in self._tail:
                for e in range(entry_id, last + 1):
                    p = Position(ledger_id, e)
                    out.append(Entry(p, self._tail[p]))
                self._ctx.counters.read_entries_cache_total += last - entry_id + 1
            else:
                # Read from the file up to where the tail cache takes over.
                oldest = next(iter(self._tail), None)
                if oldest is not None and oldest[0] == ledger_id and entry_id < oldest[1] <= last:
                    last = oldest[1] - 1
                for e, data in enumerate(await self._read_file(ledger_id, entry_id, last), entry_id):
                    out.append(Entry(Position(ledger_id, e), data))
                self._ctx.counters.read_entries_disk_total += last - entry_id + 1
            pos = self._first_at_or_after(Position(ledger_id, last + 1))
        return out

    async def _read_file(self, ledger_id: int, first: int, last: int) -> list[bytes]:
        offsets = await self._offsets_of(ledger_id)
        start, end = offsets.offset(first), offsets.offset(last + 1)
        where = f"{self.name} ledger {ledger_id}"
        path = self._ledger_path(ledger_id)
        try:
            return await self._run(read_records, path, where, first, start, end, last - first + 1)
        except FileNotFoundError as exc:
            self._check_readable()
            raise StorageError(f"{where}: file is gone") from exc

    async def _offsets_of(self, ledger_id: int) -> _Offsets:
        if ledger_id == self._current_id:
            # A copy of the two numbers needed is taken on the loop, before the thread runs.
            return _ArrayOffsets(self._offsets, self._assigned_bytes)
        sealing = self._sealing.get(ledger_id)
        if sealing is not None:
            return sealing
        cached = self._indexes.get(ledger_id)
        if cached is not None:
            self._indexes.move_to_end(ledger_id)
            return cached
        path = self._dir / _layout.index_file_name(ledger_id)
        index = await self._run(read_index, path, ledger_id)
        if index is None:
            raise CorruptEntryError(f"{self.name} ledger {ledger_id}", f"index {path} is missing or damaged")
        self._remember_offsets(ledger_id, index)
        return index

    def _remember_offsets(self, ledger_id: int, offsets: _Offsets) -> None:
        self._indexes[ledger_id] = offsets
        self._indexes.move_to_end(ledger_id)
        while len(self._indexes) > index_cache_ledgers_max:
            self._indexes.popitem(last=False)

    async def find_first(self, predicate: Callable[[bytes], bool]) -> Position | None:
        """Binary search for the first entry whose data satisfies a predicate monotone over the log."""
        spans = [(i, self._ledgers[i].entries) for i in self._ledger_ids if self._ledgers[i].entries]
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
                raise StorageError(f"{self.name}: entry {position_at(mid)} vanished during find_first")
            if predicate(probe[0].data):
                hi = mid
            else:
                lo = mid + 1
        return position_at(lo) if lo < total else None

    def _check_readable(self) -> None:
        if self._state == "closed":
            raise LedgerClosedError(f"managed ledger {self.name} is closed")

    async def _run(self, fn: Callable[..., _T], *args: object) -> _T:
        return await self._loop.run_in_executor(self._ctx.io, fn, *args)

    async def _run_to_end(self, fn: Callable[..., _T], *args: object) -> _T:
        """Like _run, but a cancelled caller still waits for the thread to finish.

        Cursor files are written under _persist_lock; were the lock released while a thread still
        wrote, the next write of the same file could overlap it.
        """
        future = self._loop.run_in_executor(self._ctx.io, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            while not future.done():
                try:
                    await asyncio.wait({future})
                except asyncio.CancelledError:
                    continue
            raise

    # -- cursors -------------------------------------------------------------------------------

    @property
    def cursors(self) -> Mapping[str, ManagedCursor]:
        return MappingProxyType(self._cursors)

    async def open_cursor(self, name: str, initial: Literal["earliest", "latest"]) -> ManagedCursor:
        """The cursor of that name: as persisted if it exists, else new at earliest or latest."""
        if self._state != "open":
            raise LedgerClosedError(f"managed ledger {self.name} is closed")
        cursor = self._cursors.get(name)
        if cursor is not None:
            return cursor
        if initial == "earliest":
            first = self.first_position
            mark_delete = Position(first.ledger_id, -1) if first else Position(self._current_id, -1)
        elif initial == "latest":
            mark_delete = self._last_confirmed or Position(self._current_id, -1)
        else:
            raise ValueError(f"initial must be 'earliest' or 'latest', not {initial!r}")
        cursor = ManagedCursor(name, self, mark_delete)
        self._cursors[name] = cursor
        # Written before it is handed out: a subscription must survive a crash right after it.
        async with self._persist_lock:
            await self._write_cursors([cursor.state()])
        return cursor

    async def delete_cursor(self, name: str) -> None:
        cursor = self._cursors.pop(name, None)
        if cursor is None:
            return
        self._dirty.discard(name)
        path = self._cursor_path(name)
        async with self._persist_lock:  # not while a persist of it may be in flight
            await self._run_to_end(remove_file, path, self._config.sync)

    def cursor_changed(self, cursor: ManagedCursor) -> None:
        """Called by a cursor on every change: it is written within cursor_persist_interval_s."""
        if self._cursors.get(cursor.name) is not cursor:
            return  # deleted
        self._dirty.add(cursor.name)
        if self._persist_task is None and self._state == "open":
            self._persist_task = self._loop.create_task(self._persist_soon())

    async def _persist_soon(self) -> None:
        delay = self._last_persist_s + self._config.cursor_persist_interval_s - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        self._persist_task = None  # changes from here on schedule the next round
        try:
            await self._persist_dirty()
        except StorageError as exc:
            log.error("managed ledger %s: persisting cursors failed, will retry: %s", self.name, exc)
            if self._state == "open" and self._persist_task is None:
                self._last_persist_s = time.monotonic()
                self._persist_task = self._loop.create_task(self._persist_soon())

    async def _persist_dirty(self) -> None:
        async with self._persist_lock:
            names, self._dirty = self._dirty, set()
            states = [self._cursors[n].state() for n in sorted(names) if n in self._cursors]
            try:
                await self._write_cursors(states)
            except BaseException:
                self._dirty |= names  # not written: try again next round
                raise
            finally:
                self._last_persist_s = time.monotonic()

    async def _write_cursors(self, states: list[CursorState]) -> None:
        if not states:
            return
        paths = [self._cursor_path(s.name) for s in states]
        try:
            await self._run_to_end(write_cursor_files, paths, states, self._config.sync)
        except OSError as exc:
            raise StorageError(f"managed ledger {self.name}: cannot write cursors: {exc}") from exc
        self._ctx.counters.cursor_persists_total += len(states)

    def _cursor_path(self, name: str) -> Path:
        return self._dir / _layout.CURSORS_DIR / (_layout.encode_name(name) + _layout.CURSOR_SUFFIX)

    # -- closing -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Wait for appends in flight, close the file, write dirty cursors. Idempotent."""
        await self._close(persist=True)

    async def _close(self, *, persist: bool) -> None:
        if self._state != "open":
            await asyncio.shield(self._closed)
            return
        self._state = "closing"
        try:
            if self._handle is not None:
                closed: asyncio.Future[None] = self._loop.create_future()
                self._writer.submit(CloseOp(self._handle, closed))
                try:
                    await closed
                except StorageError as exc:
                    log.error("managed ledger %s: close: %s", self.name, exc)
            if self._persist_task is not None:
                self._persist_task.cancel()
                self._persist_task = None
            if persist:
                await self._persist_dirty()
        finally:
            self._state = "closed"
            self._tail.clear()
            self._tail_bytes = 0
            self._indexes.clear()
            self._closed.set_result(None)
            self._ctx.on_closed(self)

    async def remove_files(self) -> None:
        """Close without writing cursors, then delete the directory (Storage.delete_ledger)."""
        await self._close(persist=False)
        async with self._persist_lock:  # no cursor file write may still be running in there
            await self._run(_layout.remove_tree, self._dir, self._config.sync)
