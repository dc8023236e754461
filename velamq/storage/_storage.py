"""Storage: the broker's one entry point to durable logs.

It owns what all managed ledgers share: the data directory (locked against a second broker), the
storage database (entry index and metadata, _storage_db), the journal thread (group commit across
all topics), the write cache and the flusher thread (shared entry logs), the garbage collector
thread, the tail, read and index caches, the publish buffer, and a small pool of I/O threads. The
memory budget (StorageConfig.budget, ME-1) sizes all of them; `memory_budget` shows the split so
the broker can size what it owns. Managed ledgers are opened by topic name, at most one object per
name, lazily: nothing is read per topic at start, and an unopened topic costs no memory.

Start: lock the directory, migrate a format 1 directory (_migrate_v1), bring the entry logs back to
what the index committed and replay the journal (_recovery), then start the threads
(_storage_startup). Close: close every managed ledger, flush the write cache, stop the threads; a
clean close leaves nothing in the journal to replay. Managed ledgers by name, their opening and
deletion: _ledger_directory.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from velamq._clock import Clock, system_clock
from velamq._errors import StorageError
from velamq.storage import _layout
from velamq.storage._caches import ByteLRU
from velamq.storage._config import Counters, MemoryBudget, StorageConfig, cache_entry_overhead_bytes, io_threads
from velamq.storage._position import Position
from velamq.storage._storage_metrics import storage_metrics
from velamq.storage.formats._entry_log import Run
from velamq.storage.gc._collector import GcResult
from velamq.storage.ledger._context import StorageContext
from velamq.storage.ledger._directory import LedgerDirectory
from velamq.storage.ledger._managed_ledger import ManagedLedger
from velamq.storage.ledger._read_path import run_size
from velamq.storage.offload._codec import EntryRows
from velamq.storage.offload._status import OffloadStatus, PolicySource
from velamq.storage.startup._ballast import Ballast, ballast_size
from velamq.storage.startup._recovery import JournalRecovery
from velamq.storage.startup._threads import (
    Recovered,
    SharedMemory,
    StoragePaths,
    StorageThreads,
    lock,
    recover,
)
from velamq.storage.write._publish_buffer import PublishBuffer
from velamq.storage.write._write_cache import WriteCache

if TYPE_CHECKING:
    from velamq.storage.offload._service import OffloadService

log = logging.getLogger("velamq.storage")


def _entry_size(data: bytes) -> int:
    return len(data) + cache_entry_overhead_bytes


@dataclass(frozen=True, slots=True)
class SharedCaches:
    """The memory a Storage's managed ledgers share: the publish buffer and the tail, read and index
    caches, sized by the memory budget. A Storage makes its own; ShardedStorage gives one set to all
    its shards, whose ledger ids it keeps apart (`ledger_id_base`), so positions stay unique keys."""

    publish_buffer: PublishBuffer
    tail_cache: ByteLRU[Position, bytes]
    read_cache: ByteLRU[Position, bytes]
    index_cache: ByteLRU[tuple[int, int], Run]

    @classmethod
    def for_budget(cls, budget: MemoryBudget) -> SharedCaches:
        return cls(
            PublishBuffer(budget.publish_buffer_bytes),
            ByteLRU("tail", budget.tail_cache_bytes, _entry_size),
            ByteLRU("read", budget.read_cache_bytes, _entry_size),
            ByteLRU("index", budget.index_cache_bytes, run_size),
        )


class Storage:
    """The broker's one entry point to durable logs: one per data directory, used from one event
    loop. `start` locks the directory and recovers; `open_ledger` hands out managed ledgers by topic
    name (read from the storage database on first use, at most one object per name);
    `delete_ledger` removes one with its cursors; `collect_garbage` returns the space of deleted
    entries; `close` closes everything, flushes and stops the storage threads."""

    def __init__(
        self,
        config: StorageConfig,
        clock: Clock = system_clock,
        entry_rows: EntryRows | None = None,
        *,
        shared: SharedCaches | None = None,
        ledger_id_base: int = 1,
    ) -> None:
        """`shared` and `ledger_id_base` are for ShardedStorage (several Storages sharing one
        budget): caches made elsewhere, and the lowest ledger id this data directory may hand out."""
        self.config = config
        self._entry_rows = entry_rows  # what makes offloaded rows of entries (docs/offload.md)
        self.clock = clock
        self._data_dir = Path(config.data_dir)
        self._paths = StoragePaths(self._data_dir)
        budget = config.budget
        self.memory_budget: MemoryBudget = budget
        shared = shared if shared is not None else SharedCaches.for_budget(budget)
        self.publish_buffer = shared.publish_buffer
        self.tail_cache: ByteLRU[Position, bytes] = shared.tail_cache
        self.read_cache: ByteLRU[Position, bytes] = shared.read_cache
        self.index_cache: ByteLRU[tuple[int, int], Run] = shared.index_cache
        self._ledger_id_base = ledger_id_base
        self.write_cache = WriteCache(budget.write_cache_bytes, clock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._io: ThreadPoolExecutor | None = None
        self._threads: StorageThreads | None = None
        self._ctx: StorageContext | None = None
        self._lock_fd = -1
        self._ledger_id_next = 1
        self._ledgers = LedgerDirectory(self._check_started)
        self._counters = Counters()
        self._ballast = Ballast(
            self._data_dir, ballast_size(config.ballast_bytes, budget.write_cache_bytes, self._data_dir)
        )
        self.recovery: JournalRecovery | None = None
        self._offload: OffloadService | None = None
        self._offload_policies: PolicySource | None = None
        self._state = "new"

    async def start(self) -> None:
        if self._state != "new":
            raise StorageError(f"storage in {self._data_dir} is {self._state}, cannot start")
        loop = asyncio.get_running_loop()
        self._loop = loop
        io = self._io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="velamq-storage-io")
        try:
            self._lock_fd = await loop.run_in_executor(io, lock, self._data_dir, self.config.lock_wait_s)
            try:
                recovered = await loop.run_in_executor(io, recover, self.config, self._paths, self._ballast, self.clock)
            except BaseException:
                await loop.run_in_executor(io, _layout.unlock_data_dir, self._lock_fd)
                raise
        except BaseException:
            io.shutdown(wait=False)
            raise
        self._offload = self._offload_service()
        self._start_threads(loop, io, recovered)
        self._state = "started"
        if self._offload is not None:
            self._offload.start()
            log.info("offloading sealed ledgers to %s", self._offload.where)
        log.info(
            "storage started in %s (sync_policy=%s, memory budget %d MiB)",
            self._data_dir,
            self.config.sync_policy,
            self.memory_budget.total_bytes >> 20,
        )

    def _start_threads(self, loop: asyncio.AbstractEventLoop, io: ThreadPoolExecutor, recovered: Recovered) -> None:
        self.recovery = recovered.recovery
        self._ledger_id_next = max(recovered.ledger_id_next, self._ledger_id_base)
        memory = SharedMemory(self.write_cache, self.tail_cache, self.publish_buffer, self._counters)
        threads = self._threads = StorageThreads.start(
            self.config,
            self.clock,
            self._paths,
            recovered,
            memory,
            loop=loop,
            io=io,
            on_metadata_flushed=self._ledgers.on_metadata_flushed,
            on_writable=self._on_writable,
        )
        self._ctx = StorageContext(
            self.config,
            self.clock,
            threads.journal,
            threads.write_path,
            self.write_cache,
            self.tail_cache,
            self.read_cache,
            self.index_cache,
            self.publish_buffer,
            io,
            threads.dbs,
            self._paths.logs_dir,
            self._allocate_ledger_id,
            self._counters,
            self._ledgers.on_closed,
            self._offload.reader if self._offload is not None else None,
        )
        self._ledgers.start(loop, threads.reader, recovered.ml_id_next)

    async def close(self) -> None:
        """Close every managed ledger (appends complete, cursors are written), flush, stop threads."""
        if self._state != "started":
            return
        self._state = "closing"
        threads = self._threads
        assert self._loop is not None and self._io is not None and threads is not None
        threads.write_path.stopping = True  # a failed flush is left to the journal and replay
        if self._offload is not None:
            await self._offload.close()
        await self._ledgers.wait_opening()
        ledgers = list(self._ledgers.open.values())
        results = await asyncio.gather(*(ml.close() for ml in ledgers), return_exceptions=True)
        for ml, result in zip(ledgers, results, strict=True):
            if isinstance(result, BaseException):
                log.error("closing managed ledger %s: %s", ml.name, result)
        await threads.stop(self._loop, self._io)
        await self._loop.run_in_executor(self._io, _layout.unlock_data_dir, self._lock_fd)
        self._io.shutdown(wait=False)  # idle by now; its threads end on their own
        self._state = "closed"

    @property
    def ledger_id_base(self) -> int:
        """The lowest ledger id this Storage hands out (1, or a shard's base: _shard_layout)."""
        return self._ledger_id_base

    def _allocate_ledger_id(self) -> int:
        ledger_id = self._ledger_id_next
        self._ledger_id_next += 1
        return ledger_id

    def _check_started(self) -> StorageContext:
        if self._state != "started" or self._ctx is None:
            raise StorageError(f"storage in {self._data_dir} is {self._state}")
        return self._ctx

    # -- managed ledgers (_ledger_directory) ---------------------------------------------------

    async def open_ledger(self, name: str) -> ManagedLedger:
        """The managed ledger of that name: created if absent, read from the database if stored,
        shared if open."""
        return await self._ledgers.open_ledger(name)

    async def open_ledger_if_exists(self, name: str) -> ManagedLedger | None:
        """The managed ledger of that name if it exists (open, or stored), else None; nothing is
        created. Asked together with other opens in one turn of the loop, the lookup shares their
        trip to the database (the broker asks for a topic and its compacted store at once)."""
        return await self._ledgers.open_ledger_if_exists(name)

    async def ledger_exists(self, name: str) -> bool:
        """Whether a managed ledger of that name exists (open, or in the storage database)."""
        return await self._ledgers.ledger_exists(name)

    async def ledger_names(self, after: str = "", limit: int = 1000) -> list[str]:
        """Names of managed ledgers in name order, the first `limit` after `after` (a page)."""
        return await self._ledgers.ledger_names(after, limit)

    async def delete_ledger(self, name: str) -> None:
        """Close the managed ledger if open and delete it with its cursors; returns once the
        deletion is durable (the flush then finishes it, and the collector reclaims its bytes)."""
        await self._ledgers.delete_ledger(name)
        if self._offload is not None:
            self._offload.reader.topic_deleted(name)

    @property
    def open_ledgers(self) -> dict[str, ManagedLedger]:
        return dict(self._ledgers.open)

    # -- tiered storage (velamq/storage/offload) -------------------------------------------------

    def _offload_service(self) -> OffloadService | None:
        config = self.config.offload
        if config is None:
            return None
        try:
            from velamq.storage.offload._service import OffloadService
        except ImportError as exc:
            raise StorageError(
                f"offloading is configured (managedLedgerOffloadDriver={config.driver}) but pyarrow cannot be "
                f"imported ({exc}): install it (pip install 'velamq[offload]') or leave the driver unset"
            ) from None
        if self._entry_rows is None:
            raise StorageError("offloading is configured, but this Storage was given no EntryRows (entries as rows)")
        return OffloadService(config, self._data_dir, self.clock, self._entry_rows, self._ledgers,
                              self._offload_policies)

    def set_offload_policies(self, policies: PolicySource) -> None:
        """Where each topic's offload policy comes from (the broker: namespace policies over its
        own settings), asked at every check; without it the broker-wide settings apply to all."""
        self._offload_policies = policies
        if self._offload is not None:
            self._offload.offloader.policies = policies

    @property
    def offload_enabled(self) -> bool:
        return self._offload is not None

    def request_offload(self, ml: ManagedLedger, up_to: Position) -> bool:
        """Offload, in the background, the sealed ledgers of ml before up_to (the admin's offload).
        False if an offload of that topic is running already."""
        if self._offload is None:
            raise StorageError("offloading is not configured (managedLedgerOffloadDriver is not set)")
        return self._offload.request(ml, up_to)

    def offload_status(self, name: str) -> OffloadStatus:
        return self._offload.status(name) if self._offload is not None else OffloadStatus()

    async def check_offload(self) -> None:
        """One offload check now (the thresholds and the deletion lag of every topic, open or
        not), as the periodic one does."""
        if self._offload is not None:
            await self._offload.offloader.check()

    # -- write health --------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        """Whether storage writes now: False while the last journal write or flush failed (disk
        full, out of descriptors, I/O error) and no retry has succeeded yet; it turns True again by
        itself (_write_health). The broker's disk guard reads it (its StorageHealth)."""
        return self._state == "started" and self._threads is not None and self._threads.write_path.health.writable

    @property
    def write_failure(self) -> StorageError | None:
        """Why storage is not writable now, if it is not."""
        return self._threads.write_path.health.failure if self._threads is not None else None

    @property
    def ballast_bytes(self) -> int:
        """The emergency ballast kept now (_ballast): space storage gives back when it must."""
        return self._ballast.present_bytes

    def _on_writable(self) -> None:
        """Writable again after a failure: make the ballast again if it was given back."""
        if self._io is not None and self._state == "started":
            self._io.submit(self._ballast.make)

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    async def flush(self) -> None:
        """Wait until every entry durable now is in the entry logs and the index (tests,
        benchmarks, shutdown)."""
        if self._threads is not None:
            await self._threads.write_path.drain()

    # -- garbage collection --------------------------------------------------------------------

    async def collect_garbage(self, threshold: float | None = None) -> GcResult:
        """Run a garbage collection pass now (a major one unless a threshold is given): delete
        entry logs with nothing live left, compact those whose live share is below the threshold.
        The active log is sealed first if it holds dead bytes, so its space can come back too."""
        self._check_started()
        assert self._threads is not None
        return await self._threads.gc_schedule.collect(
            self.config.gc_major_threshold if threshold is None else threshold
        )

    def metrics(self) -> dict[str, float]:
        threads = self._threads
        return storage_metrics(
            journal=threads.journal if threads else None,
            flusher=threads.flusher if threads else None,
            gc=threads.gc if threads else None,
            write_path=threads.write_path if threads else None,
            write_cache=self.write_cache,
            caches=(
                ("tail_cache", self.tail_cache),
                ("read_cache", self.read_cache),
                ("index_cache", self.index_cache),
            ),
            publish_buffer=self.publish_buffer,
            counters=self._counters,
            open_ledgers=len(self._ledgers.open),
            budget=self.memory_budget,
            ballast=self._ballast,
        ) | (self._offload.metrics() if self._offload is not None else {})
