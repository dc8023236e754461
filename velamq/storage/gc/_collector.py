"""The garbage collector: space of deleted and trimmed ledgers comes back (BookKeeper's GC).

Deleting a topic or trimming its old ledgers removes their index rows at once (_meta_ops,
_log_writer) but leaves their bytes inside shared entry logs, next to other topics' live entries.
The `logs` table keeps, per log, its committed length and the bytes of runs still indexed, so the
collector knows each log's live share without scanning it (BookKeeper keeps a ledgers map in a
log's footer for this). Each pass, in its own thread, never on the event loop:

    1. a sealed log with no live byte left is deleted: its row first, then the file
    2. compaction: sealed logs whose live share is under the threshold, sparsest first, have their
       live runs copied (records verified on the way) into a new log; when the new log is full or
       the candidates are done: fsync it, then one transaction points the runs at their copies,
       adds the new log's row and drops the old logs' rows; then the old files are deleted

The threshold depends on the pass: minor compaction (gc_minor_threshold, default 0.2, at most every
gc_minor_interval_s, an hour) and major compaction (gc_major_threshold 0.8, every
gc_major_interval_s, a day), BookKeeper's defaults; passes in between (every gc_interval_s) only
delete empty logs. Copying is throttled to gc_bytes_per_s (a physical rate, measured in real time).

Crash safety at every step (the kill tests stop a child in each): before the commit, the new log
has no row, so recovery deletes it and the index still points at the old logs; after the commit,
the old logs have no row, so recovery deletes whatever of them is left. A run deleted while it was
being copied stays deleted: the relocation changes only rows that still point where they did, and
the copy's bytes count as dead in the new log. Readers holding an old location find the old log
gone and look the run up again (_read_path). The active log is never compacted; the collector asks
the flusher to seal it first when it is worth it (Storage.collect_garbage).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from velamq._errors import CorruptEntryError, StorageError
from velamq.storage import _layout
from velamq.storage._write_errors import failure_kind
from velamq.storage.formats._entry_log import EntryLogFile, Run, log_chunk_bytes, parse_records, read_span
from velamq.storage.index._storage_db import LogRow, StorageDb
from velamq.storage.write._log_writer import LogIds, remove_log

log = logging.getLogger("velamq.storage")


@dataclass(slots=True)
class GcResult:
    """What one pass did, and the logs as it found them."""

    logs_deleted: int = 0
    logs_compacted: int = 0
    logs_written: int = 0
    bytes_reclaimed: int = 0  # file bytes gone, less the bytes written into new logs
    bytes_copied: int = 0
    seconds: float = 0.0
    logs: list[LogRow] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class GcJob:
    threshold: float  # compact sealed logs whose live share is below this (0: only delete empty ones)
    future: asyncio.Future[GcResult]


class _Throttle:
    """At most bytes_per_s on average (0: unlimited), in real time: it limits the disk's load."""

    def __init__(self, bytes_per_s: int) -> None:
        self._rate = bytes_per_s
        self._started = time.monotonic()
        self._bytes = 0

    def spent(self, nbytes: int) -> None:
        if self._rate <= 0:
            return
        self._bytes += nbytes
        ahead_s = self._bytes / self._rate - (time.monotonic() - self._started)
        if ahead_s > 0:
            time.sleep(ahead_s)


class GarbageCollector:
    """The collector's thread: passes run one at a time from a queue; counters for the metrics."""

    def __init__(
        self,
        db_path: Path,
        logs_dir: Path,
        log_ids: LogIds,
        *,
        sync: bool,
        log_bytes_max: int,
        bytes_per_s: int,
        now_ms: Callable[[], int],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._db_path = db_path
        self._logs_dir = logs_dir
        self._log_ids = log_ids
        self._sync = sync
        self._log_bytes_max = log_bytes_max
        self._bytes_per_s = bytes_per_s
        self._now_ms = now_ms
        self._loop = loop
        self._queue: queue.SimpleQueue[GcJob | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="velamq-storage-gc", daemon=True)
        self.step_hook: Callable[[str], None] | None = None  # tests stop the world after a step
        # Counters (written here only) and the logs as the last pass found them.
        self.runs_total = 0
        self.logs_deleted_total = 0
        self.logs_compacted_total = 0
        self.bytes_reclaimed_total = 0
        self.bytes_copied_total = 0
        self.seconds_total = 0.0
        self.errors_total = 0
        self.last_logs: list[LogRow] = []

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: GcJob) -> None:
        self._queue.put(job)

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _step(self, name: str) -> None:
        if self.step_hook is not None:
            self.step_hook(name)

    def _run(self) -> None:
        db: StorageDb | None = None
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                try:
                    if db is None:
                        db = StorageDb(self._db_path, sync=self._sync)
                    result = self.run_pass(db, job.threshold)
                except BaseException as exc:
                    self.errors_total += 1
                    if failure_kind(exc) == "no_space":
                        # Expected while the disk is full: one line, no traceback; the next pass
                        # (the schedule's, or a caller's collect) tries again.
                        log.warning(
                            "storage garbage collector: the pass failed, the disk is full (%s); "
                            "the next pass tries again",
                            exc,
                        )
                    else:
                        log.exception("storage garbage collector: the pass failed")
                    self._reply(job.future, None, exc)
                else:
                    self._reply(job.future, result, None)
        finally:
            if db is not None:
                db.close()

    def _reply(self, future: asyncio.Future[GcResult], result: GcResult | None, error: BaseException | None) -> None:
        def resolve() -> None:
            if future.done():
                return
            if error is not None:
                if isinstance(error, StorageError):
                    future.set_exception(error)
                else:
                    wrapped = StorageError(repr(error))
                    wrapped.__cause__ = error  # failure_kind sees the OSError behind it
                    future.set_exception(wrapped)
            else:
                assert result is not None
                future.set_result(result)

        try:
            self._loop.call_soon_threadsafe(resolve)
        except RuntimeError:  # the loop is closed
            pass

    # -- one pass ------------------------------------------------------------------------------

    def run_pass(self, db: StorageDb, threshold: float) -> GcResult:
        started = time.perf_counter()
        result = GcResult()
        rows = db.logs()
        for row in rows:
            if row.sealed and row.live_bytes <= 0:
                with db.transaction():
                    db.delete_log(row.log_id)
                self._step("gc-row-deleted")
                remove_log(self._logs_dir, row.log_id, sync=self._sync)
                result.logs_deleted += 1
                result.bytes_reclaimed += row.total_bytes
        candidates = sorted(
            (r for r in rows if r.sealed and 0 < r.live_bytes < threshold * r.total_bytes),
            key=lambda r: r.live_bytes / r.total_bytes,
        )
        if candidates:
            self._compact(db, candidates, result)
        result.logs = db.logs()
        result.seconds = time.perf_counter() - started
        self.runs_total += 1
        self.logs_deleted_total += result.logs_deleted
        self.logs_compacted_total += result.logs_compacted
        self.bytes_reclaimed_total += result.bytes_reclaimed
        self.bytes_copied_total += result.bytes_copied
        self.seconds_total += result.seconds
        self.last_logs = result.logs
        return result

    def _compact(self, db: StorageDb, candidates: list[LogRow], result: GcResult) -> None:
        throttle = _Throttle(self._bytes_per_s)
        output: EntryLogFile | None = None
        batch: list[tuple[LogRow, list[tuple[Run, int, int]]]] = []
        try:
            for row in candidates:
                if output is not None and output.size_bytes + row.live_bytes > self._log_bytes_max:
                    self._commit(db, output, batch, result)
                    output, batch = None, []
                runs = db.runs_in_log(row.log_id)
                if output is None:
                    output = EntryLogFile.create(self._logs_dir, self._log_ids.allocate(), self._now_ms(), sync=False)
                moves = self._copy(row, runs, output, throttle)
                if moves is not None:
                    batch.append((row, moves))
                    result.bytes_copied += sum(run.size_bytes for run, _, _ in moves)
            if output is not None:
                self._commit(db, output, batch, result)
                output = None
        finally:
            if output is not None:  # a failure before the commit: the new log is garbage
                output.close()
                remove_log(self._logs_dir, output.log_id, sync=False)

    def _copy(
        self, row: LogRow, runs: list[Run], output: EntryLogFile, throttle: _Throttle
    ) -> list[tuple[Run, int, int]] | None:
        """Copy a log's live runs to the output; None (and nothing moves) if a record is damaged."""
        path = self._logs_dir / _layout.log_file_name(row.log_id)
        moves: list[tuple[Run, int, int]] = []
        try:
            for run in runs:
                data = self._read_run(path, run)
                new_pos = output.append([data], len(data))
                moves.append((run, output.log_id, new_pos))
                throttle.spent(2 * len(data))  # read and written
        except (CorruptEntryError, FileNotFoundError) as exc:
            log.error("garbage collector: entry log %s cannot be compacted, it stays: %s", path, exc)
            self.errors_total += 1
            return None
        return moves

    def _read_run(self, path: Path, run: Run) -> bytes:
        """A run's record bytes, every record checked (a copy never launders damage)."""
        start, end = run.offset, run.offset + run.size_bytes
        if end - start <= log_chunk_bytes:
            data = read_span(path, start, end)
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                chunks = range(start, end, log_chunk_bytes)
                data = b"".join(os.pread(fd, min(log_chunk_bytes, end - p), p) for p in chunks)
            finally:
                os.close(fd)
        if len(data) != end - start:
            raise CorruptEntryError(f"entry log {path}", f"run of ledger {run.ledger_id} ends past the file")
        parse_records(data, f"entry log {path}", run.ledger_id, run.first_entry, run.count)
        return data

    def _commit(
        self,
        db: StorageDb,
        output: EntryLogFile,
        batch: list[tuple[LogRow, list[tuple[Run, int, int]]]],
        result: GcResult,
    ) -> None:
        if not batch:  # every candidate was damaged: nothing to commit
            output.close()
            remove_log(self._logs_dir, output.log_id, sync=False)
            return
        if self._sync:
            output.sync()
            _layout.fsync_dir(self._logs_dir)
        output.close()
        self._step("gc-copied")
        with db.transaction():
            moved = db.relocate(move for _, moves in batch for move in moves)
            db.put_log(output.log_id, output.size_bytes, moved, sealed=True)
            for row, _ in batch:
                db.delete_log(row.log_id)
        self._step("gc-committed")
        for row, _ in batch:
            remove_log(self._logs_dir, row.log_id, sync=False)
        if self._sync:
            _layout.fsync_dir(self._logs_dir)
        self._step("gc-deleted")
        result.logs_compacted += len(batch)
        result.logs_written += 1
        result.bytes_reclaimed += sum(row.total_bytes for row, _ in batch) - output.size_bytes
