"""The managed ledger: one topic's durable log, a list of ledgers, and its cursors.

A managed ledger lives on the event loop and is changed only there. Positions are assigned when
append is called (so in call order); the entry goes to the shared journal (_journal), and the
append resolves once the journal's group commit made it durable and the write path (_write_path)
put it in the write cache. `last_confirmed` only ever covers a contiguous prefix of the log.

Ledgers: every ledger but the newest is sealed. The newest is the current ledger, where appends
go; when it holds ledger_entries_max entries or ledger_bytes_max bytes, the next append seals it
and starts a new one, whose entries start again at 0. Sealing a ledger hands its offsets to the
write cache, and the flusher writes its index file once its last entries are in the file.
Recovery (`open`, see _ledger_dir) runs in a storage thread: sealed ledgers are known from their
index files, the unsealed one is scanned; appending then continues in it.

Reads (_read_path) go tail cache, write cache, read cache, ledger file. Whether new entries go to
the tail cache depends on whether the topic has an active cursor (ME-3): some reader read within
active_cursor_lag_entries of the end. The managed ledger keeps an ordinal for every entry (its
number since the log was opened) and the highest ordinal any read returned; no broker hook needed.

Cursor state goes to `cursors/*.json` through a task of this ledger, at most once per
cursor_persist_interval_s, and on close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, TypeVar

from velamq._clock import Clock
from velamq._errors import LedgerClosedError, StorageError
from velamq.storage import _layout
from velamq.storage._caches import ByteLRU
from velamq.storage._config import Counters, StorageConfig, active_cursor_lag_entries, entry_bytes_max
from velamq.storage._cursor import CursorState, ManagedCursor
from velamq.storage._flusher import DeleteJob, Flusher
from velamq.storage._journal import AppendOp, BarrierOp, CreateOp, Journal, LedgerHandle
from velamq.storage._ledger_dir import LedgerState, recover_dir, remove_file, write_cursor_files
from velamq.storage._ledger_file import LEDGER_HEADER_BYTES, RECORD_HEADER_BYTES, new_offsets
from velamq.storage._position import Entry, LedgerInfo, Position
from velamq.storage._publish_buffer import PublishBuffer
from velamq.storage._read_path import ArrayOffsets, Offsets, ReadPath
from velamq.storage._write_cache import SealInfo, WriteCache

if TYPE_CHECKING:
    from velamq.storage._write_path import WritePath

log = logging.getLogger("velamq.storage")

_T = TypeVar("_T")
_NEVER_READ = -(1 << 62)


@dataclass(frozen=True, slots=True)
class StorageContext:
    """What every managed ledger of one Storage shares."""

    config: StorageConfig
    clock: Clock
    journal: Journal
    flusher: Flusher
    write_path: WritePath
    write_cache: WriteCache
    tail_cache: ByteLRU[Position, bytes]
    read_cache: ByteLRU[Position, bytes]
    index_cache: ByteLRU[int, Offsets]
    publish_buffer: PublishBuffer
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
        self._journal = ctx.journal
        self._loop = loop
        self._ledger_ids: list[int] = []
        self._ledgers: dict[int, LedgerState] = {}
        self._entries_total = 0  # durable entries in the ledgers still there
        self._durable_total = 0  # durable entries ever, since opened (pending = assigned - durable)
        self._size_bytes = 0
        self._last_confirmed: Position | None = None
        # The current ledger, as assigned (ahead of durable while appends are in flight).
        self._current_id = -1
        self._current = LedgerState(-1, 0, 0, 0)
        self._assigned_total = 0  # also the ordinal the next entry gets
        self._handle: LedgerHandle | None = None
        self._offsets = new_offsets()
        self._assigned_bytes = LEDGER_HEADER_BYTES  # where the next record goes in the current file
        self._sealing: dict[int, ArrayOffsets] = {}  # sealed here, index file not yet written
        self._pending_seals: dict[int, SealInfo] = {}  # sealed with appends still in flight
        self._read_ordinal = _NEVER_READ  # one past the highest entry any read returned
        self._reads = ReadPath(self, ctx)
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
        found = await loop.run_in_executor(ctx.io, recover_dir, directory, ctx.config.sync, ctx.clock.now_ms())
        ctx.counters.torn_tails_truncated_total += found.torn_tails
        for ledger in found.ledgers:
            ledger.first_ordinal = ml._assigned_total
            ml._ledger_ids.append(ledger.ledger_id)
            ml._ledgers[ledger.ledger_id] = ledger
            ml._entries_total += ledger.entries
            ml._durable_total += ledger.entries
            ml._assigned_total += ledger.entries
            ml._size_bytes += ledger.size_bytes
            if ledger.entries:
                ml._last_confirmed = Position(ledger.ledger_id, ledger.entries - 1)
        for ledger_id, index in found.indexes.items():
            ctx.index_cache.put(ledger_id, index)
        opened: asyncio.Future[None] | None = None
        if found.last_sealed:
            opened = loop.create_future()
            ml._start_ledger(opened)
        else:
            current = found.ledgers[-1]
            ml._current_id = current.ledger_id
            ml._current = current
            ml._offsets = found.current_offsets
            ml._assigned_bytes = found.current_file_bytes
            ml._handle = LedgerHandle(current.ledger_id, ml.ledger_path(current.ledger_id), ml)
        end = ml._last_confirmed or Position(ml._current_id, -1)
        for state in found.cursors:
            cursor = ml._cursors[state.name] = ManagedCursor.from_state(state, ml)
            cursor.clip_to(end)
            ml._note_cursor(cursor.mark_delete_position)
        if opened is not None:
            await opened
        return ml

    def _start_ledger(self, opened: asyncio.Future[None] | None) -> None:
        """Make a new, empty current ledger. Synchronous: ids are handed out in call order."""
        ledger_id = self._ctx.allocate_ledger_id()
        created_ms = self._ctx.clock.now_ms()
        self._handle = LedgerHandle(ledger_id, self.ledger_path(ledger_id), self)
        self._journal.submit(CreateOp(self._handle, created_ms, ledger_id + 1, opened))
        self._ledger_ids.append(ledger_id)
        self._current = LedgerState(ledger_id, 0, 0, 0, created_ms, None, self._assigned_total)
        self._ledgers[ledger_id] = self._current
        self._current_id = ledger_id
        self._offsets = new_offsets()
        self._assigned_bytes = LEDGER_HEADER_BYTES

    def _roll(self) -> None:
        assert self._handle is not None
        old = self._current
        old.closed_ms = self._ctx.clock.now_ms()
        offsets = ArrayOffsets(self._offsets, self._assigned_bytes)
        self._sealing[old.ledger_id] = offsets
        seal = SealInfo(
            self._handle,
            self._dir / _layout.index_file_name(old.ledger_id),
            offsets.offsets,
            offsets.file_bytes,
            old.created_ms,
            old.closed_ms,
        )
        if old.entries == old.assigned:
            self._ctx.write_cache.add_seal(seal)
        else:
            self._pending_seals[old.ledger_id] = seal  # added once its last entry is durable
        self._start_ledger(None)
        self._ctx.counters.ledgers_rolled_total += 1

    def on_sealed(self, ledger_id: int) -> None:
        """Called by the write path (on the loop): the ledger's index file is written."""
        offsets = self._sealing.pop(ledger_id, None)
        if offsets is not None and ledger_id in self._ledgers:
            self._ctx.index_cache.put(ledger_id, offsets)

    def ledger_path(self, ledger_id: int) -> Path:
        return self._dir / _layout.ledger_file_name(ledger_id)

    # -- appending -----------------------------------------------------------------------------

    async def append(self, data: bytes) -> Position:
        """Append one entry; resolves with its position once it is durable under the sync policy."""
        return await self.append_nowait(data)

    def append_nowait(self, data: bytes) -> asyncio.Future[Position]:
        """`append` without a coroutine: the position is assigned now, in call order, and the
        future resolves once the entry is durable. The broker calls this once per SEND, so it
        saves a task per message; errors (closed or failed ledger, bad size) raise at once."""
        if self._state != "open":
            raise LedgerClosedError(f"managed ledger {self.name} is closed")
        failure = self._failure or self._ctx.write_path.failure or self._journal.broken
        if failure is not None:
            raise StorageError(f"managed ledger {self.name} failed; close and reopen it: {failure}")
        if type(data) is not bytes:
            data = bytes(data)  # a caller's bytearray could change under the cache
        size = len(data)
        if size == 0 or size > entry_bytes_max:
            raise ValueError(f"an entry must be 1 to {entry_bytes_max} bytes, not {size}")
        # Everything up to the submit stays synchronous, so positions follow call order.
        config = self._config
        if len(self._offsets) >= config.ledger_entries_max or self._assigned_bytes - LEDGER_HEADER_BYTES >= (
            config.ledger_bytes_max
        ):
            self._roll()
        assert self._handle is not None
        entry_id = len(self._offsets)
        self._current.assigned += 1
        self._assigned_total += 1
        self._offsets.append(self._assigned_bytes)
        self._assigned_bytes += RECORD_HEADER_BYTES + size
        self._ctx.publish_buffer.acquire(size)
        future: asyncio.Future[Position] = self._loop.create_future()
        self._journal.submit(AppendOp(self._handle, entry_id, data, future))
        return future

    def on_durable(self, ledger_id: int, last_entry_id: int, entries: int, size_bytes: int) -> None:
        """Called by the write path (on the loop): entries up to last_entry_id of ledger_id are durable."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return  # deleted meanwhile
        ledger.entries = last_entry_id + 1
        ledger.size_bytes += size_bytes
        self._entries_total += entries
        self._durable_total += entries
        self._size_bytes += size_bytes
        pos = Position(ledger_id, last_entry_id)
        if self._last_confirmed is None or pos > self._last_confirmed:
            self._last_confirmed = pos
        if self._pending_seals and ledger.entries == ledger.assigned:
            seal = self._pending_seals.pop(ledger_id, None)
            if seal is not None:
                self._ctx.write_cache.add_seal(seal)

    def on_write_failed(self, ledger_id: int, error: StorageError) -> None:
        # Positions after the failure may never reach the journal: stop appending. Closing and
        # reopening the managed ledger recovers to what is really durable.
        if self._failure is None:
            log.error("managed ledger %s: ledger %d failed, appends refused: %s", self.name, ledger_id, error)
            self._failure = error

    def file_offset(self, ledger_id: int, entry_id: int) -> int:
        """Where entry_id's record goes in its ledger file (asked by the write cache)."""
        if ledger_id == self._current_id:
            return self._offsets[entry_id]
        return self._sealing[ledger_id].offset(entry_id)

    def memory_offsets(self, ledger_id: int) -> Offsets | None:
        """Offsets held here rather than in an index file: the current or a just-sealed ledger."""
        if ledger_id == self._current_id:
            # A copy of the two numbers a read needs is taken on the loop, before the thread runs.
            return ArrayOffsets(self._offsets, self._assigned_bytes)
        return self._sealing.get(ledger_id)

    @property
    def tail_active(self) -> bool:
        """Whether the topic has an active cursor: some read within active_cursor_lag_entries of the end."""
        return self._assigned_total - self._read_ordinal <= active_cursor_lag_entries

    def note_read(self, last: Position) -> None:
        ledger = self._ledgers.get(last.ledger_id)
        if ledger is not None:
            ordinal = ledger.first_ordinal + last.entry_id + 1
            if ordinal > self._read_ordinal:
                self._read_ordinal = ordinal

    def _note_cursor(self, mark_delete: Position) -> None:
        """A cursor reading from just after mark_delete counts as a read up to there."""
        ledger = self._ledgers.get(mark_delete.ledger_id)
        if ledger is not None:
            self._read_ordinal = max(self._read_ordinal, ledger.first_ordinal + mark_delete.entry_id + 1)

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
        """Appends handed to the journal and not yet durable."""
        return self._assigned_total - self._durable_total

    def ledgers(self) -> list[LedgerInfo]:
        out = []
        for i in self._ledger_ids:
            ledger = self._ledgers[i]
            out.append(LedgerInfo(i, ledger.entries, ledger.size_bytes, ledger.created_ms, ledger.closed_ms))
        return out

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        return self._ledgers.get(ledger_id)

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

    def first_at_or_after(self, pos: Position) -> Position | None:
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
        return await self._reads.read_entries(start, max_entries)

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

    def check_readable(self) -> None:
        if self._state == "closed":
            raise LedgerClosedError(f"managed ledger {self.name} is closed")

    async def run(self, fn: Callable[..., _T], *args: object) -> _T:
        return await self._loop.run_in_executor(self._ctx.io, fn, *args)

    async def _run_to_end(self, fn: Callable[..., _T], *args: object) -> _T:
        """Like run, but a cancelled caller still waits for the thread to finish.

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

    # -- retention -----------------------------------------------------------------------------

    async def trim(self, up_to: Position) -> list[int]:
        """Delete whole ledgers, never the current one, all of whose entries are <= up_to (BR-5).

        Returns the ids of the ledgers deleted. A ledger with appends still in flight is kept.
        """
        if self._state != "open":
            raise LedgerClosedError(f"managed ledger {self.name} is closed")
        doomed: list[int] = []
        for ledger_id in self._ledger_ids:
            if ledger_id == self._current_id or ledger_id > up_to.ledger_id:
                break
            ledger = self._ledgers[ledger_id]
            if ledger.entries != ledger.assigned:
                break
            if ledger_id == up_to.ledger_id and ledger.entries - 1 > up_to.entry_id:
                break
            doomed.append(ledger_id)
        if not doomed:
            return []
        files: list[Path] = []
        for ledger_id in doomed:
            ledger = self._ledgers.pop(ledger_id)
            self._entries_total -= ledger.entries
            self._size_bytes -= ledger.size_bytes
            self._sealing.pop(ledger_id, None)
            self._pending_seals.pop(ledger_id, None)
            self._ctx.index_cache.pop(ledger_id)
            self._ctx.write_cache.drop_ledger(ledger_id)
            files.append(self.ledger_path(ledger_id))
            files.append(self._dir / _layout.index_file_name(ledger_id))
        del self._ledger_ids[: len(doomed)]
        deleted: asyncio.Future[None] = self._loop.create_future()
        generation = self._ctx.write_cache.active.generation
        self._ctx.flusher.submit(DeleteJob(doomed, files, [], generation, deleted))
        await deleted
        self._ctx.counters.ledgers_trimmed_total += len(doomed)
        return doomed

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
        self._note_cursor(mark_delete)
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

    @property
    def closing_or_closed(self) -> asyncio.Future[None] | None:
        """None while open; else a future that resolves once the close is done."""
        return None if self._state == "open" else self._closed

    async def close(self) -> None:
        """Wait for appends in flight and for their flush to the ledger files, write dirty cursors.

        Idempotent. Once closed, this log's files hold everything durable and nothing writes them,
        so opening it again (a new ManagedLedger) can trust what it finds on disk.
        """
        await self._close(persist=True, flush=True)

    async def _close(self, *, persist: bool, flush: bool) -> None:
        if self._state != "open":
            await asyncio.shield(self._closed)
            return
        self._state = "closing"
        try:
            barrier: asyncio.Future[None] = self._loop.create_future()
            self._journal.submit(BarrierOp(barrier))
            await barrier
            write_path = self._ctx.write_path
            if flush and (self._sealing or self._ctx.write_cache.holds_any(self._ledger_ids)):
                await write_path.flush()
            if self._persist_task is not None:
                self._persist_task.cancel()
                self._persist_task = None
            if persist:
                await self._persist_dirty()
        finally:
            self._state = "closed"
            self._closed.set_result(None)
            self._ctx.on_closed(self)

    async def remove_files(self) -> None:
        """Close without writing cursors, then delete the directory (Storage.delete_ledger)."""
        await self._close(persist=False, flush=False)
        async with self._persist_lock:  # no cursor file write may still be running in there
            for ledger_id in self._ledger_ids:
                self._ctx.write_cache.drop_ledger(ledger_id)
                self._ctx.index_cache.pop(ledger_id)
            deleted: asyncio.Future[None] = self._loop.create_future()
            generation = self._ctx.write_cache.active.generation
            self._ctx.flusher.submit(DeleteJob(list(self._ledger_ids), [], [self._dir], generation, deleted))
            await deleted

