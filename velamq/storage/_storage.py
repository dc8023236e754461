"""Storage: the broker's one entry point to durable logs.

It owns what all managed ledgers share: the data directory (locked against a second broker), the
ledger id counter, the journal thread (group commit across all topics), the write cache and the
flusher thread, the tail, read and index caches, the publish buffer, and a small pool of I/O
threads. The memory budget (StorageConfig.budget, ME-1) sizes all of them; `memory_budget` shows
the split so the broker can size what it owns. Managed ledgers are opened by topic name, at most
one object per name.

Start: lock the directory, replay the journal into the ledger files (_recovery), then start the
journal and flusher threads. Close: close every managed ledger, flush the write cache, stop the
threads; a clean close leaves nothing in the journal to replay.

Ledger ids come from one counter for the whole data directory, so they increase across topics and
are never reused, even after a topic is deleted and created again: a client holding an old message
id can never confuse it with a new entry, and the caches can key entries by position alone. The
counter is persisted by the journal thread before the file of each new ledger is created; on start
the highest id on disk guards it as well.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from velamq._clock import Clock, system_clock
from velamq._errors import StorageError
from velamq.storage import _layout
from velamq.storage._caches import ByteLRU
from velamq.storage._config import (
    Counters,
    MemoryBudget,
    StorageConfig,
    cache_entry_overhead_bytes,
    io_threads,
)
from velamq.storage._flusher import DeleteJob, Flusher
from velamq.storage._journal import Journal
from velamq.storage._journal_file import JOURNAL_DIR
from velamq.storage._managed_ledger import ManagedLedger, StorageContext
from velamq.storage._position import Position
from velamq.storage._publish_buffer import PublishBuffer
from velamq.storage._read_path import Offsets, offsets_size
from velamq.storage._recovery import JournalRecovery, recover_journal
from velamq.storage._storage_metrics import storage_metrics
from velamq.storage._write_cache import WriteCache
from velamq.storage._write_path import WritePath

log = logging.getLogger("velamq.storage")


def _entry_size(data: bytes) -> int:
    return len(data) + cache_entry_overhead_bytes


class Storage:
    """The broker's one entry point to durable logs: one per data directory, used from one event
    loop. `start` locks the directory and replays the journal; `open_ledger` hands out managed
    ledgers by topic name (recovered from disk on first use, at most one object per name);
    `delete_ledger` removes one with its cursors; `close` closes them all, flushes and stops the
    storage threads. It owns what the managed ledgers share: the journal, the write cache and its
    flusher, the caches, the publish buffer and the ledger id counter."""

    def __init__(self, config: StorageConfig, clock: Clock = system_clock) -> None:
        self.config = config
        self.clock = clock
        self._data_dir = Path(config.data_dir)
        self._journal_dir = self._data_dir / JOURNAL_DIR
        budget = config.budget
        self.memory_budget: MemoryBudget = budget
        self.publish_buffer = PublishBuffer(budget.publish_buffer_bytes)
        self.tail_cache: ByteLRU[Position, bytes] = ByteLRU("tail", budget.tail_cache_bytes, _entry_size)
        self.read_cache: ByteLRU[Position, bytes] = ByteLRU("read", budget.read_cache_bytes, _entry_size)
        self.index_cache: ByteLRU[int, Offsets] = ByteLRU("index", budget.index_cache_bytes, offsets_size)
        self.write_cache = WriteCache(budget.write_cache_bytes, clock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._io: ThreadPoolExecutor | None = None
        self._journal: Journal | None = None
        self._flusher: Flusher | None = None
        self._write_path: WritePath | None = None
        self._ctx: StorageContext | None = None
        self._lock_fd = -1
        self._ledger_id_next = 1
        self._dirs: dict[str, Path] = {}  # every managed ledger on disk, by name
        self._open: dict[str, ManagedLedger] = {}
        self._opening: dict[str, asyncio.Task[ManagedLedger]] = {}
        self._deleting: dict[str, asyncio.Future[None]] = {}
        self._counters = Counters()
        self.recovery: JournalRecovery | None = None
        self._state = "new"

    async def start(self) -> None:
        if self._state != "new":
            raise StorageError(f"storage in {self._data_dir} is {self._state}, cannot start")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="velamq-storage-io")
        write_path = WritePath(
            self.config, loop, self.write_cache, self.tail_cache, self.publish_buffer, self._counters, self.clock
        )
        journal: Journal | None = None
        try:
            self._lock_fd = await loop.run_in_executor(self._io, _lock, self._data_dir)
            try:
                self.recovery = await loop.run_in_executor(
                    self._io,
                    functools.partial(
                        recover_journal,
                        self._data_dir,
                        self._journal_dir,
                        sync=self.config.sync,
                        now_ms=self.clock.now_ms(),
                    ),
                )
                self._counters.torn_tails_truncated_total += self.recovery.torn_tails
                self._dirs = self.recovery.dirs
                counter = await loop.run_in_executor(self._io, _layout.read_ledger_id_next, self._data_dir)
                self._ledger_id_next = max(counter, self.recovery.ledger_id_max + 1)
                journal = Journal(
                    self._data_dir,
                    self._journal_dir,
                    self.recovery.next_seq,
                    policy=self.config.sync_policy,
                    sync_interval_ms=self.config.sync_interval_ms,
                    segment_bytes=self.config.journal_segment_bytes,
                    deliver=write_path.on_group,
                    loop=loop,
                    clock=self.clock,
                )
                await loop.run_in_executor(self._io, journal.open)
            except BaseException:
                await loop.run_in_executor(self._io, _layout.unlock_data_dir, self._lock_fd)
                raise
        except BaseException:
            self._io.shutdown(wait=False)
            raise
        flusher = Flusher(self._journal_dir, sync=self.config.sync, on_flushed=write_path.on_flushed, loop=loop)
        journal.start()
        flusher.start()
        write_path.start(journal, flusher)
        self._journal, self._flusher, self._write_path = journal, flusher, write_path
        self._ctx = StorageContext(
            self.config,
            self.clock,
            journal,
            flusher,
            write_path,
            self.write_cache,
            self.tail_cache,
            self.read_cache,
            self.index_cache,
            self.publish_buffer,
            self._io,
            self._allocate_ledger_id,
            self._counters,
            self._on_closed,
        )
        self._state = "started"
        log.info(
            "storage started in %s (sync_policy=%s, memory budget %d MiB)",
            self._data_dir,
            self.config.sync_policy,
            self.memory_budget.total_bytes >> 20,
        )

    async def close(self) -> None:
        """Close every managed ledger (appends complete, cursors are written), flush, stop threads."""
        if self._state != "started":
            return
        self._state = "closing"
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
        assert self._loop is not None and self._io is not None
        assert self._journal is not None and self._flusher is not None and self._write_path is not None
        await self._write_path.drain()
        self._write_path.stop_timer()
        await self._loop.run_in_executor(self._io, self._journal.stop)
        await self._loop.run_in_executor(self._io, self._flusher.stop)
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

    # -- managed ledgers -----------------------------------------------------------------------

    async def open_ledger(self, name: str) -> ManagedLedger:
        """The managed ledger of that name: created if absent, recovered if on disk, shared if open."""
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
            # A task of its own, so a cancelled caller never leaves a recovery half done.
            assert self._loop is not None
            task = self._loop.create_task(self._open_ledger(name, ctx))
            task.add_done_callback(_retrieve_exception)
            self._opening[name] = task
        return await asyncio.shield(task)

    async def _open_ledger(self, name: str, ctx: StorageContext) -> ManagedLedger:
        assert self._loop is not None
        try:
            directory = self._dirs.get(name)
            if directory is None:
                directory = await self._loop.run_in_executor(
                    ctx.io, functools.partial(_layout.create_ledger_dir, self._data_dir, name, sync=ctx.config.sync)
                )
                self._dirs[name] = directory
            ml = await ManagedLedger.open(name, directory, ctx)
            self._open[name] = ml
            return ml
        finally:
            del self._opening[name]

    async def delete_ledger(self, name: str) -> None:
        """Close the managed ledger if open and remove all its files, cursors included."""
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
            directory = self._dirs.pop(name, None)
            ml = self._open.get(name)
            if ml is not None:
                await ml.remove_files()
            elif directory is not None:
                deleted: asyncio.Future[None] = self._loop.create_future()
                ctx.flusher.submit(DeleteJob([], [], [directory], ctx.write_cache.active.generation, deleted))
                await deleted
        finally:
            del self._deleting[name]
            done.set_result(None)

    def _on_closed(self, ml: ManagedLedger) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]

    def has_ledger(self, name: str) -> bool:
        """Whether a managed ledger of that name exists (open or on disk); no I/O."""
        return name in self._dirs or name in self._open

    def ledger_names_on_disk(self) -> list[str]:
        return sorted(self._dirs)

    @property
    def open_ledgers(self) -> dict[str, ManagedLedger]:
        return dict(self._open)

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    async def flush(self) -> None:
        """Wait until every entry durable now is in its ledger file (tests, benchmarks, shutdown)."""
        if self._write_path is not None:
            await self._write_path.drain()

    def metrics(self) -> dict[str, float]:
        return storage_metrics(
            journal=self._journal,
            flusher=self._flusher,
            write_path=self._write_path,
            write_cache=self.write_cache,
            caches=(
                ("tail_cache", self.tail_cache),
                ("read_cache", self.read_cache),
                ("index_cache", self.index_cache),
            ),
            publish_buffer=self.publish_buffer,
            counters=self._counters,
            open_ledgers=self._open.values(),
            budget=self.memory_budget,
        )


def _lock(data_dir: Path) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    return _layout.lock_data_dir(data_dir)


def _retrieve_exception(task: asyncio.Task[ManagedLedger]) -> None:
    # Whoever awaited the open has the error; this keeps asyncio from warning when nobody did.
    if not task.cancelled():
        task.exception()
