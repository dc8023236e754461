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

Helpers with one job each: _ledger_list (the ledgers and the log's shape), _read_path (reads
through the caches, and whether the topic has an active cursor), _cursor_persistence (cursor files,
at most once per cursor_persist_interval_s, and on close), _trim (retention).
"""

from __future__ import annotations

import asyncio
import logging
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
from velamq.storage._config import Counters, StorageConfig, entry_bytes_max
from velamq.storage._cursor import ManagedCursor
from velamq.storage._cursor_persistence import CursorPersistence
from velamq.storage._flusher import Flusher
from velamq.storage._journal import AppendOp, BarrierOp, CreateOp, Journal, LedgerHandle
from velamq.storage._ledger_dir import LedgerState, recover_dir
from velamq.storage._ledger_file import LEDGER_HEADER_BYTES, RECORD_HEADER_BYTES, new_offsets
from velamq.storage._ledger_list import LedgerList
from velamq.storage._position import Entry, LedgerInfo, Position
from velamq.storage._publish_buffer import PublishBuffer
from velamq.storage._read_path import ArrayOffsets, Offsets, ReadPath
from velamq.storage._trim import delete_ledgers, trimmable
from velamq.storage._write_cache import SealInfo, WriteCache

if TYPE_CHECKING:
    from velamq.storage._write_path import WritePath

log = logging.getLogger("velamq.storage")

_T = TypeVar("_T")


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
    """One topic's durable log: a list of ledgers, appended to at the end, read anywhere, trimmed
    at the front, with the topic's durable cursors. Opened by name through Storage.open_ledger (at
    most one object per name) and changed only on the event loop: `append_nowait` assigns positions
    in call order and resolves once the journal made the entry durable; reads go through the caches
    to the ledger files; `trim` deletes whole old ledgers; `close` waits for appends in flight and
    their flush and writes dirty cursors, after which the files hold everything durable."""

    def __init__(self, name: str, directory: Path, ctx: StorageContext, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self._dir = directory
        self._ctx = ctx
        self._config = ctx.config
        self._journal = ctx.journal
        self._loop = loop
        self._list = LedgerList()
        self._durable_total = 0  # durable entries ever, since opened (pending = assigned - durable)
        self._last_confirmed: Position | None = None
        # The current ledger, as assigned (ahead of durable while appends are in flight).
        self._current = LedgerState(-1, 0, 0, 0)
        self._assigned_total = 0  # also the ordinal the next entry gets
        self._handle: LedgerHandle | None = None
        self._offsets = new_offsets()
        self._assigned_bytes = LEDGER_HEADER_BYTES  # where the next record goes in the current file
        self._sealing: dict[int, ArrayOffsets] = {}  # sealed here, index file not yet written
        self._pending_seals: dict[int, SealInfo] = {}  # sealed with appends still in flight
        self._reads = ReadPath(self, ctx)
        self._cursors: dict[str, ManagedCursor] = {}
        self._persistence = CursorPersistence(
            name,
            directory,
            self._cursors,
            clock=ctx.clock,
            interval_s=ctx.config.cursor_persist_interval_s,
            sync=ctx.config.sync,
            io=ctx.io,
            counters=ctx.counters,
            loop=loop,
        )
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
            ml._list.add(ledger)
            ml._durable_total += ledger.entries
            ml._assigned_total += ledger.entries
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
            ml._list.current_id = current.ledger_id
            ml._current = current
            ml._offsets = found.current_offsets
            ml._assigned_bytes = found.current_file_bytes
            ml._handle = LedgerHandle(current.ledger_id, ml.ledger_path(current.ledger_id), ml)
        end = ml._last_confirmed or Position(ml._list.current_id, -1)
        for state in found.cursors:
            cursor = ml._cursors[state.name] = ManagedCursor.from_state(state, ml)
            cursor.clip_to(end)
            ml._reads.note_position(cursor.mark_delete_position)
        if opened is not None:
            await opened
        return ml

    def _start_ledger(self, opened: asyncio.Future[None] | None) -> None:
        """Make a new, empty current ledger. Synchronous: ids are handed out in call order."""
        ledger_id = self._ctx.allocate_ledger_id()
        created_ms = self._ctx.clock.now_ms()
        self._handle = LedgerHandle(ledger_id, self.ledger_path(ledger_id), self)
        self._journal.submit(CreateOp(self._handle, created_ms, ledger_id + 1, opened))
        self._current = LedgerState(ledger_id, 0, 0, 0, created_ms, None, self._assigned_total)
        self._list.add(self._current)
        self._list.current_id = ledger_id
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
        if offsets is not None and ledger_id in self._list.states:
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
        ledger = self._list.get(ledger_id)
        if ledger is None:
            return  # deleted meanwhile
        self._list.note_durable(ledger, last_entry_id + 1 - ledger.entries, size_bytes)
        self._durable_total += entries
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
        if ledger_id == self._list.current_id:
            return self._offsets[entry_id]
        return self._sealing[ledger_id].offset(entry_id)

    def memory_offsets(self, ledger_id: int) -> Offsets | None:
        """Offsets held here rather than in an index file: the current or a just-sealed ledger."""
        if ledger_id == self._list.current_id:
            # A copy of the two numbers a read needs is taken on the loop, before the thread runs.
            return ArrayOffsets(self._offsets, self._assigned_bytes)
        return self._sealing.get(ledger_id)

    @property
    def tail_active(self) -> bool:
        """Whether new entries go to the tail cache (the topic has an active cursor, ME-3)."""
        return self._reads.tail_active(self._assigned_total)

    # -- the log's shape (_ledger_list answers) ------------------------------------------------

    @property
    def last_confirmed(self) -> Position | None:
        return self._last_confirmed

    @property
    def first_position(self) -> Position | None:
        return self._list.first_position

    @property
    def current_ledger_id(self) -> int:
        return self._list.current_id

    @property
    def size_bytes(self) -> int:
        return self._list.size_bytes

    @property
    def entries_total(self) -> int:
        return self._list.entries_total

    @property
    def pending_appends(self) -> int:
        """Appends handed to the journal and not yet durable."""
        return self._assigned_total - self._durable_total

    def ledgers(self) -> list[LedgerInfo]:
        return self._list.infos()

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        return self._list.get(ledger_id)

    def entry_exists(self, pos: Position) -> bool:
        return self._list.entry_exists(pos)

    def next_position(self, pos: Position) -> Position:
        return self._list.next_position(pos)

    def count_entries(self, after: Position, up_to: Position) -> int:
        return self._list.count_entries(after, up_to)

    def first_at_or_after(self, pos: Position) -> Position | None:
        return self._list.first_at_or_after(pos)

    # -- reading -------------------------------------------------------------------------------

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to max_entries durable entries from start on (inclusive), across ledgers."""
        return await self._reads.read_entries(start, max_entries)

    async def find_first(self, predicate: Callable[[bytes], bool]) -> Position | None:
        """Binary search for the first entry whose data satisfies a predicate monotone over the log."""
        return await self._reads.find_first(self._list.durable_spans(), predicate)

    def check_readable(self) -> None:
        if self._state == "closed":
            raise LedgerClosedError(f"managed ledger {self.name} is closed")

    async def run(self, fn: Callable[..., _T], *args: object) -> _T:
        return await self._loop.run_in_executor(self._ctx.io, fn, *args)

    # -- retention (_trim) ---------------------------------------------------------------------

    async def trim(self, up_to: Position) -> list[int]:
        """Delete whole ledgers, never the current one, all of whose entries are <= up_to (BR-5).

        Returns the ids of the ledgers deleted. A ledger with appends still in flight is kept.
        """
        if self._state != "open":
            raise LedgerClosedError(f"managed ledger {self.name} is closed")
        count = trimmable(self._list, up_to)
        if not count:
            return []
        doomed = [state.ledger_id for state in self._list.remove_first(count)]
        files: list[Path] = []
        for ledger_id in doomed:
            self._sealing.pop(ledger_id, None)
            self._pending_seals.pop(ledger_id, None)
            files.append(self.ledger_path(ledger_id))
            files.append(self._dir / _layout.index_file_name(ledger_id))
        await delete_ledgers(self._ctx, doomed, files, [])
        self._ctx.counters.ledgers_trimmed_total += len(doomed)
        return doomed

    # -- cursors (_cursor_persistence writes them) ---------------------------------------------

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
            mark_delete = Position(first.ledger_id, -1) if first else Position(self._list.current_id, -1)
        elif initial == "latest":
            mark_delete = self._last_confirmed or Position(self._list.current_id, -1)
        else:
            raise ValueError(f"initial must be 'earliest' or 'latest', not {initial!r}")
        cursor = ManagedCursor(name, self, mark_delete)
        self._cursors[name] = cursor
        self._reads.note_position(mark_delete)
        await self._persistence.write_now(cursor)  # before it is handed out
        return cursor

    async def delete_cursor(self, name: str) -> None:
        if self._cursors.pop(name, None) is not None:
            await self._persistence.remove(name)

    def cursor_changed(self, cursor: ManagedCursor) -> None:
        """Called by a cursor on every change: it is written within cursor_persist_interval_s."""
        if self._cursors.get(cursor.name) is cursor:  # else deleted
            self._persistence.changed(cursor.name)

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
            if flush and (self._sealing or self._ctx.write_cache.holds_any(self._list.ids)):
                await self._ctx.write_path.flush()
            await self._persistence.close(persist=persist)
        finally:
            self._state = "closed"
            self._closed.set_result(None)
            self._ctx.on_closed(self)

    async def remove_files(self) -> None:
        """Close without writing cursors, then delete the directory (Storage.delete_ledger)."""
        await self._close(persist=False, flush=False)
        await self._persistence.wait_idle()  # no cursor file write may still be running in there
        await delete_ledgers(self._ctx, list(self._list.ids), [], [self._dir])
