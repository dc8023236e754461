"""When the garbage collector runs: the loop side of _gc.

A task sleeps gc_interval_s at a time by the injected clock and then submits a pass to the
collector's thread: a plain pass (delete empty logs), or, when their turn has come, a minor
(gc_minor_threshold, every gc_minor_interval_s) or major (gc_major_threshold, every
gc_major_interval_s) compaction, BookKeeper's defaults. `collect` runs a pass now.

The active entry log is never compacted. Before a compacting pass, if the active log's live share
is under the pass's threshold (and, for scheduled passes, it holds at least 1/16 of
entry_log_bytes_max), the flusher is asked to seal it, so the space of topics deleted soon after
they were written comes back too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq.storage._config import StorageConfig
from velamq.storage._write_errors import failure_kind
from velamq.storage.gc._collector import GarbageCollector, GcJob, GcResult
from velamq.storage.index._db_reader import DbReader
from velamq.storage.write._flusher import Flusher, SealJob

log = logging.getLogger("velamq.storage")


class GcSchedule:
    """The collector's timer and the way to ask for a pass (Storage.collect_garbage)."""

    def __init__(
        self,
        config: StorageConfig,
        clock: Clock,
        gc: GarbageCollector,
        flusher: Flusher,
        reader: DbReader,
        flush: Callable[[], Awaitable[None]],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._config = config
        self._clock = clock
        self._gc = gc
        self._flusher = flusher
        self._reader = reader
        self._flush = flush
        self._loop = loop
        self._task = loop.create_task(self._timer())

    def stop(self) -> None:
        self._task.cancel()

    async def collect(self, threshold: float) -> GcResult:
        """A pass now: delete empty logs, compact those whose live share is below threshold."""
        await self._flush()  # deletions still in the write cache reach the index first
        await self._seal_active_if_sparse(threshold, 0)
        return await self._pass(threshold)

    async def _pass(self, threshold: float) -> GcResult:
        future: asyncio.Future[GcResult] = self._loop.create_future()
        self._gc.submit(GcJob(threshold, future))
        return await future

    async def _seal_active_if_sparse(self, threshold: float, bytes_min: int) -> None:
        for row in await self._reader.run(lambda db: db.logs()):
            if not row.sealed and row.total_bytes >= bytes_min and row.live_bytes < threshold * row.total_bytes:
                future: asyncio.Future[None] = self._loop.create_future()
                self._flusher.submit(SealJob(future))
                await future

    async def _timer(self) -> None:
        config = self._config
        clock = self._clock
        last_minor = last_major = clock.monotonic_s()
        while True:
            await clock.sleep(config.gc_interval_s)
            now = clock.monotonic_s()
            threshold = 0.0
            if now - last_major >= config.gc_major_interval_s:
                threshold, last_major, last_minor = config.gc_major_threshold, now, now
            elif now - last_minor >= config.gc_minor_interval_s:
                threshold, last_minor = config.gc_minor_threshold, now
            try:
                if threshold:
                    await self._seal_active_if_sparse(threshold, config.entry_log_bytes_max // 16)
                await self._pass(threshold)
            except StorageError as exc:
                if failure_kind(exc) != "no_space":  # a full disk: the collector's thread said so
                    log.error("storage garbage collection: %s", exc)
