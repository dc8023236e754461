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
and the publish buffer (ME-2) bounds the bytes in flight. The segment file itself (create, write,
sync, cut back, roll) is _journal_segment's; so are the counters (JournalStats: written only here,
read from the loop).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq._log_limit import RateLimitedLog
from velamq.storage._layout import crc_of
from velamq.storage._write_errors import storage_error
from velamq.storage.formats._journal_file import SEGMENT_HEADER_BYTES, JournalLocation, record_header
from velamq.storage.formats._meta_ops import MetaOp, MetaOpOwner
from velamq.storage.journal._segment import JournalStats, SegmentFile

log = logging.getLogger("velamq.storage")


class LedgerOwner(MetaOpOwner, Protocol):
    """The managed ledger a journaled ledger belongs to (loop side): told about durable and failed
    appends, asked whether a consumer reads at its tail (durable entries then go to the tail cache)."""

    @property
    def tail_active(self) -> bool: ...

    def on_durable(self, ledger_id: int, last_entry_id: int, entries: int, size_bytes: int) -> None: ...

    def on_append_failed(self, ledger_id: int, error: StorageError) -> None: ...


@dataclass(eq=False, slots=True)
class LedgerHandle:
    """One ledger as the journal and write path see it. `failed` is written by the journal thread only."""

    ledger_id: int
    owner: LedgerOwner  # the ManagedLedger (loop side), told about durable appends
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
    Entries and metadata operations are records alike; segments roll over by size (the segment
    file's work is _journal_segment's). A failed write fails its group and fences its ledgers,
    never the journal (module docstring)."""

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
        self._policy = policy
        self._sync_interval_s = sync_interval_ms / 1000
        self._segment_bytes = segment_bytes
        self._deliver = deliver
        self._loop = loop
        self._queue: queue.SimpleQueue[Op | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="velamq-storage-journal", daemon=True)
        self._log = RateLimitedLog(log, clock)  # this thread's own
        self.stats = JournalStats()  # written here only
        self._segment = SegmentFile(journal_dir, first_seq, policy=policy, clock=clock, stats=self.stats)
        self._group_error: StorageError | None = None  # a failure during the group being processed
        self._sync_failed = False  # an fsync of the group being processed failed
        self.failure: StorageError | None = None  # the last failure, while no write succeeded since
        # Set by the loop while flushes fail: appends are refused (and their ledgers fenced), so the
        # journal past the checkpoint, which a restart must replay, stays about the write cache's
        # size (the ballast's). Metadata operations (cursors, deletes) still go through.
        self.refuse_appends: StorageError | None = None

    @property
    def location(self) -> JournalLocation:
        return JournalLocation(self._segment.seq, self._segment.offset)

    def open(self) -> None:
        """Create the first segment (blocking: call from a thread, before start). If it cannot be
        created now (a full disk at start), the first group tries again."""
        try:
            self._segment.create(self._segment.seq)
        except OSError as exc:
            self.failure = storage_error("journal cannot create its segment", exc)
            self.stats.segment_failures_total += 1
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
                    self._segment.cut_back_to_last_sync()
                    self._fail_all(batch, error)
            elif self._segment.unsynced and self._policy == "interval":
                self._sync()
            del batch  # hold no entry while idle
            if stop:
                if self._segment.unsynced and self._policy != "none":
                    self._sync()
                self._segment.close()
                return

    def _take(self) -> tuple[list[Op], bool]:
        """Everything queued (waiting for the first item), and whether a stop was among it."""
        timeout: float | None = None
        if self._segment.unsynced and self._policy == "interval":
            timeout = max(0.0, self._segment.last_sync_s + self._sync_interval_s - self._clock.monotonic_s())
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
        synced = self._write_batch(batch, group)
        durable = group.appends or group.metadata
        if (durable and self._policy == "fsync") or (
            self._policy == "interval" and self._segment.sync_due(self._sync_interval_s)
        ):
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
        stats = self.stats
        stats.groups_total += 1
        if group.appends:
            stats.appends_total += len(group.appends)
            if self._policy == "fsync":
                stats.entries_per_fsync_last = float(len(group.appends))
        if self._group_error is not None:
            group.error = self._group_error
        elif group.appends or group.metadata:
            group.wrote = True
            self.failure = None
        group.end = self.location
        try:
            self._loop.call_soon_threadsafe(self._deliver, group)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _write_batch(self, batch: list[Op], group: JournalGroup) -> tuple[int, int]:
        """Encode and write the batch's records (a writev per stretch between probes and rolls),
        answer its barriers and probes. Returns how many appends and operations of the group a roll
        synced (durable whatever follows)."""
        not_ready = self._make_ready()
        buffers: list[bytes] = []
        pending: list[AppendOp | MetaOp] = []
        pending_bytes = 0
        segment = self._segment
        segment_bytes = self._segment_bytes
        synced = (0, 0)
        for op in batch:
            if type(op) is ProbeOp:
                if pending:  # in order: what came before the probe is written first
                    self._write(buffers, pending, pending_bytes, group)
                    buffers, pending, pending_bytes = [], [], 0
                group.replies.append((op.future, not_ready or self._probe()))
                continue
            if type(op) is BarrierOp:
                group.replies.append((op.future, None))
                continue
            assert type(op) is AppendOp or type(op) is MetaOp
            error, header, data = _record(op, not_ready, self.refuse_appends)
            if error is not None:
                _fail(op, error, group)
                continue
            size = len(header) + len(data)
            # Full: what is pending goes to this segment, the record to the next (a segment holds
            # at least one record, however large).
            if segment.offset + pending_bytes + size > segment_bytes and (
                pending or segment.offset > SEGMENT_HEADER_BYTES
            ):
                if pending:
                    self._write(buffers, pending, pending_bytes, group)
                    buffers, pending, pending_bytes = [], [], 0
                if self._roll():
                    synced = (len(group.appends), len(group.metadata))
            buffers.append(header)
            buffers.append(data)
            pending.append(op)
            pending_bytes += size
        if pending:
            self._write(buffers, pending, pending_bytes, group)
        return synced

    def _failed(self, error: StorageError) -> StorageError:
        """Note a failure of the group being processed (logged at most once a minute per kind)."""
        self.stats.write_failures_total += 1
        self._group_error = self._group_error or error
        self.failure = error
        self._log.error(f"journal-{type(error.__cause__).__name__}", "%s", error)
        return error

    def _make_ready(self) -> StorageError | None:
        """Before a group: cut off a failed write that could not be cut off before, and create the
        segment if there is none. The error if the journal cannot be written now."""
        segment = self._segment
        try:
            segment.cut_back()
        except OSError as exc:
            return self._failed(storage_error("journal cannot cut off a failed write", exc))
        if segment.fd < 0:
            try:
                segment.create(segment.seq)
            except OSError as exc:
                self.stats.segment_failures_total += 1
                return self._failed(storage_error("journal cannot create its segment", exc))
        return None

    def _probe(self) -> StorageError | None:
        """Whether writing works again (SegmentFile.probe)."""
        try:
            self._segment.probe()
        except OSError as exc:
            return self._failed(storage_error("journal write probe failed", exc))
        if self._group_error is None:
            self.failure = None
        return None

    def _write(self, buffers: list[bytes], ops: list[AppendOp | MetaOp], size: int, group: JournalGroup) -> None:
        if not self._segment.writable or (self._sync_failed and self._policy == "fsync"):
            error = self._group_error or StorageError("journal not writable")
            for op in ops:
                _fail(op, error, group)
            return
        try:
            self._segment.write(buffers, size)
        except OSError as exc:
            error = self._failed(storage_error("journal write failed", exc))
            for op in ops:
                _fail(op, error, group)
            return
        for op in ops:
            if type(op) is AppendOp:
                group.appends.append(op)
                group.data_bytes += len(op.data)
            else:
                assert type(op) is MetaOp
                group.metadata.append(op)

    def _sync(self) -> None:
        try:
            self._segment.sync()
        except OSError as exc:
            self._sync_failed = True
            self._failed(storage_error("journal fsync failed", exc))

    def _roll(self) -> bool:
        """Start the next segment (the current one synced first, unless the policy is none). If it
        cannot be created, go on in the current one and try again at the next roll. Returns whether
        everything written so far is synced (it is, unless the policy is none or the sync failed)."""
        segment = self._segment
        if not segment.writable:
            return False
        if segment.unsynced and self._policy != "none":
            self._sync()
            if self._sync_failed:
                return False
        try:
            segment.create_next()
        except OSError as exc:
            self.stats.segment_failures_total += 1
            self._log.warning(
                "journal-roll",
                "journal cannot start segment %d, going on in %d: %s",
                segment.seq + 1,
                segment.seq,
                exc,
            )
        return self._policy == "fsync"

    def _fail_all(self, batch: list[Op], error: StorageError) -> None:
        group = JournalGroup(end=self.location, error=error)
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


def _record(
    op: AppendOp | MetaOp, not_ready: StorageError | None, refuse_appends: StorageError | None
) -> tuple[StorageError | None, bytes, bytes]:
    """The op's record (error None, header, data), or why it is not written (error, b"", b"")."""
    if type(op) is AppendOp:
        error = not_ready or op.handle.failed or refuse_appends
        ledger_id, entry_id, data = op.handle.ledger_id, op.entry_id, op.data
    else:
        assert type(op) is MetaOp
        error = not_ready or (op.fences.failed if op.fences is not None else None)
        ledger_id, entry_id, data = op.subject, op.entry_id, op.payload
    if error is not None:
        return error, b"", b""
    crc = crc_of(data)
    if type(op) is AppendOp:
        op.crc = crc  # reused by the flusher
    return None, record_header(len(data), crc, ledger_id, entry_id), data


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
