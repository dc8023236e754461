"""Delayed delivery (CO-4): entries whose deliver_at_time is still ahead wait here, not at consumers.

A bucket-based index, after Pulsar's BucketDelayedDeliveryTracker (_buckets.py): new delayed
entries fill a mutable bucket of three int64 columns; a full one is sealed, sorted by time, cut into
segments and stored (_store.py); of a sealed bucket only the segment being released stays in
memory. The positions still pending are in a PositionBitmap (_bitmap.py), which dispatch
uses to skip them when it reads the topic, so later messages are never held back and nothing is
read twice. Memory is a few bytes per pending entry; a restart loads the stored buckets (their
headers and current segments) instead of rescanning the log.

One timer releases due entries to the subscription (its replay set), in time order, never early,
and at most once a `tick_ms` (a release costs a scan of the mutable bucket). Only Shared and
Key_Shared subscriptions delay, as in Pulsar. Entries acknowledged behind the index's back (admin
skip, TTL never touches pending ones) are dropped lazily: dispatch skips what is acknowledged when
they come due; a mark-delete past every pending entry clears the index at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

from velamq._clock import Clock
from velamq.broker.delayed._bitmap import PositionBitmap
from velamq.broker.delayed._buckets import MutableBucket, SealedBucket, seal
from velamq.broker.delayed._store import DelayedIndexStore
from velamq.storage import ManagedLedger, Position

log = logging.getLogger(__name__)

# A mutable bucket is sealed (sorted and stored) at this many entries; a sealed bucket's segments
# hold this many (Pulsar: delayedDeliveryMinIndexCountPerBucket 50000, ...MaxIndexesPerBucket-
# SnapshotSegment 5000). Module settings so tests and benchmarks can use small ones.
bucket_indexes = 50_000
segment_indexes = 5_000
# Releases are at least this far apart (a message is never released early, at most this late).
tick_ms = 100
# After a segment could not be read from the store, the release is tried again this much later.
retry_ms = 1000


class DelayedDeliveryTracker:
    """The delayed entries of one subscription, the timer that releases them when they are due and
    the persister that stores sealed buckets (module docstring). `load()` must have finished before
    the first `add`."""

    def __init__(self, clock: Clock, release: Callable[[list[Position]], None], store: DelayedIndexStore) -> None:
        self._clock = clock
        self._release = release
        self._store = store
        self._pending = PositionBitmap()
        self._mutable = MutableBucket()
        self._sealed: list[SealedBucket] = []
        self._count = 0
        self._highest: Position | None = None
        self._timer: asyncio.Task[None] | None = None
        self._timer_due_ms = 0
        self._last_release_ms = 0
        self._persister: asyncio.Task[None] | None = None
        self._to_write: list[tuple[SealedBucket, PositionBitmap]] = []
        self._manifest_dirty = False
        self._drop_wanted = False
        self._closed = False

    def __len__(self) -> int:
        return self._count

    def __contains__(self, position: Position) -> bool:
        return position in self._pending

    @property
    def buckets(self) -> int:
        """Sealed buckets (stored, or being stored)."""
        return len(self._sealed)

    async def load(self) -> None:
        """Restore the stored buckets (a restart, or a topic loaded again)."""
        restored = await self._store.load()
        self._sealed = restored.buckets
        self._pending = restored.pending
        self._count = sum(b.pending for b in self._sealed)
        self._highest = self._pending.last()
        self._schedule()

    def add(self, position: Position, deliver_at_ms: int) -> None:
        if not self._pending.add(position):
            return  # indexed already (the topic read again after the consumers left)
        self._mutable.add(deliver_at_ms, position)
        self._count += 1
        if self._highest is None or position > self._highest:
            self._highest = position
        if len(self._mutable) >= bucket_indexes:
            self._seal()
        if self._timer is None or deliver_at_ms < self._timer_due_ms:
            self._schedule()

    def pending_runs(self, first: Position, last: Position) -> Iterator[tuple[Position, Position]]:
        """The pending positions in [first, last] as runs, in order (TTL spares them)."""
        return self._pending.runs_between(first, last)

    def skip(self, position: Position, ledger: ManagedLedger) -> Position:
        """The first position from `position` on that is not pending here (where dispatch reads)."""
        pending = self._pending
        while position in pending:
            entry_id = pending.next_absent(position)
            position = ledger.next_position(Position(position.ledger_id, entry_id - 1))
        return position

    def discard_up_to(self, mark_delete: Position) -> None:
        """The mark-delete moved behind the consumers' backs: a mark-delete past every pending
        entry empties the index; others are skipped when they come due (module docstring)."""
        if self._count and self._highest is not None and mark_delete >= self._highest:
            self.clear()

    def clear(self) -> None:
        """Forget everything, stored buckets too (seek, reset)."""
        had_stored = bool(self._sealed) or self._store.durable
        self._pending.clear()
        self._mutable = MutableBucket()
        self._sealed = []
        self._to_write.clear()
        self._count = 0
        self._highest = None
        self._cancel_timer()
        if had_stored:
            self._drop_wanted = True
            self._persist()

    async def close(self) -> None:
        """Stop the timer, let the persister finish what it started, close the store."""
        self._closed = True
        self._cancel_timer()
        persister = self._persister
        if persister is not None:
            try:
                await persister
            except Exception:
                log.exception("delayed index %s: the last write failed", self._store.name)
        await self._store.close()

    # ---- sealing and storing ---------------------------------------------------------------------

    def _seal(self) -> None:
        positions = PositionBitmap.of(zip(self._mutable.ledgers, self._mutable.entries, strict=True))
        bucket, _ = seal(self._mutable, segment_indexes)
        self._mutable = MutableBucket()
        self._sealed.append(bucket)
        if self._store.durable:
            self._to_write.append((bucket, positions))
            self._persist()

    def _persist(self) -> None:
        if self._persister is None and not self._closed:
            self._persister = asyncio.get_running_loop().create_task(self._run_persister())

    async def _run_persister(self) -> None:
        """The only code that writes the store: buckets, then the manifest that lists them."""
        try:
            while self._to_write or self._manifest_dirty or self._drop_wanted:
                if self._drop_wanted:
                    self._drop_wanted = False
                    self._manifest_dirty = False
                    await self._store.drop()
                elif self._to_write:
                    bucket, positions = self._to_write.pop(0)
                    if not bucket.done and bucket in self._sealed:
                        await self._store.write_bucket(bucket, positions)
                        self._manifest_dirty = True
                else:
                    self._manifest_dirty = False
                    await self._store.write_manifest(list(self._sealed))
        except Exception:
            # The index stays right in memory; the next change tries again. After a restart the
            # subscription reads from the topic what the store misses.
            log.exception("delayed index %s: storing failed", self._store.name)
        finally:
            self._persister = None

    # ---- releasing -------------------------------------------------------------------------------

    def _next_time(self) -> int | None:
        times = [t for t in (b.next_time() for b in self._sealed) if t is not None]
        if self._mutable.min_time is not None:
            times.append(self._mutable.min_time)
        return min(times) if times else None

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        self._cancel_timer()
        next_time = self._next_time()
        if next_time is None or self._closed:
            return
        self._timer_due_ms = max(next_time, self._last_release_ms + tick_ms)
        self._timer = asyncio.get_running_loop().create_task(self._fire(self._timer_due_ms))

    async def _fire(self, due_ms: int) -> None:
        await self._clock.sleep(max(0.0, (due_ms - self._clock.now_ms()) / 1000.0))
        now = self._clock.now_ms()
        due: list[tuple[int, Position]] = []
        segments_done = False
        while True:
            try:
                for bucket in self._sealed:
                    if bucket.needs_load:
                        bucket.loaded = await self._store.read_segment(bucket, bucket.released)
            except Exception:
                # Nothing is released out of order: everything waits, and the load is tried again.
                log.exception("delayed index %s: a segment could not be read", self._store.name)
                self._timer = None
                self._last_release_ms = now + retry_ms - tick_ms
                self._schedule()
                return
            due += self._mutable.pop_due(now)
            for bucket in self._sealed:
                released = bucket.released
                due += bucket.pop_due(now)
                segments_done = segments_done or bucket.released != released
            if not any(b.needs_load and b.infos[b.released].min_time <= now for b in self._sealed):
                break
        self._timer = None
        if segments_done:
            self._sealed = [b for b in self._sealed if not b.done]
            if self._store.durable:
                self._manifest_dirty = True
                self._persist()
        if due:
            due.sort()
            for _, position in due:
                self._pending.discard(position)
            self._count -= len(due)
            self._last_release_ms = now
            self._release([position for _, position in due])
        self._schedule()
