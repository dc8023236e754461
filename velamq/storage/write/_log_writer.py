"""One flush: a write cache half into the shared entry logs, then into the index, in that order.

    1. entries sorted by (ledger, entry) are appended to the active entry log, a ledger's entries
       back to back (one run); the log rolls over at entry_log_bytes_max      ("logs-written")
    2. fsync every log written                                                ("logs-synced")
    3. one SQLite transaction: the half's metadata operations in journal order, the runs, the logs'
       lengths and live bytes, the checkpoint (the journal location the half reached) and the id
       counters; committed with an fsync of the database's WAL                ("index-committed")

So the index never points at bytes that are not durable, and the checkpoint moves only with the
index rows of the entries it skips (BookKeeper's order: logs, index, then the journal mark; here
the mark is in the same transaction as the index). A crash after 1 or 2 leaves bytes in the log
past the length the database has for it: garbage, cut off by recovery, and the journal replays
those entries. Entries of ledgers deleted by an operation of the same half are not written at all;
those of a ledger deleted meanwhile (it has no row any more) are not indexed.

Used by the flusher thread for every half, and by recovery for the halves it rebuilds from the
journal, with the same code. Everything here blocks.
"""

from __future__ import annotations

import logging
import os
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from velamq.storage import _layout
from velamq.storage.formats import _meta_ops as ops
from velamq.storage.formats._entry_log import LOG_HEADER_BYTES, EntryLogFile, Run, record_header
from velamq.storage.formats._journal_file import RECORD_HEADER_BYTES, JournalLocation
from velamq.storage.index._storage_db import StorageDb
from velamq.storage.write._write_cache import Segment, WriteBuffer

log = logging.getLogger("velamq.storage")


class LogIds:
    """Entry log ids, handed out by the flusher and the garbage collector (the one lock they share)."""

    def __init__(self, next_id: int) -> None:
        self._next = next_id
        self._lock = threading.Lock()

    def allocate(self) -> int:
        with self._lock:
            log_id = self._next
            self._next += 1
            return log_id


@dataclass(slots=True)
class FlushStats:
    entries: int = 0
    record_bytes: int = 0
    runs: int = 0
    logs_written: int = 0
    fsyncs: int = 0
    deleted_ledgers: list[int] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class _Written:
    file: EntryLogFile
    live_bytes: int = 0
    sealed: bool = False


class LogWriter:
    """Owns the active entry log and turns write cache halves into log records and index rows."""

    def __init__(
        self,
        logs_dir: Path,
        db: StorageDb,
        log_ids: LogIds,
        *,
        sync: bool,
        log_bytes_max: int,
        now_ms: Callable[[], int],
    ) -> None:
        self.logs_dir = logs_dir
        self.db = db
        self.log_ids = log_ids
        self._sync = sync
        self._log_bytes_max = log_bytes_max
        self._now_ms = now_ms
        self.active: EntryLogFile | None = None
        self.step_hook: Callable[[str], None] | None = None  # tests stop the world after a step

    def open(self) -> None:
        """Continue in the log the flusher appended to before (recovery has cut it to its length)."""
        unsealed = [row for row in self.db.logs() if not row.sealed]
        if unsealed:
            row = unsealed[-1]
            try:
                self.active = EntryLogFile.reopen(self.logs_dir, row.log_id, row.total_bytes)
            except FileNotFoundError:  # damage (reported by recovery): go on in a new log
                with self.db.transaction():
                    self.db.seal_logs()

    def close(self) -> None:
        if self.active is not None:
            self.active.close()
            self.active = None

    def step(self, name: str) -> None:
        if self.step_hook is not None:
            self.step_hook(name)

    def seal_active(self) -> None:
        """Stop appending to the active log (the collector wants it); the next flush starts a new one."""
        if self.active is None:
            return
        active = self.active
        with self.db.transaction():
            self.db.put_log(active.log_id, active.size_bytes, 0, sealed=True)
        active.close()
        self.active = None

    def flush(self, buffer: WriteBuffer, checkpoint: JournalLocation | None) -> FlushStats:
        """Write one half (module docstring). If anything fails (disk full, out of descriptors, I/O
        error), the writer is put back as it was before, so the same half can be flushed again:
        the active log is cut back to its committed length, logs this flush created are removed."""
        active, committed = self.active, self.active.size_bytes if self.active is not None else 0
        written: dict[int, _Written] = {}
        try:
            stats = self._flush(buffer, checkpoint, written)
        except BaseException:
            self._undo(active, committed, written)
            raise
        # Committed: nothing after this may fail the flush (the half would be flushed twice).
        for w in written.values():
            if w.sealed:
                w.file.close()
        self.step("index-committed")
        return stats

    def _undo(self, active: EntryLogFile | None, committed: int, written: dict[int, _Written]) -> None:
        for w in written.values():
            if w.file is not active:  # created by this flush, never committed: not ours any more
                w.file.close()
                w.file.path.unlink(missing_ok=True)
        self.active = active
        if active is not None:
            active.size_bytes = committed
            try:  # give back what the failed write took (the next flush would overwrite it anyway)
                os.ftruncate(active.fd, committed)
            except OSError:
                pass

    def _flush(self, buffer: WriteBuffer, checkpoint: JournalLocation | None, written: dict[int, _Written]
    ) -> FlushStats:
        stats = FlushStats()
        dead = ops.deleted_ledgers(buffer.metadata)
        runs: list[Run] = []
        for ledger_id in sorted(buffer.segments):
            if ledger_id not in dead:
                self._write_segment(buffer.segments[ledger_id], runs, written, stats)
        self.step("logs-written")
        if self._sync:
            for w in written.values():
                if w.file.unsynced:
                    w.file.sync()
                    stats.fsyncs += 1
        self.step("logs-synced")
        db = self.db
        with db.transaction():
            stats.deleted_ledgers = sorted(db.apply(buffer.metadata))
            kept, gone = db.add_runs(runs)
            if gone:
                log.info("flush: ledgers %s were deleted meanwhile; their entries stay unindexed", sorted(gone))
            for run in kept:
                written[run.log_id].live_bytes += run.size_bytes
            for w in written.values():
                db.put_log(w.file.log_id, w.file.size_bytes, w.live_bytes, sealed=w.sealed)
            if checkpoint is not None:
                db.set_meta({"checkpoint_seq": checkpoint.seq, "checkpoint_offset": checkpoint.offset})
            self._raise_counters(buffer)
        stats.runs = len(kept)
        stats.logs_written = len(written)
        return stats

    def _raise_counters(self, buffer: WriteBuffer) -> None:
        ledger_max = max((op.subject for op in buffer.metadata if op.kind == ops.LEDGER_CREATE), default=0)
        ml_max = max((op.subject for op in buffer.metadata if op.kind == ops.ML_CREATE), default=0)
        if ledger_max:
            self.db.raise_meta("ledger_id_next", ledger_max + 1)
        if ml_max:
            self.db.raise_meta("ml_id_next", ml_max + 1)

    def _write_segment(
        self, segment: Segment, runs: list[Run], written: dict[int, _Written], stats: FlushStats
    ) -> None:
        """Append one ledger's entries as one run (two, if the log rolls over in between)."""
        ledger_id = segment.ledger_id
        entry_id = segment.first_entry_id
        buffers: list[bytes | memoryview] = []
        ends = array("I")
        run_bytes = 0
        run_first = entry_id
        for data, crc in zip(segment.datas, segment.crcs, strict=True):
            size = RECORD_HEADER_BYTES + len(data)
            active = self.active
            # A log holding nothing but its header is never rolled over: an entry larger than the
            # limit gets a log of its own.
            if active is None or (
                active.size_bytes + run_bytes + size > self._log_bytes_max
                and (run_bytes or active.size_bytes > LOG_HEADER_BYTES)
            ):
                if run_bytes:
                    runs.append(self._append_run(ledger_id, run_first, buffers, ends, run_bytes, written))
                    buffers, ends, run_bytes, run_first = [], array("I"), 0, entry_id
                self._roll(written)
            buffers.append(record_header(ledger_id, entry_id, data, crc))
            buffers.append(data)
            run_bytes += size
            ends.append(run_bytes)
            entry_id += 1
        if run_bytes:
            runs.append(self._append_run(ledger_id, run_first, buffers, ends, run_bytes, written))
        stats.entries += len(segment.datas)
        stats.record_bytes += sum(len(d) for d in segment.datas) + RECORD_HEADER_BYTES * len(segment.datas)

    def _append_run(
        self,
        ledger_id: int,
        first_entry: int,
        buffers: list[bytes | memoryview],
        ends: array[int],
        run_bytes: int,
        written: dict[int, _Written],
    ) -> Run:
        assert self.active is not None
        active = self.active
        written.setdefault(active.log_id, _Written(active))
        offset = active.append(buffers, run_bytes)
        return Run(ledger_id, first_entry, len(ends), active.log_id, offset, ends)

    def _roll(self, written: dict[int, _Written]) -> None:
        """Seal the active log (in this flush's transaction) and start a new one."""
        old = self.active
        if old is not None:
            written.setdefault(old.log_id, _Written(old)).sealed = True
        new = EntryLogFile.create(self.logs_dir, self.log_ids.allocate(), self._now_ms(), sync=self._sync)
        written[new.log_id] = _Written(new)
        self.active = new


def remove_log(logs_dir: Path, log_id: int, *, sync: bool) -> bool:
    """Delete an entry log file; False if it was already gone."""
    try:
        (logs_dir / _layout.log_file_name(log_id)).unlink()
    except FileNotFoundError:
        return False
    if sync:
        _layout.fsync_dir(logs_dir)
    return True
