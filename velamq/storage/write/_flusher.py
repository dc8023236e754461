"""The flusher thread: write cache halves into the entry logs and the index, then trim the journal.

One flush, for one frozen half of the write cache (_write_cache): _log_writer writes the entries
to the shared entry logs and fsyncs them, then commits the half's metadata operations, index rows
and the new checkpoint in one transaction ("logs-written", "logs-synced", "index-committed"); then
the journal segments wholly before the checkpoint are deleted ("journal-trimmed"). The names in
parentheses are the steps a test hook (`step_hook`) is called after, to stop the world there.

A crash anywhere in it is safe: until the transaction commits, replay starts before every entry and
operation of this half, and the bytes written to the logs are past the length the database has for
them (recovery cuts them off); segments are deleted only once the checkpoint that skips them is
committed.

Jobs run in order from one queue: flushes, and the garbage collector's request to seal the active
log. With sync policy "none" nothing is fsynced. A flush that fails (disk full, I/O error) is
reported to the loop, which keeps the half and submits it again after a back-off (_write_health):
the journal still holds what the flush lacked, and the log writer put itself back as it was.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from velamq._errors import StorageError
from velamq._log_limit import RateLimitedLog
from velamq.storage import _layout
from velamq.storage._write_errors import storage_error
from velamq.storage.formats._journal_file import list_segments, segment_name
from velamq.storage.write._log_writer import FlushStats, LogWriter
from velamq.storage.write._write_cache import WriteBuffer

log = logging.getLogger("velamq.storage")


@dataclass(eq=False, slots=True)
class FlushJob:
    buffer: WriteBuffer


@dataclass(eq=False, slots=True)
class SealJob:
    """Seal the active entry log, so the garbage collector may compact it."""

    future: asyncio.Future[None]


@dataclass(slots=True)
class FlushResult:
    buffer: WriteBuffer
    error: StorageError | None = None
    stats: FlushStats | None = None


class Flusher:
    """The flusher thread: takes frozen write cache halves (and seal requests), in order, from one
    queue; each half goes through the log writer (entry logs, fsync, one index transaction with the
    checkpoint), then the journal is trimmed, and the loop is told."""

    def __init__(
        self,
        writer: LogWriter,
        journal_dir: Path,
        *,
        sync: bool,
        on_flushed: Callable[[FlushResult], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.writer = writer
        self._journal_dir = journal_dir
        self._sync = sync
        self._on_flushed = on_flushed
        self._loop = loop
        self._queue: queue.SimpleQueue[FlushJob | SealJob | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="velamq-storage-flusher", daemon=True)
        # Counters (written here only).
        self.flushes_total = 0
        self.flush_seconds_total = 0.0
        self.flush_bytes_total = 0
        self.flush_entries_total = 0
        self.flush_runs_total = 0
        self.flush_logs_total = 0
        self.fsyncs_total = 0
        self.checkpoints_total = 0
        self.journal_segments_deleted_total = 0
        self.failures_total = 0
        self.trim_failures_total = 0
        self._log = RateLimitedLog(log)  # this thread's own

    @property
    def step_hook(self) -> Callable[[str], None] | None:
        return self.writer.step_hook

    @step_hook.setter
    def step_hook(self, hook: Callable[[str], None] | None) -> None:
        self.writer.step_hook = hook

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: FlushJob | SealJob) -> None:
        self._queue.put(job)

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self.writer.close()
        self.writer.db.close()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if type(job) is FlushJob:
                result = FlushResult(job.buffer)
                try:
                    result.stats = self._flush(job.buffer)
                except (OSError, sqlite3.Error, StorageError) as exc:  # logged by WriteHealth, rate-limited
                    result.error = storage_error("flushing the write cache failed", exc)
                    self.failures_total += 1
                except BaseException as exc:
                    log.exception("storage flusher: unexpected error")
                    result.error = storage_error("flushing the write cache failed", exc)
                    self.failures_total += 1
                self._reply(self._on_flushed, result)
                del result  # the half is the loop's again: hold nothing of it while idle
            elif type(job) is SealJob:
                error: BaseException | None = None
                try:
                    self.writer.seal_active()
                except BaseException as exc:
                    log.exception("storage flusher: sealing the active entry log failed")
                    error = exc
                self._reply(_resolve, job.future, error)
            del job

    def _reply(self, fn: Callable[..., None], *args: object) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed
            pass

    def _flush(self, buffer: WriteBuffer) -> FlushStats:
        started = time.perf_counter()
        stats = self.writer.flush(buffer, buffer.journal_end)
        self.flush_bytes_total += stats.record_bytes
        self.flush_entries_total += stats.entries
        self.flush_runs_total += stats.runs
        self.flush_logs_total += stats.logs_written
        self.fsyncs_total += stats.fsyncs + (1 if self._sync else 0)  # the logs and the index's WAL
        if buffer.journal_end is not None:
            self.checkpoints_total += 1
            try:
                self._trim_journal(buffer.journal_end.seq)
            except OSError as exc:  # the half is flushed all the same; the next flush trims again
                self.trim_failures_total += 1
                self._log.warning("journal-trim", "cannot trim the journal now: %s", exc)
            self.writer.step("journal-trimmed")
        self.flushes_total += 1
        self.flush_seconds_total += time.perf_counter() - started
        return stats

    def _trim_journal(self, checkpoint_seq: int) -> None:
        removed = 0
        for seq in list_segments(self._journal_dir):
            if seq >= checkpoint_seq:
                break
            try:
                (self._journal_dir / segment_name(seq)).unlink()
                removed += 1
            except FileNotFoundError:
                pass
        if removed:
            self.journal_segments_deleted_total += removed
            if self._sync:
                _layout.fsync_dir(self._journal_dir)


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error if isinstance(error, StorageError) else StorageError(str(error)))
