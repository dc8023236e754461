"""The journal thread: one write-ahead log for every topic, with group commit (ME-6).

The event loop hands appends (and metadata operations, _meta_ops) to this one thread through
one FIFO queue. The thread takes everything queued, all of it, as one group: it writes the group's
records to the current journal segment with one writev, fsyncs once (sync policy "fsync"), and
only then hands the whole group back to the loop with a single call_soon_threadsafe. One fsync
thereby covers every append, from every topic, that arrived while the previous group was being
written: with a thousand topics producing at once, it is still one write and one fsync per group.

Sync policies: "fsync" syncs before the group is delivered; "interval" delivers after the write
and syncs at most every sync_interval_ms (and when idle); "none" never syncs. The interval is
measured by the injected clock; durations kept for metrics are measured with perf_counter.

Metadata operations (a topic's log or a ledger created, sealed, deleted; a cursor written) are
records of the same journal (_meta_ops): travelling through the same queue, a ledger's creation
always precedes its first entry and its deletion follows its last, and the same fsync makes them
durable. Nothing else is written here: entry logs and the storage database are the flusher's.

A write or fsync that fails fails its group, and only its group: nothing is latched (disk full,
out of descriptors and I/O errors pass). The segment is cut back to where the group began (under
"fsync": to the last successful sync) so no record of a failed append can be replayed, and the
ledgers that lost entries are fenced (their later appends fail without being written; the managed
ledger goes on in a new ledger), so no ledger can get a hole. If the cut itself fails it is tried
again before the next group is written, whose ops fail until it works. A segment that cannot be
created (EMFILE, ENOSPC) is not fatal either: at a roll the journal keeps writing the current one
and tries again at the next group; at start, or if there is none, each group tries to create it.
`failure` is the last failure while no write succeeded since; a probe (ProbeOp: a small file
written, synced and removed) tells whether writing works again when nothing else is written
(_write_health).

The queue has no bound of its own: every item references bytes an awaiting caller already holds,
and the publish buffer (ME-2) bounds the bytes in flight. Counters are written only here and read
from the loop (single writer, int reads are atomic under the GIL).
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
from typing import Any, Protocol

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq._log_limit import RateLimitedLog
from velamq.storage import _layout
from velamq.storage._journal_file import (
    SEGMENT_HEADER_BYTES,
    JournalLocation,
    encode_segment_header,
    record_header,
    segment_name,
)
from velamq.storage._layout import crc_of, write_all
from velamq.storage._meta_ops import MetaOp
from velamq.storage._write_health import storage_error

log = logging.getLogger("velamq.storage")

PROBE_FILE = "probe.tmp"
probe_bytes = 64 * 1024


@dataclass(eq=False, slots=True)
class LedgerHandle:
    """One ledger as the journal and write path see it. `failed` is written by the journal thread only."""

    ledger_id: int
    owner: Any  # the ManagedLedger (loop side), told about durable appends
    failed: StorageError | None = None


class AppendWaiter(Protocol):
    """What an append resolves once durable (or failed), on the loop: an asyncio.Future, or an
    object of the caller's that acts on the outcome at once instead of scheduling callbacks
    (the broker's receipts, issue 12). It must not raise, nor call back into storage."""

    def done(self) -> bool: ...

    def set_result(self, result: Any, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


@dataclass(eq=False, slots=True)
class AppendOp:
    handle: LedgerHandle
    entry_id: int
    data: bytes
    future: AppendWaiter
    crc: int = 0  # CRC32C of data, computed by the journal thread, reused by the flusher


@dataclass(eq=False, slots=True)
class BarrierOp:
    """Resolves once every op queued before it has been delivered."""

    future: asyncio.Future[None]


@dataclass(eq=False, slots=True)
class ProbeOp:
    """A write probe: resolves once a small file could be written and synced in the journal's
    directory (and the segment is in order), or fails with the reason."""

    future: asyncio.Future[None]


Op = AppendOp | MetaOp | BarrierOp | ProbeOp


@dataclass(eq=False, slots=True)
class JournalGroup:
    """What one group commit hands back to the loop."""

    appends: list[AppendOp] = field(default_factory=list)  # durable under the policy, in queue order
    metadata: list[MetaOp] = field(default_factory=list)  # durable metadata operations, in queue order
    failed: list[tuple[AppendOp | MetaOp, StorageError]] = field(default_factory=list)
    replies: list[tuple[asyncio.Future[None], StorageError | None]] = field(default_factory=list)
    end: JournalLocation = field(default_factory=lambda: JournalLocation(0, 0))  # the journal's end after it
    error: StorageError | None = None  # a write failure during this group (the journal is not writable)
    wrote: bool = False  # a write (and its sync) succeeded: the journal writes again
    data_bytes: int = 0  # data bytes of `appends`
    applied: int = 0  # how many of `appends` the write path has put in the write cache (loop side)


class Journal:
    """The one write-ahead log of a Storage and its thread: ops come in through one FIFO queue,
    leave as group commits (one writev, one fsync under "fsync") handed back to the loop in order.
    Entries and metadata operations are records alike; segments roll over by size. A failed write
    fails its group and fences its ledgers, never the journal (module docstring)."""

    def __init__(
        self,
        journal_dir: Path,
        first_seq: int,
        *,
        policy: str,
        sync_interval_ms: int,
        segment_bytes: int,
        deliver: Callable[[JournalGroup], None],
        loop: asyncio.AbstractEventLoop,
        clock: Clock,
    ) -> None:
        self._clock = clock
        self._dir = journal_dir
        self._seq = first_seq
        self._policy = policy
        self._sync_interval_s = sync_interval_ms / 1000
        self._segment_bytes = segment_bytes
        self._deliver = deliver
        self._loop = loop
        self._queue: queue.SimpleQueue[Op | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="velamq-storage-journal", daemon=True)
        self._log = RateLimitedLog(log, clock)  # this thread's own
        self._fd = -1  # -1: no segment yet (it could not be created): each group tries again
        self._offset = 0
        self._synced_offset = 0  # where the current segment was last synced (or created)
        self._repair_at: int | None = None  # cut the segment back to here before writing more
        self._unsynced = False
        self._last_sync_s = self._clock.monotonic_s()
        self._group_error: StorageError | None = None  # a failure during the group being processed
        self._sync_failed = False  # an fsync of the group being processed failed
        self.failure: StorageError | None = None  # the last failure, while no write succeeded since
        # Set by the loop while flushes fail: appends are refused (and their ledgers fenced), so the
        # journal past the checkpoint, which a restart must replay, stays about the write cache's
        # size (the ballast's). Metadata operations (cursors, deletes) still go through.
        self.refuse_appends: StorageError | None = None
        # Counters (written here only).
        self.appends_total = 0
        self.bytes_total = 0  # record bytes written, headers included
        self.groups_total = 0
        self.fsyncs_total = 0
        self.fsync_seconds_total = 0.0
        self.fsync_seconds_max = 0.0
        self.write_seconds_total = 0.0
        self.entries_per_fsync_last = 0.0
        self.segments_created_total = 0
        self.write_failures_total = 0
        self.segment_failures_total = 0  # a segment could not be created (at a roll, or at start)
        self.repairs_total = 0  # a failed write's bytes cut off after a first attempt failed
        self.probes_total = 0

    @property
    def location(self) -> JournalLocation:
        return JournalLocation(self._seq, self._offset)

    def open(self) -> None:
        """Create the first segment (blocking: call from a thread, before start). If it cannot be
        created now (a full disk at start), the first group tries again."""
        try:
            self._new_segment(self._seq)
        except OSError as exc:
            self.failure = storage_error("journal cannot create its segment", exc)
            self.segment_failures_total += 1
            log.warning("%s; storage starts without writing", self.failure)

    def start(self) -> None:
        self._thread.start()

    def submit(self, op: Op) -> None:
        self._queue.put(op)

    def stop(self) -> None:
        """Finish everything queued so far, sync, then end the thread (blocks: call from a thread)."""
        self._queue.put(None)
        self._thread.join()

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch, stop = self._take()
            if batch:
                try:
                    self._process(batch)
                except BaseException as exc:  # never die silently: fail what this group owed
                    log.exception("storage journal: unexpected error")
                    error = StorageError(f"journal failed: {exc!r}")
                    self.failure = error
                    if self._fd >= 0:
                        self._repair_at = self._synced_offset
                    self._fail_all(batch, error)
            elif self._unsynced and self._policy == "interval":
                self._sync()
            del batch  # hold no entry while idle
            if stop:
                if self._unsynced and self._policy != "none":
                    self._sync()
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1
                return

    def _take(self) -> tuple[list[Op], bool]:
        """Everything queued (waiting for the first item), and whether a stop was among it."""
        timeout: float | None = None
        if self._unsynced and self._policy == "interval":
            timeout = max(0.0, self._last_sync_s + self._sync_interval_s - self._clock.monotonic_s())
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return [], False
        batch: list[Op] = []
        stop = item is None
        if item is not None:
            batch.append(item)
        get_nowait = self._queue.get_nowait
        while not stop:
            try:
                item = get_nowait()
            except queue.Empty:
                break
            if item is None:
                stop = True
            else:
                batch.append(item)
        return batch, stop

    def _process(self, batch: list[Op]) -> None:
        group = JournalGroup()
        self._group_error = None
        self._sync_failed = False
        not_ready = self._make_ready()
        buffers: list[bytes] = []
        pending: list[AppendOp | MetaOp] = []
        pending_bytes = 0
        segment_bytes = self._segment_bytes
        synced = (0, 0)  # appends and operations of this group synced by a roll (durable whatever follows)
        for op in batch:
            if type(op) is AppendOp:
                error = not_ready or op.handle.failed or self.refuse_appends
                ledger_id, entry_id, data = op.handle.ledger_id, op.entry_id, op.data
            elif type(op) is MetaOp:
                error = not_ready or (op.fences.failed if op.fences is not None else None)
                ledger_id, entry_id, data = op.subject, op.entry_id, op.payload
            elif type(op) is ProbeOp:
                if pending:  # in order: what came before the probe is written first
                    self._write(buffers, pending, pending_bytes, group)
                    buffers, pending, pending_bytes = [], [], 0
                group.replies.append((op.future, not_ready or self._probe()))
                continue
            else:
                assert type(op) is BarrierOp
                group.replies.append((op.future, None))
                continue
            if error is not None:
                _fail(op, error, group)
                continue
            crc = crc_of(data)
            if type(op) is AppendOp:
                op.crc = crc
            header = record_header(len(data), crc, ledger_id, entry_id)
            size = len(header) + len(data)
            if pending and self._offset + pending_bytes + size > segment_bytes:
                self._write(buffers, pending, pending_bytes, group)
                buffers, pending, pending_bytes = [], [], 0
                if self._roll():
                    synced = (len(group.appends), len(group.metadata))
            elif (
                not pending and self._offset > SEGMENT_HEADER_BYTES and self._offset + size > segment_bytes
            ) and self._roll():
                synced = (len(group.appends), len(group.metadata))
            buffers.append(header)
            buffers.append(data)
            pending.append(op)
            pending_bytes += size
        if pending:
            self._write(buffers, pending, pending_bytes, group)
        durable = group.appends or group.metadata
        if (durable and self._policy == "fsync") or (self._policy == "interval" and self._interval_due()):
            self._sync()
        if self._sync_failed and self._policy == "fsync":
            # Nothing of this group is durable: its appends fail (and fence their ledgers), and the
            # segment is cut back to the last sync before anything more is written.
            error = self._group_error or StorageError("journal fsync failed")
            lost: list[AppendOp | MetaOp] = [*group.appends[synced[0] :], *group.metadata[synced[1] :]]
            for op_lost in lost:
                _fail(op_lost, error, group)
            group.appends = group.appends[: synced[0]]
            group.metadata = group.metadata[: synced[1]]
            group.data_bytes = sum(len(op.data) for op in group.appends)
        self.groups_total += 1
        if group.appends:
            self.appends_total += len(group.appends)
            if self._policy == "fsync":
                self.entries_per_fsync_last = float(len(group.appends))
        if self._group_error is not None:
            group.error = self._group_error
        elif group.appends or group.metadata:
            group.wrote = True
            self.failure = None
        group.end = JournalLocation(self._seq, self._offset)
        try:
            self._loop.call_soon_threadsafe(self._deliver, group)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _failed(self, error: StorageError) -> StorageError:
        """Note a failure of the group being processed (logged at most once a minute per kind)."""
        self.write_failures_total += 1
        self._group_error = self._group_error or error
        self.failure = error
        self._log.error(f"journal-{type(error.__cause__).__name__}", "%s", error)
        return error

    def _make_ready(self) -> StorageError | None:
        """Before a group: cut off a failed write that could not be cut off before, and create the
        segment if there is none. The error if the journal cannot be written now."""
        if self._repair_at is not None and self._fd >= 0:
            try:
                os.ftruncate(self._fd, self._repair_at)
                os.lseek(self._fd, self._repair_at, os.SEEK_SET)
                if self._policy != "none":
                    _layout.sync_fd(self._fd)
            except OSError as exc:
                return self._failed(storage_error("journal cannot cut off a failed write", exc))
            self._offset = self._synced_offset = self._repair_at
            self._repair_at = None
            self._unsynced = False
            self.repairs_total += 1
        if self._fd < 0:
            try:
                self._new_segment(self._seq)
            except OSError as exc:
                self.segment_failures_total += 1
                return self._failed(storage_error("journal cannot create its segment", exc))
        return None

    def _probe(self) -> StorageError | None:
        """Write, sync and remove a small file next to the segments: whether writing works again."""
        self.probes_total += 1
        path = self._dir / PROBE_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                write_all(fd, [bytes(probe_bytes)])
                if self._policy != "none":
                    _layout.sync_fd(fd)
            finally:
                os.close(fd)
                path.unlink(missing_ok=True)
        except OSError as exc:
            return self._failed(storage_error("journal write probe failed", exc))
        if self._group_error is None:
            self.failure = None
        return None

    def _interval_due(self) -> bool:
        return self._unsynced and self._clock.monotonic_s() - self._last_sync_s >= self._sync_interval_s

    def _write(self, buffers: list[bytes], ops: list[AppendOp | MetaOp], size: int, group: JournalGroup) -> None:
        if self._repair_at is not None or self._fd < 0 or (self._sync_failed and self._policy == "fsync"):
            error = self._group_error or StorageError("journal not writable")
            for op in ops:
                _fail(op, error, group)
            return
        started = time.perf_counter()
        try:
            write_all(self._fd, buffers)
        except OSError as exc:
            error = self._failed(storage_error("journal write failed", exc))
            for op in ops:
                _fail(op, error, group)
            try:  # cut off what part of the group reached the file, so replay never sees it
                os.ftruncate(self._fd, self._offset)
                os.lseek(self._fd, self._offset, os.SEEK_SET)
            except OSError:
                self._repair_at = self._offset  # tried again before the next write
            return
        self.write_seconds_total += time.perf_counter() - started
        self._offset += size
        self.bytes_total += size
        self._unsynced = True
        for op in ops:
            if type(op) is AppendOp:
                group.appends.append(op)
                group.data_bytes += len(op.data)
            else:
                assert type(op) is MetaOp
                group.metadata.append(op)

    def _sync(self) -> None:
        self._unsynced = False
        self._last_sync_s = self._clock.monotonic_s()
        if self._policy == "none" or self._fd < 0:
            return
        started = time.perf_counter()
        try:
            _layout.sync_fd(self._fd)
        except OSError as exc:
            # The page cache may have dropped what it could not write: under "fsync" what was
            # written since the last sync is cut off (and its appends fail); under "interval" the
            # next sync tries again (those appends were delivered already, as that policy allows).
            self._sync_failed = True
            self._failed(storage_error("journal fsync failed", exc))
            if self._policy == "fsync":
                self._repair_at = self._synced_offset
            else:
                self._unsynced = True  # the next interval tries again
        else:
            self._synced_offset = self._offset
        elapsed = time.perf_counter() - started
        self.fsyncs_total += 1
        self.fsync_seconds_total += elapsed
        if elapsed > self.fsync_seconds_max:
            self.fsync_seconds_max = elapsed

    def _roll(self) -> bool:
        """Start the next segment (the current one synced first, unless the policy is none). If it
        cannot be created, go on in the current one and try again at the next roll. Returns whether
        everything written so far is synced (it is, unless the policy is none or the sync failed)."""
        if self._fd < 0 or self._repair_at is not None:
            return False
        if self._unsynced and self._policy != "none":
            self._sync()
            if self._sync_failed:
                return False
        old_fd, old_seq, old_offset = self._fd, self._seq, self._offset
        try:
            self._new_segment(self._seq + 1)
        except OSError as exc:
            self._fd, self._seq, self._offset = old_fd, old_seq, old_offset
            self.segment_failures_total += 1
            self._log.warning(
                "journal-roll", "journal cannot start segment %d, going on in %d: %s", old_seq + 1, old_seq, exc
            )
            return self._policy == "fsync"
        os.close(old_fd)
        return self._policy == "fsync"

    def _new_segment(self, seq: int) -> None:
        """Create segment `seq` and make it the current one; on failure nothing changes (a partly
        created file is removed)."""
        self._dir.mkdir(parents=True, exist_ok=True)
        path = self._dir / segment_name(seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            write_all(fd, [encode_segment_header(seq)])
            if self._policy != "none":
                _layout.sync_fd(fd)
                _layout.fsync_dir(self._dir)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._fd = fd
        self._seq = seq
        self._offset = self._synced_offset = SEGMENT_HEADER_BYTES
        self._repair_at = None
        self._unsynced = False
        self.segments_created_total += 1

    def _fail_all(self, batch: list[Op], error: StorageError) -> None:
        group = JournalGroup(end=JournalLocation(self._seq, self._offset), error=error)
        for op in batch:
            if type(op) is BarrierOp or type(op) is ProbeOp:
                group.replies.append((op.future, error))
            else:
                assert type(op) is AppendOp or type(op) is MetaOp
                _fail(op, error, group)
        try:
            self._loop.call_soon_threadsafe(self._deliver, group)
        except RuntimeError:
            pass


def _fail(op: AppendOp | MetaOp, error: StorageError, group: JournalGroup) -> None:
    """Fail an op of this group; a ledger that loses an entry (or its creation) is fenced."""
    if type(op) is AppendOp:
        if op.handle.failed is None:
            op.handle.failed = error
    else:
        assert type(op) is MetaOp
        fenced = op.fences
        if fenced is not None and fenced.failed is None:
            fenced.failed = error
    group.failed.append((op, error))
