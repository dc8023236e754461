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

A write or fsync that fails fails its group. After a failed write the segment is truncated back to
where the group began and the ledgers that lost entries are fenced (their later appends fail
without being written), so no ledger can get a hole; if even that truncation fails, or an fsync
fails (the page cache may have dropped the data), the journal is broken and every later append
fails until a restart recovers from what is on disk.

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

log = logging.getLogger("velamq.storage")


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


Op = AppendOp | MetaOp | BarrierOp


@dataclass(eq=False, slots=True)
class JournalGroup:
    """What one group commit hands back to the loop."""

    appends: list[AppendOp] = field(default_factory=list)  # durable under the policy, in queue order
    metadata: list[MetaOp] = field(default_factory=list)  # durable metadata operations, in queue order
    failed: list[tuple[AppendOp | MetaOp, StorageError]] = field(default_factory=list)
    replies: list[tuple[asyncio.Future[None], StorageError | None]] = field(default_factory=list)
    end: JournalLocation = field(default_factory=lambda: JournalLocation(0, 0))  # the journal's end after it
    data_bytes: int = 0  # data bytes of `appends`
    applied: int = 0  # how many of `appends` the write path has put in the write cache (loop side)


class Journal:
    """The one write-ahead log of a Storage and its thread: ops come in through one FIFO queue,
    leave as group commits (one writev, one fsync under "fsync") handed back to the loop in order.
    Entries and metadata operations are records alike; segments roll over by size."""

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
        self._fd = -1
        self._offset = 0
        self._unsynced = False
        self._last_sync_s = self._clock.monotonic_s()
        self._broken: StorageError | None = None
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

    @property
    def location(self) -> JournalLocation:
        return JournalLocation(self._seq, self._offset)

    @property
    def broken(self) -> StorageError | None:
        return self._broken

    def open(self) -> None:
        """Create the first segment (blocking: call from a thread, before start)."""
        self._new_segment(self._seq)

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
                    self._broken = self._broken or StorageError(f"journal failed: {exc!r}")
                    self._fail_all(batch, self._broken)
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
        buffers: list[bytes] = []
        pending: list[AppendOp | MetaOp] = []
        pending_bytes = 0
        segment_bytes = self._segment_bytes
        for op in batch:
            if type(op) is AppendOp:
                error = self._broken or op.handle.failed
                ledger_id, entry_id, data = op.handle.ledger_id, op.entry_id, op.data
            elif type(op) is MetaOp:
                error = self._broken
                ledger_id, entry_id, data = op.subject, op.entry_id, op.payload
            else:
                assert type(op) is BarrierOp
                group.replies.append((op.future, None))
                continue
            if error is not None:
                group.failed.append((op, error))
                continue
            crc = crc_of(data)
            if type(op) is AppendOp:
                op.crc = crc
            header = record_header(len(data), crc, ledger_id, entry_id)
            size = len(header) + len(data)
            if pending and self._offset + pending_bytes + size > segment_bytes:
                self._write(buffers, pending, pending_bytes, group)
                buffers, pending, pending_bytes = [], [], 0
                self._roll()
            elif not pending and self._offset > SEGMENT_HEADER_BYTES and self._offset + size > segment_bytes:
                self._roll()
            buffers.append(header)
            buffers.append(data)
            pending.append(op)
            pending_bytes += size
        if pending:
            self._write(buffers, pending, pending_bytes, group)
        durable = group.appends or group.metadata
        if (durable and self._policy == "fsync") or (self._policy == "interval" and self._interval_due()):
            self._sync()
            if self._broken is not None:  # the fsync failed: nothing of this group is durable
                group.failed.extend((op, self._broken) for op in group.appends)
                group.failed.extend((op, self._broken) for op in group.metadata)
                group.appends = []
                group.metadata = []
                group.data_bytes = 0
        self.groups_total += 1
        if group.appends:
            self.appends_total += len(group.appends)
            if self._policy == "fsync":
                self.entries_per_fsync_last = float(len(group.appends))
        group.end = JournalLocation(self._seq, self._offset)
        try:
            self._loop.call_soon_threadsafe(self._deliver, group)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _interval_due(self) -> bool:
        return self._unsynced and self._clock.monotonic_s() - self._last_sync_s >= self._sync_interval_s

    def _write(self, buffers: list[bytes], ops: list[AppendOp | MetaOp], size: int, group: JournalGroup) -> None:
        if self._broken is not None:
            group.failed.extend((op, self._broken) for op in ops)
            return
        started = time.perf_counter()
        try:
            write_all(self._fd, buffers)
        except OSError as exc:
            error = StorageError(f"journal write failed: {exc}")
            log.error("%s", error)
            for op in ops:
                if type(op) is AppendOp:
                    op.handle.failed = op.handle.failed or error
                group.failed.append((op, error))
            try:
                os.ftruncate(self._fd, self._offset)
                os.lseek(self._fd, self._offset, os.SEEK_SET)
            except OSError as exc2:
                self._broken = StorageError(f"journal cannot cut off a failed write, appends refused: {exc2}")
                log.error("%s", self._broken)
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
        if self._policy == "none":
            return
        started = time.perf_counter()
        try:
            _layout.sync_fd(self._fd)
        except OSError as exc:
            self._broken = StorageError(f"journal fsync failed, appends refused: {exc}")
            log.error("%s", self._broken)
        elapsed = time.perf_counter() - started
        self.fsyncs_total += 1
        self.fsync_seconds_total += elapsed
        if elapsed > self.fsync_seconds_max:
            self.fsync_seconds_max = elapsed

    def _roll(self) -> None:
        """Close the current segment (synced unless the policy is none) and start the next one."""
        if self._unsynced and self._policy != "none":
            self._sync()
        os.close(self._fd)
        self._fd = -1
        self._new_segment(self._seq + 1)

    def _new_segment(self, seq: int) -> None:
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
            raise
        self._fd = fd
        self._seq = seq
        self._offset = SEGMENT_HEADER_BYTES
        self._unsynced = False
        self.segments_created_total += 1

    def _fail_all(self, batch: list[Op], error: StorageError) -> None:
        group = JournalGroup(end=JournalLocation(self._seq, self._offset))
        for op in batch:
            if type(op) is BarrierOp:
                group.replies.append((op.future, error))
            else:
                assert type(op) is AppendOp or type(op) is MetaOp
                group.failed.append((op, error))
        try:
            self._loop.call_soon_threadsafe(self._deliver, group)
        except RuntimeError:
            pass
