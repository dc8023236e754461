"""The managed ledgers of one Storage by name: opening, looking up, listing and deleting them.

At most one ManagedLedger object exists per name: an open in progress is a task of its own that
later callers share (so a cancelled caller never leaves an open half done), a closing one is waited
for before a fresh one is opened, and a name being deleted is waited for before anything else is
done with it. A ledger is read from the storage database on first use (DbReader batches the reads of
one turn of the loop); an unopened name costs nothing.

A deletion is a journaled metadata operation (ML_DELETE). Until the flush puts it in the storage
database, that database still has the log: this object keeps the deleted names as a shadow over it
(`on_metadata_flushed` lifts it), so a deleted name is neither listed nor read back. A delete whose
write failed leaves the log as it was; if its ledger had been closed for it, the name is not read
from the database again before the write cache half holding its last operations is flushed.

Storage's own work on logs nobody may have open (the offload's check, storage/offload) borrows
them: `borrow` opens one as open_ledger would, `give_back` closes it again unless it was open
before or a caller of open_ledger took it meanwhile (the object is shared, so closing it under a
loaded topic would end that topic's log). `stored_page` sums up stored logs for the offload's
check, a page of names at a time, from the database alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from velamq._errors import StorageError
from velamq.storage.formats import _meta_ops
from velamq.storage.formats._meta_ops import MetaOp
from velamq.storage.index._db_reader import DbReader
from velamq.storage.index._storage_db import StorageDb, StoredLedger, StoredOffloadSummary
from velamq.storage.ledger._context import ClosedLog, StorageContext
from velamq.storage.ledger._managed_ledger import ManagedLedger


class LedgerDirectory:
    """The managed ledgers of a Storage by name, on its event loop (see the module docstring).
    `check_started` raises unless storage is started and returns the context ledgers share."""

    def __init__(self, check_started: Callable[[], StorageContext]) -> None:
        self._check_started = check_started
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader: DbReader | None = None
        self._ml_id_next = 1
        self.open: dict[str, ManagedLedger] = {}
        self._open_peak = 0  # the most topics open at once since the dict was last rebuilt
        self.opening: dict[str, asyncio.Task[ManagedLedger]] = {}
        self._deleting: dict[str, asyncio.Future[None]] = {}
        self._deleted: dict[str, MetaOp] = {}  # deleted, not yet flushed: the database still has them
        self._deleted_names: dict[int, str] = {}  # ml id -> name, of those
        # Closed by a delete whose write then failed: the write cache half (generation) the
        # database must have before the name is read from it again.
        self._unflushed: dict[str, int] = {}
        # Opened by storage's own work (the offload of a topic nobody has open, `borrow`): closed
        # again when that work is done, unless a caller of open_ledger took the object meanwhile.
        self.borrowed: set[str] = set()

    def start(self, loop: asyncio.AbstractEventLoop, reader: DbReader, ml_id_next: int) -> None:
        """Storage started: names can be read from the database now."""
        self._loop = loop
        self._reader = reader
        self._ml_id_next = ml_id_next

    # -- opening -------------------------------------------------------------------------------

    async def open_ledger(self, name: str) -> ManagedLedger:
        """The managed ledger of that name: created if absent, read from the database if stored,
        shared if open."""
        self.borrowed.discard(name)  # the caller has it now: a borrower must not close it
        return await self._shared(name)

    async def _shared(self, name: str) -> ManagedLedger:
        ctx = self._check_started()
        while True:
            deleting = self._deleting.get(name)
            if deleting is not None:
                await asyncio.shield(deleting)
                continue
            ml = self.open.get(name)
            if ml is None or ml.closing_or_closed is None:
                break
            await ml.closing_or_closed  # a closing one: open a fresh one once it is closed
        if ml is not None:
            return ml
        task = self.opening.get(name)
        if task is None:
            # A task of its own, so a cancelled caller never leaves an open half done.
            assert self._loop is not None
            task = self._loop.create_task(self._open_ledger(name, ctx))
            task.add_done_callback(_retrieve_exception)
            self.opening[name] = task
        return await asyncio.shield(task)

    async def _open_ledger(self, name: str, ctx: StorageContext) -> ManagedLedger:
        try:
            stored: StoredLedger | None = None
            unflushed = self._unflushed.pop(name, 0)
            if unflushed:
                await ctx.write_path.wait_flushed(unflushed)
            if name not in self._deleted:
                assert self._reader is not None
                stored = await self._reader.load(name)
            self._check_started()
            if stored is None:
                ml_id = self._ml_id_next
                self._ml_id_next += 1
                ml = ManagedLedger.create(name, ml_id, ctx)
            else:
                ml = ManagedLedger.restore(name, stored, ctx)
            self.open[name] = ml
            return ml
        finally:
            del self.opening[name]

    async def open_ledger_if_exists(self, name: str) -> ManagedLedger | None:
        """The managed ledger of that name if it exists (open, or stored), else None; nothing is
        created. Asked together with other opens in one turn of the loop, the lookup shares their
        trip to the database."""
        self.borrowed.discard(name)
        return await self._shared_if_exists(name)

    async def _shared_if_exists(self, name: str) -> ManagedLedger | None:
        self._check_started()
        while name in self._deleting:
            await asyncio.shield(self._deleting[name])
        if name in self.open or name in self.opening or name in self._unflushed:
            return await self._shared(name)
        if name in self._deleted:
            return None
        assert self._reader is not None
        if await self._reader.load(name) is None:
            return None
        return await self._shared(name)

    async def borrow(self, name: str) -> ManagedLedger | None:
        """The managed ledger of that name if it exists, for storage's own work on a log nobody
        may have open (the offload's check); `give_back` closes it again if it was not open before
        and nobody opened it meanwhile."""
        lent = name not in self.open and name not in self.opening
        if lent:
            self.borrowed.add(name)  # before the wait: an open_ledger during it takes it over
        ml = None
        try:
            ml = await self._shared_if_exists(name)
        finally:
            if ml is None:
                self.borrowed.discard(name)
        return ml

    async def give_back(self, ml: ManagedLedger) -> None:
        if ml.name in self.borrowed and self.open.get(ml.name) is ml:
            self.borrowed.discard(ml.name)
            await ml.close()

    async def wait_opening(self) -> None:
        """Wait for the opens in progress to end (successfully or not): Storage is closing."""
        for pending in list(self.opening.values()):
            try:
                await asyncio.shield(pending)
            except Exception:
                pass

    def on_closed(self, ml: ClosedLog) -> None:
        """A managed ledger closed: the next open of its name makes a fresh one."""
        if self.open.get(ml.name) is ml:
            del self.open[ml.name]
            # A dict never shrinks by itself: after many topics unloaded, give its table back.
            self._open_peak = max(self._open_peak, len(self.open) + 1)
            if self._open_peak > 1024 and len(self.open) < self._open_peak // 4:
                self.open = dict(self.open)
                self._open_peak = len(self.open)

    # -- looking up ----------------------------------------------------------------------------

    async def ledger_exists(self, name: str) -> bool:
        """Whether a managed ledger of that name exists (open, or in the storage database)."""
        self._check_started()
        if name in self.open or name in self._unflushed:
            return True
        if name in self._deleted:
            return False
        assert self._reader is not None
        return await self._reader.run(lambda db: db.find_ml(name)) is not None

    async def ledger_names(self, after: str = "", limit: int = 1000) -> list[str]:
        """Names of managed ledgers in name order, the first `limit` after `after` (a page)."""
        self._check_started()
        assert self._reader is not None
        stored = await self._reader.run(lambda db: db.ml_names(after, limit))
        names = {n for _, n in stored} | {n for n in (*self.open, *self._unflushed) if n > after}
        return sorted(n for n in names if n not in self._deleted or n in self.open)[:limit]

    async def stored_page(self, after: str = "", limit: int = 1000) -> list[StoredOffloadSummary]:
        """Stored logs in name order as the offload's check sees them, the first `limit` names
        after `after`, from the database alone (a deleted one as having nothing). An open log may
        be ahead of this."""
        self._check_started()
        assert self._reader is not None
        page = await self._reader.run(lambda db: db.offload_summaries(after, limit))
        return [StoredOffloadSummary(s.name, 0, 0, None, None) if s.name in self._deleted else s for s in page]

    # -- deleting ------------------------------------------------------------------------------

    async def delete_ledger(self, name: str) -> None:
        """Close the managed ledger if open and delete it with its cursors; returns once the
        deletion is durable (the flush then finishes it, and the collector reclaims its bytes)."""
        ctx = self._check_started()
        assert self._loop is not None
        while name in self._deleting:
            await asyncio.shield(self._deleting[name])
        pending = self.opening.get(name)
        if pending is not None:
            try:
                await asyncio.shield(pending)
            except Exception:
                pass
        done: asyncio.Future[None] = self._loop.create_future()
        self._deleting[name] = done
        try:
            await self._delete(name, ctx)
        finally:
            del self._deleting[name]
            done.set_result(None)

    async def _delete(self, name: str, ctx: StorageContext) -> None:
        assert self._loop is not None and self._reader is not None
        ml = self.open.get(name)
        if ml is not None:
            ml_id, ledger_ids = ml.ml_id, await ml.delete()
            unflushed = ml.last_generation
        elif name in self._deleted:
            return
        else:
            found = await self._reader.run(lambda db: _ml_and_ledgers(db, name))
            if found is None:
                return
            ml_id, ledger_ids = found
            unflushed = 0
        op = _meta_ops.ml_delete(ml_id, ledger_ids)
        op.future = self._loop.create_future()
        self._deleted[name] = op
        self._deleted_names[ml_id] = name
        ctx.journal.submit(op)
        try:
            await op.future
        except StorageError:
            # Not journaled (a failed write): the database still has the log, and so do we.
            if self._deleted.get(name) is op:
                del self._deleted[name]
                self._deleted_names.pop(ml_id, None)
            if unflushed > ctx.write_path.flushed_generation:  # reopened only once flushed
                self._unflushed[name] = unflushed
            raise
        # Only now: if the deletion had failed, these entries would still be the topic's.
        for ledger_id in ledger_ids:
            ctx.write_cache.drop_ledger(ledger_id)

    def on_metadata_flushed(self, metadata: list[MetaOp]) -> None:
        """The storage database now has these operations: deleted names need no shadow any more."""
        if not self._deleted:
            return
        for op in metadata:
            if op.kind == _meta_ops.ML_DELETE:
                name = self._deleted_names.pop(op.subject, None)
                if name is not None and self._deleted.get(name) is op:
                    del self._deleted[name]


def _ml_and_ledgers(db: StorageDb, name: str) -> tuple[int, list[int]] | None:
    ml_id = db.find_ml(name)
    return None if ml_id is None else (ml_id, db.ledger_ids_of(ml_id))


def _retrieve_exception(task: asyncio.Task[ManagedLedger]) -> None:
    # Whoever awaited the open has the error; this keeps asyncio from warning when nobody did.
    if not task.cancelled():
        task.exception()
