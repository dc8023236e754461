"""Storage: the broker's one entry point to durable logs.

It owns what all managed ledgers share: the data directory (locked against a second broker), the
ledger id counter, the writer thread (group commit across all topics) and the small pool of I/O
threads. Managed ledgers are opened by topic name, at most one object per name.

Ledger ids come from one counter for the whole data directory, so they increase across topics and
are never reused, even after a topic is deleted and created again: a client holding an old message
id can never confuse it with a new entry. The counter is persisted by the writer before the first
file of each new ledger is created; on start the highest id on disk guards it as well.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from velamq._errors import StorageError
from velamq.storage import _layout
from velamq.storage._config import Counters, StorageConfig, io_threads
from velamq.storage._managed_ledger import ManagedLedger, StorageContext
from velamq.storage._writer import Writer

log = logging.getLogger("velamq.storage")


class Storage:
    def __init__(self, config: StorageConfig) -> None:
        self.config = config
        self._data_dir = Path(config.data_dir)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._io: ThreadPoolExecutor | None = None
        self._writer: Writer | None = None
        self._ctx: StorageContext | None = None
        self._lock_fd = -1
        self._ledger_id_next = 1
        self._dirs: dict[str, Path] = {}  # every managed ledger on disk, by name
        self._open: dict[str, ManagedLedger] = {}
        self._opening: dict[str, asyncio.Task[ManagedLedger]] = {}
        self._counters = Counters()
        self._state = "new"

    async def start(self) -> None:
        if self._state != "new":
            raise StorageError(f"storage in {self._data_dir} is {self._state}, cannot start")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="velamq-storage-io")
        try:
            self._lock_fd, self._dirs, self._ledger_id_next = await loop.run_in_executor(
                self._io, _start_blocking, self._data_dir
            )
        except BaseException:
            self._io.shutdown(wait=False)
            raise
        self._writer = Writer(self._data_dir, loop, sync=self.config.sync)
        self._writer.start()
        self._ctx = StorageContext(
            self.config, self._writer, self._io, self._allocate_ledger_id, self._counters, self._on_closed
        )
        self._state = "started"
        log.info("storage started in %s (sync_policy=%s)", self._data_dir, self.config.sync_policy)

    async def close(self) -> None:
        """Close every managed ledger (their appends complete, cursors are written), then the threads."""
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
        assert self._loop is not None and self._io is not None and self._writer is not None
        await self._loop.run_in_executor(self._io, self._writer.stop)
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
        ml = self._open.get(name)
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
        pending = self._opening.get(name)
        if pending is not None:
            try:
                await asyncio.shield(pending)
            except Exception:
                pass
        directory = self._dirs.pop(name, None)
        ml = self._open.get(name)
        if ml is not None:
            await ml.remove_files()
        elif directory is not None:
            assert self._loop is not None
            await self._loop.run_in_executor(ctx.io, _layout.remove_tree, directory, ctx.config.sync)

    def _on_closed(self, ml: ManagedLedger) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]

    def ledger_names_on_disk(self) -> list[str]:
        return sorted(self._dirs)

    @property
    def open_ledgers(self) -> dict[str, ManagedLedger]:
        return dict(self._open)

    def metrics(self) -> dict[str, float]:
        writer = self._writer
        counters = self._counters
        out: dict[str, float] = {
            "velamq_storage_appends_total": writer.appends_total if writer else 0,
            "velamq_storage_fsyncs_total": writer.fsyncs_total if writer else 0,
            "velamq_storage_fsync_seconds_total": writer.fsync_seconds_total if writer else 0.0,
            "velamq_storage_bytes_written_total": writer.bytes_written_total if writer else 0,
            "velamq_storage_group_commits_total": writer.group_commits_total if writer else 0,
            "velamq_storage_entries_per_fsync": writer.entries_per_fsync if writer else 0.0,
            "velamq_storage_open_ledgers": len(self._open),
            "velamq_storage_pending_appends": sum(ml.pending_appends for ml in self._open.values()),
            "velamq_storage_ledgers_rolled_total": counters.ledgers_rolled_total,
            "velamq_storage_read_entries_cache_total": counters.read_entries_cache_total,
            "velamq_storage_read_entries_disk_total": counters.read_entries_disk_total,
            "velamq_storage_cursor_persists_total": counters.cursor_persists_total,
            "velamq_storage_torn_tails_truncated_total": counters.torn_tails_truncated_total,
        }
        return {k: float(v) for k, v in out.items()}


def _start_blocking(data_dir: Path) -> tuple[int, dict[str, Path], int]:
    data_dir.mkdir(parents=True, exist_ok=True)
    lock_fd = _layout.lock_data_dir(data_dir)
    try:
        dirs, ledger_id_max = _layout.scan_ledger_dirs(data_dir)
        ledger_id_next = max(_layout.read_ledger_id_next(data_dir), ledger_id_max + 1)
    except BaseException:
        _layout.unlock_data_dir(lock_fd)
        raise
    return lock_fd, dirs, ledger_id_next


def _retrieve_exception(task: asyncio.Task[ManagedLedger]) -> None:
    # Whoever awaited the open has the error; this keeps asyncio from warning when nobody did.
    if not task.cancelled():
        task.exception()
