"""Storage: the broker's one entry point to durable logs.

It owns what all managed ledgers share: the data directory (locked against a second broker), the
storage database (entry index and metadata, _storage_db), the journal thread (group commit across
all topics), the write cache and the flusher thread (shared entry logs), the garbage collector
thread, the tail, read and index caches, the publish buffer, and a small pool of I/O threads. The
memory budget (StorageConfig.budget, ME-1) sizes all of them; `memory_budget` shows the split so
the broker can size what it owns. Managed ledgers are opened by topic name, at most one object per
name, lazily: nothing is read per topic at start, and an unopened topic costs no memory.

Start: lock the directory, migrate a format 1 directory (_migrate_v1), bring the entry logs back to
what the index committed and replay the journal (_recovery), then start the threads. Close: close
every managed ledger, flush the write cache, stop the threads; a clean close leaves nothing in the
journal to replay.

Ledger ids come from one counter for the whole data directory, so they increase across topics and
are never reused, even after a topic is deleted and created again: a client holding an old message
id can never confuse it with a new entry, and the caches can key entries by position alone. A
ledger's creation is journaled before its first entry, and each flush raises the counter in the
database to past the ledgers it created, so after a crash the counter is past every ledger that
ever held a durable entry.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from velamq._clock import Clock, system_clock
from velamq._errors import StorageError
from velamq.storage import _layout, _meta_ops
from velamq.storage._ballast import Ballast, ballast_size
from velamq.storage._caches import ByteLRU
from velamq.storage._config import Counters, MemoryBudget, StorageConfig, cache_entry_overhead_bytes, io_threads
from velamq.storage._db_reader import DbReader
from velamq.storage._entry_log import Run
from velamq.storage._flusher import Flusher
from velamq.storage._gc import GarbageCollector, GcResult
from velamq.storage._gc_schedule import GcSchedule
from velamq.storage._journal import Journal
from velamq.storage._journal_file import JOURNAL_DIR
from velamq.storage._log_writer import LogIds, LogWriter
from velamq.storage._managed_ledger import ManagedLedger, StorageContext
from velamq.storage._meta_ops import MetaOp
from velamq.storage._migrate_v1 import migrate_if_format_1
from velamq.storage._position import Position
from velamq.storage._publish_buffer import PublishBuffer
from velamq.storage._read_path import run_size
from velamq.storage._recovery import JournalRecovery, check_logs, recover_journal
from velamq.storage._storage_db import StorageDb, StoredLedger, ThreadDbs
from velamq.storage._storage_metrics import storage_metrics
from velamq.storage._write_cache import WriteCache
from velamq.storage._write_health import failure_kind
from velamq.storage._write_path import WritePath

log = logging.getLogger("velamq.storage")

_T = TypeVar("_T")


def _entry_size(data: bytes) -> int:
    return len(data) + cache_entry_overhead_bytes


class Storage:
    """The broker's one entry point to durable logs: one per data directory, used from one event
    loop. `start` locks the directory and recovers; `open_ledger` hands out managed ledgers by topic
    name (read from the storage database on first use, at most one object per name);
    `delete_ledger` removes one with its cursors; `collect_garbage` returns the space of deleted
    entries; `close` closes everything, flushes and stops the storage threads."""

    def __init__(self, config: StorageConfig, clock: Clock = system_clock) -> None:
        self.config = config
        self.clock = clock
        self._data_dir = Path(config.data_dir)
        self._journal_dir = self._data_dir / JOURNAL_DIR
        self._logs_dir = self._data_dir / _layout.LOGS_DIR
        self._db_path = self._data_dir / _layout.DB_FILE
        budget = config.budget
        self.memory_budget: MemoryBudget = budget
        self.publish_buffer = PublishBuffer(budget.publish_buffer_bytes)
        self.tail_cache: ByteLRU[Position, bytes] = ByteLRU("tail", budget.tail_cache_bytes, _entry_size)
        self.read_cache: ByteLRU[Position, bytes] = ByteLRU("read", budget.read_cache_bytes, _entry_size)
        self.index_cache: ByteLRU[tuple[int, int], Run] = ByteLRU("index", budget.index_cache_bytes, run_size)
        self.write_cache = WriteCache(budget.write_cache_bytes, clock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._io: ThreadPoolExecutor | None = None
        self._dbs: ThreadDbs | None = None
        self._journal: Journal | None = None
        self._flusher: Flusher | None = None
        self._gc: GarbageCollector | None = None
        self._gc_schedule: GcSchedule | None = None
        self._reader: DbReader | None = None
        self._write_path: WritePath | None = None
        self._ctx: StorageContext | None = None
        self._lock_fd = -1
        self._ledger_id_next = 1
        self._ml_id_next = 1
        self._open: dict[str, ManagedLedger] = {}
        self._open_peak = 0  # the most topics open at once since the dict was last rebuilt
        self._opening: dict[str, asyncio.Task[ManagedLedger]] = {}
        self._deleting: dict[str, asyncio.Future[None]] = {}
        self._deleted: dict[str, MetaOp] = {}  # deleted, not yet flushed: the database still has them
        self._deleted_names: dict[int, str] = {}  # ml id -> name, of those
        # Closed by a delete whose write then failed: the write cache half (generation) the
        # database must have before the name is read from it again.
        self._unflushed: dict[str, int] = {}
        self._counters = Counters()
        self._ballast = Ballast(
            self._data_dir, ballast_size(config.ballast_bytes, budget.write_cache_bytes, self._data_dir)
        )
        self.recovery: JournalRecovery | None = None
        self._state = "new"

    async def start(self) -> None:
        if self._state != "new":
            raise StorageError(f"storage in {self._data_dir} is {self._state}, cannot start")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="velamq-storage-io")
        try:
            self._lock_fd = await loop.run_in_executor(self._io, _lock, self._data_dir)
            try:
                writer, log_ids = await loop.run_in_executor(self._io, self._recover)
            except BaseException:
                await loop.run_in_executor(self._io, _layout.unlock_data_dir, self._lock_fd)
                raise
        except BaseException:
            self._io.shutdown(wait=False)
            raise
        self._start_threads(loop, writer, log_ids)
        self._state = "started"
        log.info(
            "storage started in %s (sync_policy=%s, memory budget %d MiB)",
            self._data_dir,
            self.config.sync_policy,
            self.memory_budget.total_bytes >> 20,
        )

    def _recover(self) -> tuple[LogWriter, LogIds]:
        """Blocking: migration, entry logs against the index, journal replay. On a disk too full
        for replay, the ballast is given back and recovery runs again (_ballast); afterwards the
        ballast is made again if there is room."""
        ballast = self._ballast
        try:
            result = self._recover_once()
        except (OSError, StorageError, sqlite3.Error) as exc:
            if failure_kind(exc) != "no_space" or not ballast.release():
                raise
            result = self._recover_once()
        ballast.make()
        return result

    def _recover_once(self) -> tuple[LogWriter, LogIds]:
        config = self.config
        migrate_if_format_1(self._data_dir, sync=config.sync, log_bytes_max=config.entry_log_bytes_max)
        db = StorageDb(self._db_path, sync=config.sync, create=True)
        writer: LogWriter | None = None
        try:
            removed, truncated, log_id_next = check_logs(self._logs_dir, db)
            log_ids = LogIds(log_id_next)
            writer = LogWriter(
                self._logs_dir,
                db,
                log_ids,
                sync=config.sync,
                log_bytes_max=config.entry_log_bytes_max,
                now_ms=self.clock.now_ms,
            )
            writer.open()
            self.recovery = recover_journal(self._journal_dir, writer)
        except BaseException:
            if writer is not None:
                writer.close()
            db.close()
            raise
        self.recovery.logs_removed, self.recovery.log_bytes_truncated = removed, truncated
        self.recovery.log_id_next = log_id_next
        meta = db.meta()
        self._ledger_id_next = max(1, meta.get("ledger_id_next", 1))
        self._ml_id_next = max(1, meta.get("ml_id_next", 1))
        return writer, log_ids

    def _start_threads(self, loop: asyncio.AbstractEventLoop, writer: LogWriter, log_ids: LogIds) -> None:
        config = self.config
        assert self.recovery is not None and self._io is not None
        write_path = WritePath(
            config,
            loop,
            self.write_cache,
            self.tail_cache,
            self.publish_buffer,
            self._counters,
            self.clock,
            self._on_metadata_flushed,
        )
        journal = Journal(
            self._journal_dir,
            self.recovery.next_seq,
            policy=config.sync_policy,
            sync_interval_ms=config.sync_interval_ms,
            segment_bytes=config.journal_segment_bytes,
            deliver=write_path.on_group,
            loop=loop,
            clock=self.clock,
        )
        journal.open()
        if journal.failure is not None:  # no segment yet (a full disk): not writable until one is made
            write_path.health.journal_failed(journal.failure)
        write_path.health.on_writable = self._on_writable
        flusher = Flusher(writer, self._journal_dir, sync=config.sync, on_flushed=write_path.on_flushed, loop=loop)
        gc = GarbageCollector(
            self._db_path,
            self._logs_dir,
            log_ids,
            sync=config.sync,
            log_bytes_max=config.entry_log_bytes_max,
            bytes_per_s=config.gc_bytes_per_s,
            now_ms=self.clock.now_ms,
            loop=loop,
        )
        journal.start()
        flusher.start()
        gc.start()
        write_path.start(journal, flusher)
        self._journal, self._flusher, self._gc, self._write_path = journal, flusher, gc, write_path
        self._dbs = ThreadDbs(self._db_path, sync=config.sync)
        self._reader = DbReader(self._dbs, self._io, loop)
        self._ctx = StorageContext(
            config,
            self.clock,
            journal,
            write_path,
            self.write_cache,
            self.tail_cache,
            self.read_cache,
            self.index_cache,
            self.publish_buffer,
            self._io,
            self._dbs,
            self._logs_dir,
            self._allocate_ledger_id,
            self._counters,
            self._on_closed,
        )
        self._gc_schedule = GcSchedule(config, self.clock, gc, flusher, self._reader, self.flush, loop)

    async def close(self) -> None:
        """Close every managed ledger (appends complete, cursors are written), flush, stop threads."""
        if self._state != "started":
            return
        self._state = "closing"
        if self._write_path is not None:
            self._write_path.stopping = True  # a failed flush is left to the journal and replay
        for pending in list(self._opening.values()):
            try:
                await asyncio.shield(pending)
            except Exception:
                pass
        ledgers = list(self._open.values())
        results = await asyncio.gather(*(ml.close() for ml in ledgers), return_exceptions=True)
        for ml, result in zip(ledgers, results, strict=True):
            if isinstance(result, BaseException):
                log.error("closing managed ledger %s: %s", ml.name, result)
        assert self._loop is not None and self._io is not None and self._dbs is not None
        assert self._journal is not None and self._flusher is not None and self._write_path is not None
        assert self._gc is not None and self._gc_schedule is not None
        self._gc_schedule.stop()
        await self._write_path.drain()
        self._write_path.stop_timer()
        await self._loop.run_in_executor(self._io, self._journal.stop)
        await self._loop.run_in_executor(self._io, self._flusher.stop)
        await self._loop.run_in_executor(self._io, self._gc.stop)
        await self._loop.run_in_executor(self._io, self._dbs.close_all)
        await self._loop.run_in_executor(self._io, _layout.unlock_data_dir, self._lock_fd)
        self._io.shutdown(wait=False)  # idle by now; its threads end on their own
        self._state = "closed"

    def _allocate_ledger_id(self) -> int:
        ledger_id = self._ledger_id_next
        self._ledger_id_next += 1
        return ledger_id

    def _check_started(self) -> StorageContext:
        if self._state != "started" or self._ctx is None:
            raise StorageError(f"storage in {self._data_dir} is {self._state}")
        return self._ctx

    async def _in_io(self, fn: Callable[[StorageDb], _T]) -> _T:
        """Run a query with an I/O thread's own connection."""
        assert self._reader is not None
        return await self._reader.run(fn)

    # -- managed ledgers -----------------------------------------------------------------------

    async def open_ledger(self, name: str) -> ManagedLedger:
        """The managed ledger of that name: created if absent, read from the database if stored,
        shared if open."""
        ctx = self._check_started()
        while True:
            deleting = self._deleting.get(name)
            if deleting is not None:
                await asyncio.shield(deleting)
                continue
            ml = self._open.get(name)
            if ml is None or ml.closing_or_closed is None:
                break
            await ml.closing_or_closed  # a closing one: open a fresh one once it is closed
        if ml is not None:
            return ml
        task = self._opening.get(name)
        if task is None:
            # A task of its own, so a cancelled caller never leaves an open half done.
            assert self._loop is not None
            task = self._loop.create_task(self._open_ledger(name, ctx))
            task.add_done_callback(_retrieve_exception)
            self._opening[name] = task
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
            self._open[name] = ml
            return ml
        finally:
            del self._opening[name]

    async def open_ledger_if_exists(self, name: str) -> ManagedLedger | None:
        """The managed ledger of that name if it exists (open, or stored), else None; nothing is
        created. Asked together with other opens in one turn of the loop, the lookup shares their
        trip to the database (the broker asks for a topic and its compacted store at once)."""
        self._check_started()
        while name in self._deleting:
            await asyncio.shield(self._deleting[name])
        if name in self._open or name in self._opening or name in self._unflushed:
            return await self.open_ledger(name)
        if name in self._deleted:
            return None
        assert self._reader is not None
        if await self._reader.load(name) is None:
            return None
        return await self.open_ledger(name)

    async def ledger_exists(self, name: str) -> bool:
        """Whether a managed ledger of that name exists (open, or in the storage database)."""
        self._check_started()
        if name in self._open or name in self._unflushed:
            return True
        if name in self._deleted:
            return False
        return await self._in_io(lambda db: db.find_ml(name)) is not None

    async def ledger_names(self, after: str = "", limit: int = 1000) -> list[str]:
        """Names of managed ledgers in name order, the first `limit` after `after` (a page)."""
        self._check_started()
        stored = await self._in_io(lambda db: db.ml_names(after, limit))
        names = {n for _, n in stored} | {n for n in (*self._open, *self._unflushed) if n > after}
        return sorted(n for n in names if n not in self._deleted or n in self._open)[:limit]

    async def delete_ledger(self, name: str) -> None:
        """Close the managed ledger if open and delete it with its cursors; returns once the
        deletion is durable (the flush then finishes it, and the collector reclaims its bytes)."""
        ctx = self._check_started()
        assert self._loop is not None
        while name in self._deleting:
            await asyncio.shield(self._deleting[name])
        pending = self._opening.get(name)
        if pending is not None:
            try:
                await asyncio.shield(pending)
            except Exception:
                pass
        done: asyncio.Future[None] = self._loop.create_future()
        self._deleting[name] = done
        try:
            ml = self._open.get(name)
            if ml is not None:
                ml_id, ledger_ids = ml.ml_id, await ml.delete()
                unflushed = ml.last_generation
            elif name in self._deleted:
                return
            else:
                found = await self._in_io(lambda db: _ml_and_ledgers(db, name))
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
        finally:
            del self._deleting[name]
            done.set_result(None)

    def _on_metadata_flushed(self, metadata: list[MetaOp]) -> None:
        """The storage database now has these operations: deleted names need no shadow any more."""
        if not self._deleted:
            return
        for op in metadata:
            if op.kind == _meta_ops.ML_DELETE:
                name = self._deleted_names.pop(op.subject, None)
                if name is not None and self._deleted.get(name) is op:
                    del self._deleted[name]

    def _on_closed(self, ml: ManagedLedger) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]
            # A dict never shrinks by itself: after many topics unloaded, give its table back.
            self._open_peak = max(self._open_peak, len(self._open) + 1)
            if self._open_peak > 1024 and len(self._open) < self._open_peak // 4:
                self._open = dict(self._open)
                self._open_peak = len(self._open)

    @property
    def writable(self) -> bool:
        """Whether storage writes now: False while the last journal write or flush failed (disk
        full, out of descriptors, I/O error) and no retry has succeeded yet; it turns True again by
        itself (_write_health). The broker's disk guard reads it (its StorageHealth)."""
        return self._state == "started" and self._write_path is not None and self._write_path.health.writable

    @property
    def write_failure(self) -> StorageError | None:
        """Why storage is not writable now, if it is not."""
        return self._write_path.health.failure if self._write_path is not None else None

    @property
    def ballast_bytes(self) -> int:
        """The emergency ballast kept now (_ballast): space storage gives back when it must."""
        return self._ballast.present_bytes

    def _on_writable(self) -> None:
        """Writable again after a failure: make the ballast again if it was given back."""
        if self._io is not None and self._state == "started":
            self._io.submit(self._ballast.make)

    @property
    def open_ledgers(self) -> dict[str, ManagedLedger]:
        return dict(self._open)

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    async def flush(self) -> None:
        """Wait until every entry durable now is in the entry logs and the index (tests,
        benchmarks, shutdown)."""
        if self._write_path is not None:
            await self._write_path.drain()

    # -- garbage collection --------------------------------------------------------------------

    async def collect_garbage(self, threshold: float | None = None) -> GcResult:
        """Run a garbage collection pass now (a major one unless a threshold is given): delete
        entry logs with nothing live left, compact those whose live share is below the threshold.
        The active log is sealed first if it holds dead bytes, so its space can come back too."""
        self._check_started()
        assert self._gc_schedule is not None
        return await self._gc_schedule.collect(self.config.gc_major_threshold if threshold is None else threshold)

    def metrics(self) -> dict[str, float]:
        return storage_metrics(
            journal=self._journal,
            flusher=self._flusher,
            gc=self._gc,
            write_path=self._write_path,
            write_cache=self.write_cache,
            caches=(
                ("tail_cache", self.tail_cache),
                ("read_cache", self.read_cache),
                ("index_cache", self.index_cache),
            ),
            publish_buffer=self.publish_buffer,
            counters=self._counters,
            open_ledgers=len(self._open),
            budget=self.memory_budget,
            ballast=self._ballast,
        )


def _ml_and_ledgers(db: StorageDb, name: str) -> tuple[int, list[int]] | None:
    ml_id = db.find_ml(name)
    return None if ml_id is None else (ml_id, db.ledger_ids_of(ml_id))


def _lock(data_dir: Path) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    return _layout.lock_data_dir(data_dir)


def _retrieve_exception(task: asyncio.Task[ManagedLedger]) -> None:
    # Whoever awaited the open has the error; this keeps asyncio from warning when nobody did.
    if not task.cancelled():
        task.exception()
