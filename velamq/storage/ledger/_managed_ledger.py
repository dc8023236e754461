"""The managed ledger: one topic's durable log, a list of ledgers, and its cursors.

A managed ledger lives on the event loop and is changed only there. Positions are assigned when
append is called (so in call order); the entry goes to the shared journal (_journal), and the
append resolves once the journal's group commit made it durable and the write path (_write_path)
put it in the write cache. `last_confirmed` only ever covers a contiguous prefix of the log.

Ledgers: every ledger but the newest is sealed. The newest is the current ledger, where appends
go; when it holds ledger_entries_max entries or ledger_bytes_max bytes, the next append seals it
and starts a new one, whose entries start again at 0. Creating, sealing and deleting ledgers are
metadata operations journaled in the same queue as the entries (_meta_ops), so they need no write
of their own and are ordered with the entries; the flush records them in the storage database.

Opening one (Storage.open_ledger) is cheap and lazy: a few index lookups in the storage database
(its ledgers and cursors), nothing scanned, nothing per topic at start. What it holds in memory is
small (__slots__ objects: the ledger list, the cursors); `close` releases it all, which is what the
broker needs to unload an idle topic.

Helpers with one job each: _ledger_list (the ledgers and the log's shape), _ledger_rollover (the
current ledger: entry ids, rollover, replacing a ledger that lost an append), _read_path (reads
through the caches, and whether the topic has an active cursor), _cursor_persistence (cursors added
and deleted, their state journaled at most once per cursor_persist_interval_s, and on close), _trim
(retention).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Literal, TypeVar

from velamq._errors import LedgerClosedError, StorageError
from velamq.storage._config import entry_bytes_max
from velamq.storage._position import Entry, LedgerInfo, Position
from velamq.storage.formats import _meta_ops
from velamq.storage.index._storage_db import StoredLedger
from velamq.storage.journal._journal import AppendOp, AppendWaiter, BarrierOp
from velamq.storage.ledger._context import StorageContext
from velamq.storage.ledger._cursor import CursorState, ManagedCursor
from velamq.storage.ledger._cursor_persistence import CursorPersistence
from velamq.storage.ledger._list import LedgerList, LedgerState
from velamq.storage.ledger._offloaded import delete_local, mark_offloaded
from velamq.storage.ledger._read_path import ReadPath
from velamq.storage.ledger._rollover import CurrentLedger
from velamq.storage.ledger._trim import trim_ledgers

log = logging.getLogger("velamq.storage")

_T = TypeVar("_T")


class ManagedLedger:
    """One topic's durable log: a list of ledgers, appended to at the end, read anywhere, trimmed
    at the front, with the topic's durable cursors. Opened by name through Storage.open_ledger (at
    most one object per name) and changed only on the event loop: `append_nowait` assigns positions
    in call order and resolves once the journal made the entry durable; reads go through the caches
    to the entry logs; `trim` deletes whole old ledgers; `close` waits for appends in flight and
    their flush, journals dirty cursors and releases what the object holds."""

    __slots__ = (
        "_assigned_total",
        "_closed",
        "_ctx",
        "_current",
        "_cursors",
        "_durable_total",
        "_last_confirmed",
        "_list",
        "_loop",
        "_persistence",
        "_reads",
        "_state",
        "last_generation",
        "ml_id",
        "name",
    )

    def __init__(self, name: str, ml_id: int, ctx: StorageContext, loop: asyncio.AbstractEventLoop) -> None:
        self.name = name
        self.ml_id = ml_id
        self._ctx = ctx
        self._loop = loop
        self._list = LedgerList()
        self._durable_total = 0  # durable entries ever, since opened (pending = assigned - durable)
        self._last_confirmed: Position | None = None
        self._current = CurrentLedger(ctx, self._list)  # where appends go, and its rollover
        self._assigned_total = 0  # also the ordinal the next entry gets
        self._reads: ReadPath | None = ReadPath(self, ctx)  # None once closed
        self._cursors: dict[str, ManagedCursor] = {}
        self._persistence = CursorPersistence(name, ml_id, self._cursors, ctx)
        self._state: Literal["open", "closing", "closed"] = "open"
        self._closed: asyncio.Future[None] | None = None
        self.last_generation = 0  # the newest write cache half this log's entries or operations went to

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def create(cls, name: str, ml_id: int, ctx: StorageContext) -> ManagedLedger:
        """A new, empty log: its ML_CREATE is journaled, then its first ledger's creation."""
        ml = cls(name, ml_id, ctx, asyncio.get_running_loop())
        ml._current.create_pending = True
        ml._current.start(ml, 0)
        return ml

    @classmethod
    def restore(cls, name: str, stored: StoredLedger, ctx: StorageContext) -> ManagedLedger:
        """The log as the storage database has it (everything durable is there: journal replay ran
        at start, and a managed ledger's close waits for its flush)."""
        ml = cls(name, stored.ml_id, ctx, asyncio.get_running_loop())
        lst = ml._list
        ml._last_confirmed = lst.restore(stored.ledgers)
        ml._durable_total = ml._assigned_total = lst.entries_total
        if stored.ledgers and stored.ledgers[-1].closed_ms is None:
            ml._current.resume(ml)
        else:
            ml._current.start(ml, ml._assigned_total)
        end = ml._last_confirmed or Position(lst.current_id, -1)
        for cursor_name, raw in stored.cursors:
            state_ = CursorState.from_json_bytes(raw, f"cursor {cursor_name!r} of {name}")
            cursor = ml._cursors[state_.name] = ManagedCursor.from_state(state_, ml)
            cursor.clip_to(end)
            ml._read_path().note_position(cursor.mark_delete_position)
        return ml

    # -- appending -----------------------------------------------------------------------------

    async def append(self, data: bytes) -> Position:
        """Append one entry; resolves with its position once it is durable under the sync policy."""
        return await self.append_nowait(data)

    def append_nowait(self, data: bytes) -> asyncio.Future[Position]:
        """`append` without a coroutine: the position is assigned now, in call order, and the
        future resolves once the entry is durable. It saves a task per message; errors (closed
        or failed ledger, bad size) raise at once."""
        future: asyncio.Future[Position] = self._loop.create_future()
        self.append_with(data, future)
        return future

    def append_with(self, data: bytes, waiter: AppendWaiter) -> None:
        """`append_nowait` resolving the caller's `waiter` (set_result(Position) once durable,
        set_exception if the write fails) instead of a future: the broker calls this once per
        SEND and acts on the outcome without a callback scheduled per entry."""
        if self._state != "open":
            raise LedgerClosedError(f"managed ledger {self.name} is closed")
        ctx = self._ctx
        if type(data) is not bytes:
            data = bytes(data)  # a caller's bytearray could change under the cache
        size = len(data)
        if size == 0 or size > entry_bytes_max:
            raise ValueError(f"an entry must be 1 to {entry_bytes_max} bytes, not {size}")
        # Everything up to the submit stays synchronous, so positions follow call order.
        handle, entry_id = self._current.assign(self, size, self._assigned_total)
        self._assigned_total += 1
        ctx.publish_buffer.acquire(size)
        ctx.counters.pending_appends += 1
        ctx.journal.submit(AppendOp(handle, entry_id, data, waiter))

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

    def on_append_failed(self, ledger_id: int, error: StorageError) -> None:
        """Called by the write path (on the loop) for each append a failed write lost. The journal
        fenced its ledger, so the failures are the ledger's last assigned entries: they are taken
        back (the ledger ends at its durable entries), and the next append starts a new ledger."""
        ledger = self._list.get(ledger_id)
        if ledger is not None and ledger.assigned > ledger.entries:
            ledger.assigned -= 1
            self._assigned_total -= 1
        self._current.on_append_failed(ledger_id)

    def on_op_failed(self, op: _meta_ops.MetaOp, error: StorageError) -> None:
        """A metadata operation of this log failed to be journaled: its creation is journaled again
        before the next ledger's; a ledger whose creation failed is replaced at the next append."""
        self._current.on_op_failed(op, error)

    @property
    def tail_active(self) -> bool:
        """Whether new entries go to the tail cache (the topic has an active cursor, ME-3)."""
        return self._reads is not None and self._reads.tail_active(self._assigned_total)

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
        return await self._read_path().read_entries(start, max_entries)

    async def find_first(self, predicate: Callable[[bytes], bool]) -> Position | None:
        """Binary search for the first entry whose data satisfies a predicate monotone over the log."""
        return await self._read_path().find_first(self._list.durable_spans(), predicate)

    def _read_path(self) -> ReadPath:
        reads = self._reads
        if reads is None:
            raise LedgerClosedError(f"managed ledger {self.name} is closed")
        return reads

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
        offloaded = {s.ledger_id for s in self._list.states if s.offloaded_ms is not None}
        doomed = await trim_ledgers(self._ctx, self.ml_id, self._list, up_to)
        copies = self._ctx.offloaded
        if copies is not None and offloaded.intersection(doomed):
            copies.ledgers_deleted(self.name, [i for i in doomed if i in offloaded])
        return doomed

    # -- offloading (_offloaded; the offloader itself is velamq/storage/offload) ----------------

    async def mark_offloaded(self, ledger_id: int) -> None:
        """Record that a sealed ledger's offloaded copy is complete (durable on return)."""
        self.check_readable()
        await mark_offloaded(self._ctx, self._list, ledger_id, self)

    async def delete_local_copy(self, ledger_id: int) -> None:
        """Delete an offloaded ledger's local copy; its reads go to the offloaded copy from now on."""
        self.check_readable()
        await delete_local(self._ctx, self._list, ledger_id, self)

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
        mark_delete = self._list.initial_mark_delete(initial, self._last_confirmed)
        cursor = ManagedCursor(name, self, mark_delete)
        self._read_path().note_position(mark_delete)
        await self._persistence.add(cursor)  # journaled before it is handed out
        return cursor

    async def delete_cursor(self, name: str) -> None:
        await self._persistence.delete(name)

    def cursor_changed(self, cursor: ManagedCursor) -> None:
        """Called by a cursor on every change: it is written within cursor_persist_interval_s."""
        if self._cursors.get(cursor.name) is cursor:  # else deleted
            self._persistence.changed(cursor.name)

    # -- closing -------------------------------------------------------------------------------

    @property
    def closing_or_closed(self) -> asyncio.Future[None] | None:
        """None while open; else a future that resolves once the close is done."""
        return self._closed

    async def appends_settled(self) -> None:
        """Wait until every append and operation made so far is durable or failed: one journal
        barrier behind them (the journal delivers its queue in order), no polling."""
        barrier: asyncio.Future[None] = self._loop.create_future()
        self._ctx.journal.submit(BarrierOp(barrier))
        await barrier

    async def close(self) -> None:
        """Wait for appends in flight, journal dirty cursors, wait for the flush that puts it all in
        the entry logs and the storage database, then let go of everything this object holds.

        Idempotent. Once closed, the storage database has this log as it is, so opening it again (a
        new ManagedLedger: the broker reloading an unloaded topic) reads it from there.
        """
        await self._close(persist=True, flush=True)

    async def _close(self, *, persist: bool, flush: bool) -> None:
        if self._closed is not None:
            await asyncio.shield(self._closed)
            return
        self._state = "closing"
        self._closed = self._loop.create_future()
        try:
            await self._persistence.close(persist=persist)
            await self.appends_settled()  # every append and operation of this log is in the write cache now
            write_path = self._ctx.write_path
            if flush and self.last_generation > write_path.flushed_generation:
                await write_path.wait_flushed(self.last_generation)
        finally:
            self._state = "closed"
            self._release()
            self._closed.set_result(None)
            self._ctx.on_closed(self)

    def _release(self) -> None:
        """Drop what the shared tail cache holds of this log: the newest entries, back to back."""
        pop = self._ctx.tail_cache.pop
        for state in self._list.states[-2:]:
            entry_id = state.entries - 1
            while entry_id >= 0 and pop(Position(state.ledger_id, entry_id)) is not None:
                entry_id -= 1
        self._cursors.clear()
        # The read path and the journal handle point back at this object: without them a closed
        # log is freed by reference counting as soon as its owner lets go (an unloaded topic's
        # memory comes back at once, not at the next full collection of the cyclic GC).
        self._reads = None
        self._current.handle = None

    async def delete(self) -> list[int]:
        """Close without persisting cursors (Storage.delete_ledger); returns the ledger ids."""
        await self._close(persist=False, flush=False)
        return list(self._list.ids)
