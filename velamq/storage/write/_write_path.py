"""The loop side of the write path: journal groups into the write cache, halves to the flusher.

    ManagedLedger.append ──queue──▶ journal thread ──group──▶ WritePath.on_group (loop)
        (position assigned,           (one write,              entries into the active write
         publish buffer +size)         one fsync)              cache half and, for topics with an
                                                               active cursor, the tail cache; the
                                                               ledgers learn what is durable; the
                                                               appends resolve (publish buffer -size)
    active half full or old ──swap──▶ flusher thread ──done──▶ WritePath.on_flushed (loop)
                                      (entry logs, index and    (drop the half, swap again if due,
                                       checkpoint, trim)         apply parked groups)

A group's metadata operations (_meta_ops) go to the half that takes the group's first entry (or
the active one), so an operation is never flushed after an entry that depends on it.

Backpressure: a group's appends are applied only while the active half has room (a group may be
split across the two halves). When the active half is full and the other is still being flushed,
the rest is parked, in order, until the flush is done; those appends stay unresolved meanwhile, so
their bytes stay in the publish buffer, which is what makes the broker stop reading producers.
Memory therefore holds at most the two halves (each overshooting by at most one entry) plus the
publish buffer, however slow the disk. The checkpoint a half carries is the end of the last group
it holds completely, so a group split across halves is replayed whole after a crash, never half.

If a flush fails (disk full, out of descriptors, I/O error) its half stays the flushing one: still
readable, still in the journal, tried again with back-off (_write_health) until it works; until
then the journal refuses appends (they fail, their ledgers are fenced), so what a restart must
replay stays about the write cache's size. A failed journal
write fails its appends (the managed ledgers hear of it and go on in a new ledger). Neither
latches anything: storage is not `writable` until both work again, and resumes by itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq.storage._caches import ByteLRU
from velamq.storage._config import Counters, StorageConfig
from velamq.storage._position import Position
from velamq.storage.formats._journal_file import RECORD_HEADER_BYTES
from velamq.storage.formats._meta_ops import MetaOp
from velamq.storage.journal._journal import AppendOp, AppendWaiter, Journal, JournalGroup, LedgerHandle, ProbeOp
from velamq.storage.write._flusher import Flusher, FlushJob, FlushResult
from velamq.storage.write._health import WriteHealth
from velamq.storage.write._publish_buffer import PublishBuffer
from velamq.storage.write._write_cache import WriteCache

log = logging.getLogger("velamq.storage")


class WritePath:
    """The loop side of writing: applies journal groups to the write cache and tail cache, tells
    the managed ledgers what became durable and resolves their appends, swaps full or old halves to
    the flusher, parks groups while both halves are busy (backpressure), and learns of flushes."""

    def __init__(
        self,
        config: StorageConfig,
        loop: asyncio.AbstractEventLoop,
        write_cache: WriteCache,
        tail_cache: ByteLRU[Position, bytes],
        publish_buffer: PublishBuffer,
        counters: Counters,
        clock: Clock,
        on_metadata_flushed: Callable[[list[MetaOp]], None],
    ) -> None:
        self._on_metadata_flushed = on_metadata_flushed
        self._clock = clock
        self._config = config
        self._loop = loop
        self.write_cache = write_cache
        self._tail = tail_cache
        self._publish = publish_buffer
        self._counters = counters
        self.journal: Journal | None = None
        self.flusher: Flusher | None = None
        self.health = WriteHealth(clock, self._probe_journal, self.retry_flush)
        self.stopping = False  # Storage.close: a failed flush is not waited for any more
        self._flush_running = False
        self._attempt_waiters: list[asyncio.Future[None]] = []  # told when a flush attempt ends
        self._parked: deque[JournalGroup] = deque()
        self._parked_bytes = 0
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._swap_requested = False
        self._timer: asyncio.Task[None] | None = None
        self.parked_groups_total = 0

    def start(self, journal: Journal, flusher: Flusher) -> None:
        self.journal = journal
        self.flusher = flusher
        self._timer = self._loop.create_task(self._age_timer())

    @property
    def parked_bytes(self) -> int:
        return self._parked_bytes

    # -- journal groups ------------------------------------------------------------------------

    def on_group(self, group: JournalGroup) -> None:
        """Called on the loop with each group the journal thread committed."""
        if group.error is not None:
            self.health.journal_failed(group.error)
        elif group.wrote:
            self.health.journal_ok()
        self._parked.append(group)
        self._parked_bytes += group.data_bytes
        self._drain()
        if self._parked and self._parked[-1] is group:
            self.parked_groups_total += 1

    def _drain(self) -> None:
        """Apply parked groups, in order, as far as the write cache has room."""
        while self._parked:
            group = self._parked[0]
            if group.metadata:
                self._apply_metadata(group)
            while group.applied < len(group.appends):
                if not self._make_room():
                    return
                self._apply_appends(group)
            self._parked.popleft()
            self._finish(group)

    def _make_room(self) -> bool:
        cache = self.write_cache
        if cache.has_room:
            return True
        if cache.flushing is None:
            self._swap()
            return True
        return False

    def _apply_metadata(self, group: JournalGroup) -> None:
        """The group's metadata operations go to the active half (the one its first entry goes to)."""
        add = self.write_cache.add_metadata
        generation = self.write_cache.active.generation
        for op in group.metadata:
            add(op)
            if op.owner is not None:
                op.owner.last_generation = generation
            if op.future is not None and not op.future.done():
                op.future.set_result(None)
        group.metadata = []

    def _apply_appends(self, group: JournalGroup) -> None:
        """Apply the group's next appends until the active half is full (a group may span halves).
        Once per entry: keep this loop lean (issue 22); what holds per ledger is asked once."""
        cache = self.write_cache
        active = cache.active
        half_bytes_max = cache.half_bytes_max
        tail_put = self._tail.put
        appends = group.appends
        start = end = group.applied
        durable: dict[LedgerHandle, list[int]] = {}  # handle -> [last entry id, count, record bytes]
        tail_active: dict[LedgerHandle, bool] = {}  # asked once per ledger: nothing here changes it
        skipped_inactive = 0
        data_bytes = 0
        resolved: list[tuple[AppendWaiter, Position]] = []
        cache.start_active()
        add = active.add
        new_position = tuple.__new__
        count = len(appends)
        while end < count and active.size_bytes < half_bytes_max:
            op = appends[end]
            end += 1
            handle = op.handle
            ledger_id = handle.ledger_id
            entry_id = op.entry_id
            data = op.data
            size = len(data)
            data_bytes += size
            if not add(ledger_id, entry_id, data, op.crc, handle):
                log.error("write cache: ledger %d entry %d does not follow its run", ledger_id, entry_id)
            run = durable.get(handle)
            if run is None:
                durable[handle] = [entry_id, 1, RECORD_HEADER_BYTES + size]
                active_tail = tail_active[handle] = handle.owner.tail_active
            else:
                run[0] = entry_id
                run[1] += 1
                run[2] += RECORD_HEADER_BYTES + size
                active_tail = tail_active[handle]
            position = new_position(Position, (ledger_id, entry_id))  # Position(...) without its Python __new__
            if active_tail:
                tail_put(position, data)
            else:
                skipped_inactive += 1
            resolved.append((op.future, position))
        group.applied = end
        self._parked_bytes -= data_bytes
        self._counters.tail_cache_skipped_inactive_total += skipped_inactive
        cache.note_bytes()
        generation = active.generation
        for handle, (last, runs, record_bytes) in durable.items():
            handle.owner.on_durable(handle.ledger_id, last, runs, record_bytes)
            handle.owner.last_generation = generation
        self._counters.pending_appends -= end - start
        self._publish.release(data_bytes)
        for waiter, position in resolved:
            if not waiter.done():
                waiter.set_result(position)

    def _finish(self, group: JournalGroup) -> None:
        """Once all its appends are applied: the checkpoint may pass the group; failures and replies."""
        self.write_cache.active.journal_end = group.end
        release = self._publish.release
        for op, error in group.failed:
            if type(op) is AppendOp:
                release(len(op.data))
                self._counters.pending_appends -= 1
                op.handle.owner.on_append_failed(op.handle.ledger_id, error)
            elif type(op) is MetaOp and op.owner is not None:
                op.owner.on_op_failed(op, error)
            if op.future is not None and not op.future.done():
                op.future.set_exception(error)
        for future, reply_error in group.replies:
            if future.done():
                continue
            if reply_error is None:
                future.set_result(None)
            else:
                future.set_exception(reply_error)
        cache = self.write_cache
        if not cache.has_room and cache.flushing is None:
            self._swap()

    # -- flushes -------------------------------------------------------------------------------

    def _swap(self) -> None:
        assert self.flusher is not None
        self._swap_requested = False
        frozen = self.write_cache.swap()
        self._flush_running = True
        self.flusher.submit(FlushJob(frozen))

    def retry_flush(self) -> None:
        """Submit the half whose flush failed again (WriteHealth's back-off calls this)."""
        flushing = self.write_cache.flushing
        if flushing is not None and not self._flush_running and self.flusher is not None:
            self._flush_running = True
            self.flusher.submit(FlushJob(flushing))

    async def _probe_journal(self) -> StorageError | None:
        assert self.journal is not None
        probe: asyncio.Future[None] = self._loop.create_future()
        self.journal.submit(ProbeOp(probe))
        try:
            await probe
        except StorageError as exc:
            return exc
        return None

    def on_flushed(self, result: FlushResult) -> None:
        """Called on the loop when the flusher is done with a half."""
        cache = self.write_cache
        self._flush_running = False
        attempts, self._attempt_waiters = self._attempt_waiters, []
        for attempt in attempts:
            if not attempt.done():
                attempt.set_result(None)
        assert self.journal is not None
        if result.error is None:
            cache.flushed(result.buffer)
            self.journal.refuse_appends = None
            self.health.flush_ok()
            if result.buffer.metadata:
                self._on_metadata_flushed(result.buffer.metadata)
        else:
            self.health.flush_failed(result.error)  # the half stays, tried again after a back-off
            self.journal.refuse_appends = result.error
        generation = result.buffer.generation
        waiters, self._flush_waiters = self._flush_waiters, []
        for wanted, future in waiters:
            if wanted <= generation or result.error is not None:  # a failed attempt: callers look again
                if not future.done():
                    future.set_result(None)
            else:
                self._flush_waiters.append((wanted, future))
        if result.error is not None:
            return
        if not cache.active.empty and (not cache.has_room or self._swap_requested):
            self._swap()
        self._drain()

    @property
    def flushed_generation(self) -> int:
        return self.write_cache.flushed_generation

    async def flush(self) -> None:
        """Wait until everything now in the write cache is in the entry logs and the index."""
        cache = self.write_cache
        if self.health.flush_error is not None and not self._flush_running:
            return  # the failed half waits for its retry (wait_flushed waits for it)
        active = cache.active
        if not active.empty:
            wanted = active.generation
            if cache.flushing is None:
                self._swap()
            else:
                self._swap_requested = True
        elif cache.flushing is not None:
            wanted = cache.flushing.generation
        else:
            return
        future: asyncio.Future[None] = self._loop.create_future()
        self._flush_waiters.append((wanted, future))
        await future

    async def drain(self) -> None:
        """Flush until nothing is parked and both halves are empty (Storage.flush and close); gives
        up after a failed flush attempt (what is left is in the journal, replayed at the next start)."""
        cache = self.write_cache
        while self._parked or cache.flushing is not None or not cache.active.empty:
            self._drain()
            await self.flush()
            if self.health.flush_error is not None:
                return

    async def wait_flushed(self, generation: int) -> None:
        """Wait until the halves up to `generation` are flushed, through failed attempts and their
        retries (a managed ledger's close: the database must have the log before it is reopened),
        unless storage is closing."""
        cache = self.write_cache
        while cache.flushed_generation < generation and (cache.flushing is not None or not cache.active.empty):
            if self.health.flush_error is not None:
                if self.stopping:
                    return
                if not self._flush_running:  # the retry's back-off: wait for its attempt
                    attempt: asyncio.Future[None] = self._loop.create_future()
                    self._attempt_waiters.append(attempt)
                    await attempt
                    continue
            await self.flush()

    # -- the age trigger -----------------------------------------------------------------------

    async def _age_timer(self) -> None:
        """Every flush_interval_ms by the clock: swap a half that is old enough."""
        interval_s = self._config.flush_interval_ms / 1000
        while True:
            await self._clock.sleep(interval_s)
            cache = self.write_cache
            active = cache.active
            age_s = self._clock.monotonic_s() - active.started_s
            if (
                cache.flushing is None
                and not active.empty
                and age_s >= interval_s * 0.9
            ):
                self._swap()

    def stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.health.stop()
