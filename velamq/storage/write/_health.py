"""Whether storage writes now, and how it comes back by itself after a failed write.

A write can fail for reasons that pass: the disk is full (ENOSPC, EDQUOT), the process or the
system is out of file descriptors (EMFILE, ENFILE), an I/O error. None of them latches storage as
failed any more (docs/storage.md, "When a write fails"):

- the journal fails the group that could not be written (its appends get the error: no receipt for
  what is not durable), cuts the segment back to where the group began, fences the ledgers that
  lost entries (their managed ledgers go on in a new ledger) and writes the next group normally;
- a flush that fails keeps its write cache half (still readable, still in the journal) and is
  tried again; appends meanwhile wait in the write cache and the publish buffer (backpressure);
- while the last write failed and nothing succeeded since, `writable` is False: the broker's disk
  guard (velamq.broker.guards._disk.StorageHealth) keeps producers out.

This object keeps that state and runs the retries: on the first failure a task on the loop wakes
after a back-off (0.1 s doubling to 5 s, by the injected clock) and asks the journal for a write
probe (a small file written, synced and removed, after the journal cut its segment back) and the
write path to try its flush again, until both succeed. One per Storage, on its event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq._log_limit import RateLimitedLog
from velamq.storage._write_errors import failure_kind

log = logging.getLogger("velamq.storage")

retry_first_s = 0.1
retry_max_s = 5.0


class WriteHealth:
    """Storage's write health on the loop: `writable`, the failures by kind, and the retry task
    that probes the journal and retries a failed flush with a bounded back-off until both work."""

    def __init__(
        self,
        clock: Clock,
        probe_journal: Callable[[], Awaitable[StorageError | None]],
        retry_flush: Callable[[], None],
    ) -> None:
        self._clock = clock
        self._probe_journal = probe_journal
        self._retry_flush = retry_flush
        self._log = RateLimitedLog(log, clock)
        self.journal_error: StorageError | None = None
        self.flush_error: StorageError | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.on_writable: Callable[[], None] | None = None  # told when writable again after a failure
        self.failures_total = 0
        self.failures_no_space_total = 0
        self.failures_no_descriptors_total = 0
        self.retries_total = 0
        self.recoveries_total = 0
        self.not_writable_since_s: float | None = None

    @property
    def writable(self) -> bool:
        return self.journal_error is None and self.flush_error is None

    @property
    def failure(self) -> StorageError | None:
        return self.journal_error or self.flush_error

    def journal_failed(self, error: StorageError) -> None:
        self._failed(error)
        self.journal_error = error

    def flush_failed(self, error: StorageError) -> None:
        self._failed(error)
        self.flush_error = error

    def journal_ok(self) -> None:
        if self.journal_error is not None:
            self.journal_error = None
            self._maybe_recovered()

    def flush_ok(self) -> None:
        if self.flush_error is not None:
            self.flush_error = None
            self._maybe_recovered()

    def _failed(self, error: StorageError) -> None:
        self.failures_total += 1
        kind = failure_kind(error)
        if kind == "no_space":
            self.failures_no_space_total += 1
        elif kind == "no_descriptors":
            self.failures_no_descriptors_total += 1
        if self.writable:
            self.not_writable_since_s = self._clock.monotonic_s()
        self._log.error(f"write-failed-{kind}", "storage not writable, retrying with back-off: %s", error)
        if not self._stopped and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._retry())

    def _maybe_recovered(self) -> None:
        if self.writable:
            self.recoveries_total += 1
            self.not_writable_since_s = None
            log.warning("storage writable again")
            if self.on_writable is not None:
                self.on_writable()

    async def _retry(self) -> None:
        delay = retry_first_s
        while not self.writable:
            await self._clock.sleep(delay)
            delay = min(delay * 2, retry_max_s)
            self.retries_total += 1
            if self.journal_error is not None:
                error = await self._probe_journal()
                if error is None:
                    self.journal_ok()
            if self.flush_error is not None:
                self._retry_flush()

    def stop(self) -> None:
        self._stopped = True  # storage is closing: no more retries (the journal keeps what is left)
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def metrics(self, prefix: str) -> dict[str, float]:
        since = self.not_writable_since_s
        return {
            prefix + "writable": 1 if self.writable else 0,
            prefix + "not_writable_seconds": self._clock.monotonic_s() - since if since is not None else 0.0,
            prefix + "write_failures_total": self.failures_total,
            prefix + "write_failures_no_space_total": self.failures_no_space_total,
            prefix + "write_failures_no_descriptors_total": self.failures_no_descriptors_total,
            prefix + "write_retries_total": self.retries_total,
            prefix + "write_recoveries_total": self.recoveries_total,
        }
