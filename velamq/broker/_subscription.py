"""A subscription: a cursor over the topic's log plus the consumers that read through it.

One asyncio task per subscription owns dispatch. It wakes when something changes (new entries,
permits, consumers, redeliveries, acks that free a Key_Shared consumer), reads entries from the
managed ledger and hands each to one consumer:

    Exclusive / Failover   the one active consumer (Failover: lowest priority, then name; for a
                           partitioned topic the partition index picks among them)
    Shared                 round-robin over consumers that have permits
    Key_Shared             the consumer whose hash range holds murmur3(key) % 65536

Redeliveries (nack, consumer gone, Key_Shared consumer without permits) go to the replay set and
are sent before new entries, in position order, so a key never overtakes itself. A seek bumps the
epoch so a read that was in flight across the seek is thrown away.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from velamq import _limits
from velamq._clock import Clock
from velamq._errors import ProtocolError
from velamq.broker._compaction import CompactedView
from velamq.broker._consumer import Consumer
from velamq.broker._key_shared import KeySharedSelector
from velamq.broker._rates import RateCounter
from velamq.protocol import parse_entry_metadata
from velamq.storage import Entry, ManagedCursor, ManagedLedger, Position

log = logging.getLogger(__name__)

read_entries_max = _limits.dispatch_read_entries_max
# Stop reading new entries while this many are waiting for redelivery (bounds memory when a
# Key_Shared consumer is stuck without permits).
replay_entries_max = 5000
# Delayed entries held in memory per subscription. Beyond it the subscription stops reading ahead;
# nothing is lost, since the tracker is rebuilt from the log after a restart anyway.
delayed_entries_max = 100_000
_NONE_KEY = b"NONE_KEY"


class SubType(IntEnum):
    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


@dataclass(frozen=True, slots=True)
class EntryInfo:
    num_messages: int
    sticky_key: bytes
    deliver_at_ms: int
    publish_time_ms: int = 0
    is_chunk: bool = False


def entry_info(data: bytes) -> EntryInfo:
    try:
        metadata = parse_entry_metadata(data)
    except ProtocolError:
        # Never block a subscription on one bad entry: deliver it as one message; the client
        # acknowledges it with a validation error.
        return EntryInfo(1, _NONE_KEY, 0)
    num = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    if metadata.HasField("ordering_key"):
        key = metadata.ordering_key
    elif metadata.HasField("partition_key"):
        key = metadata.partition_key.encode()
    else:
        key = _NONE_KEY
    deliver_at = metadata.deliver_at_time if metadata.HasField("deliver_at_time") else 0
    return EntryInfo(max(num, 1), key, deliver_at, metadata.publish_time, metadata.HasField("chunk_id"))


class Subscription:
    def __init__(
        self,
        name: str,
        ledger: ManagedLedger,
        cursor: ManagedCursor,
        sub_type: SubType,
        durable: bool,
        partition_index: int,
        clock: Clock,
    ) -> None:
        self.name = name
        self.ledger = ledger
        self.cursor = cursor
        self.sub_type = sub_type
        self.durable = durable
        self.partition_index = partition_index
        self.clock = clock
        self.consumers: list[Consumer] = []
        self.read_position = ledger.next_position(cursor.mark_delete_position)
        self._replay: set[Position] = set()
        # Key_Shared: the sticky key of replay entries that wait for their consumer's permits.
        self._replay_keys: dict[Position, bytes] = {}
        self._sticky_consumers: set[int] = set()
        # Key_Shared consumers that joined while others were connected -> read position at join.
        self._joined_at: dict[int, Position] = {}
        self._redelivery_counts: dict[Position, int] = {}
        self._pending: dict[Position, Consumer] = {}
        # When each pending entry was dispatched (monotonic seconds), for ack-hole redelivery.
        self._dispatched_at: dict[Position, float] = {}
        self.delayed_delivery = True  # topic policy; off: deliver_at_time is ignored
        # read_compacted subscriptions read the compacted view up to its horizon (set by the topic).
        self.read_compacted = False
        self.compacted_view: CompactedView | None = None
        self._delayed: list[tuple[int, Position]] = []
        self._delayed_timer: asyncio.TimerHandle | None = None
        self._key_selector = KeySharedSelector()
        self._active: Consumer | None = None
        self._round_robin = 0
        self._epoch = 0
        self._wake = asyncio.Event()
        self._closed = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatch:{name}")
        self.out = RateCounter()
        self.redelivered = RateCounter()
        self.expired = RateCounter()
        self.chunks_out = RateCounter()
        # Set while consumers are closed by a seek: a non-durable subscription must survive it.
        self.resetting = False

    # ---- consumers -------------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer, sticky_ranges: list[tuple[int, int]] | None = None) -> None:
        """Raises HashRangeOverlapError for bad sticky ranges; the caller checks type rules."""
        if self.sub_type == SubType.KEY_SHARED:
            if sticky_ranges:
                self._key_selector.add_sticky(consumer, sticky_ranges)
                self._sticky_consumers.add(id(consumer))
            else:
                self._key_selector.add_auto_split(consumer)
            if self.consumers and self.ledger.next_position(self.cursor.mark_delete_position) < self.read_position:
                # Keys moving to the new consumer may still have unacked entries at the old owner:
                # it gets nothing at or past this position until everything before it is acked.
                self._joined_at[id(consumer)] = self.read_position
        self.consumers.append(consumer)
        active_before = self._active
        self._update_active()
        if self.sub_type == SubType.FAILOVER and self._active is active_before:
            # The active consumer did not change: tell the newcomer it is a standby (as Pulsar does).
            consumer.notify_active(consumer is self._active)
        self.wake()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        if self.sub_type == SubType.KEY_SHARED:
            self._key_selector.remove(consumer, id(consumer) not in self._sticky_consumers)
            self._sticky_consumers.discard(id(consumer))
            self._joined_at.pop(id(consumer), None)
        self._return_pending(consumer, count_redelivery=False)
        self._update_active()
        self.wake()

    def _update_active(self) -> None:
        if self.sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return
        active: Consumer | None = None
        if self.consumers:
            ordered = sorted(self.consumers, key=lambda c: (c.priority, c.name))
            index = self.partition_index % len(ordered) if self.partition_index >= 0 else 0
            active = ordered[index]
        if active is self._active:
            return
        previous, self._active = self._active, active
        if previous is not None and previous in self.consumers:
            # The old active consumer's unacked entries go to the new one, in order.
            self._return_pending(previous, count_redelivery=False)
        if self.sub_type == SubType.FAILOVER:
            for c in self.consumers:
                c.notify_active(c is active)

    def is_active(self, consumer: Consumer) -> bool:
        return consumer is self._active

    # ---- flow, acks, redelivery ------------------------------------------------------------------

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.wake()

    def acknowledge(self, consumer: Consumer, acks: Iterable[tuple[Position, list[int] | None]]) -> None:
        full: list[Position] = []
        for position, ack_set in acks:
            if ack_set is not None and self._partial_ack(position, ack_set):
                continue
            full.append(position)
        if full:
            self.cursor.ack(full)
            for position in full:
                self._forget(position)
        self._after_ack()

    def acknowledge_cumulative(self, consumer: Consumer, position: Position, ack_set: list[int] | None) -> None:
        if ack_set is not None and self._partial_ack(position, ack_set):
            # Everything before the batch is acknowledged; the batch itself only partly.
            position = Position(position.ledger_id, position.entry_id - 1)
        self.cursor.ack_cumulative(position)
        for pending_consumer in list(self.consumers):
            for p in [p for p in pending_consumer.pending if p <= position]:
                self._forget(p)
        self._after_ack()

    def _partial_ack(self, position: Position, ack_set: list[int]) -> bool:
        """Merge a batch-index ack; True while some messages of the batch remain unacked."""
        current = self.cursor.batch_ack_set(position)
        merged = ack_set if current is None else [a & b for a, b in zip(current, ack_set, strict=False)]
        if any(merged):
            self.cursor.set_batch_ack_set(position, merged)
            return True
        self.cursor.set_batch_ack_set(position, None)
        return False

    def forget_acked(self) -> None:
        """Drop pending and replay entries that were acknowledged behind the consumers' backs
        (admin skip / expire, TTL, backlog eviction)."""
        mark_delete = self.cursor.mark_delete_position
        for position in [p for p in self._pending if p <= mark_delete or self.cursor.is_acked(p)]:
            self._forget(position)
        for position in [p for p in self._replay if p <= mark_delete or self.cursor.is_acked(p)]:
            self._forget(position)
        self._delayed = [(t, p) for t, p in self._delayed if not (p <= mark_delete or self.cursor.is_acked(p))]
        heapq.heapify(self._delayed)
        if self.read_position <= mark_delete:
            self.read_position = self.ledger.next_position(mark_delete)
        self._after_ack()
        self.wake()

    def redeliver_stuck_holes(self, threshold_s: float, now_s: float) -> int:
        """BR-4: entries still unacknowledged behind acknowledged ones after threshold_s go back
        to the replay set (to any consumer), so the mark-delete position can move on."""
        acked = self.cursor.individually_acked.ranges()
        if not acked:
            return 0
        newest_acked = acked[-1][1]
        stuck = [p for p, t in self._dispatched_at.items() if p < newest_acked and now_s - t >= threshold_s]
        for position in stuck:
            consumer = self._pending.pop(position, None)
            if consumer is not None:
                consumer.pending.pop(position, None)
            self._dispatched_at.pop(position, None)
            self._redelivery_counts[position] = self._redelivery_counts.get(position, 0) + 1
            self._replay.add(position)
            self.redelivered.add(1, 0)
        if stuck:
            self.wake()
        return len(stuck)

    def _forget(self, position: Position) -> None:
        self._dispatched_at.pop(position, None)
        consumer = self._pending.pop(position, None)
        if consumer is not None:
            consumer.pending.pop(position, None)
        self._replay.discard(position)
        self._replay_keys.pop(position, None)
        self._redelivery_counts.pop(position, None)

    def _after_ack(self) -> None:
        if self.sub_type != SubType.KEY_SHARED:
            return
        if self._joined_at:
            mark_delete = self.cursor.mark_delete_position
            released = [c for c, joined in self._joined_at.items() if self.ledger.next_position(mark_delete) >= joined]
            for c in released:
                del self._joined_at[c]
            if released:
                self.wake()
        if self._replay:
            self.wake()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if positions is None:
            self._return_pending(consumer, count_redelivery=True)
        else:
            for position in positions:
                if self._pending.get(position) is consumer:
                    self._pending.pop(position)
                    self._dispatched_at.pop(position, None)
                    consumer.pending.pop(position, None)
                    self._redelivery_counts[position] = self._redelivery_counts.get(position, 0) + 1
                    self._replay.add(position)
                    self.redelivered.add(1, 0)
        self.wake()

    def _return_pending(self, consumer: Consumer, count_redelivery: bool) -> None:
        for position in consumer.pending:
            self._pending.pop(position, None)
            self._dispatched_at.pop(position, None)
            if count_redelivery:
                self._redelivery_counts[position] = self._redelivery_counts.get(position, 0) + 1
            self._replay.add(position)
        consumer.pending.clear()

    def reset(self, mark_delete: Position) -> None:
        """Seek: everything after mark_delete is delivered again; in-flight reads are discarded."""
        self._epoch += 1
        self.cursor.reset(mark_delete)
        self.read_position = self.ledger.next_position(mark_delete)
        for consumer in self.consumers:
            consumer.pending.clear()
        self._pending.clear()
        self._dispatched_at.clear()
        self._replay.clear()
        self._replay_keys.clear()
        self._joined_at.clear()
        self._redelivery_counts.clear()
        self._delayed.clear()
        self.wake()

    # ---- figures ---------------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        return self.cursor.backlog

    @property
    def delayed_messages(self) -> int:
        return len(self._delayed)

    @property
    def unacked_messages(self) -> int:
        return sum(c.unacked_messages for c in self.consumers)

    # ---- dispatch --------------------------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def _run(self) -> None:
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._dispatch_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A failed read (corrupt entry, I/O error) must not kill dispatch for good.
                log.exception("dispatch failed for subscription %s on %s", self.name, self.ledger.name)
                await asyncio.sleep(1.0)
                self._wake.set()

    def _permits_available(self) -> int:
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return max(self._active.permits, 0) if self._active is not None else 0
        return sum(max(c.permits, 0) for c in self.consumers)

    async def _dispatch_round(self) -> None:
        while not self._closed:
            if self._permits_available() <= 0:
                return
            epoch = self._epoch
            if self._replay:
                positions = sorted(self._replay)[:read_entries_max]
                entries = await self._read_positions(positions)
                if epoch != self._epoch:
                    continue
                # Undeliverable ones are put back by _deliver; positions gone from storage are dropped.
                self._replay.difference_update(positions)
                delivered = self._deliver(entries, replaying=True)
                if self._replay and self.sub_type != SubType.KEY_SHARED:
                    if not delivered:
                        return  # waiting for permits
                    continue
                if self._replay and delivered:
                    continue
                # Replay drained, or Key_Shared with blocked keys: new entries may still go to
                # consumers that have permits (their keys are not blocked).
            if len(self._replay) >= replay_entries_max or len(self._delayed) >= delayed_entries_max:
                return
            view = self.compacted_view if self.read_compacted else None
            if view is not None and self.read_position <= view.horizon:
                count = min(max(self._permits_available(), 1), read_entries_max)
                entries = await view.read_from(self.read_position, count)
                if epoch != self._epoch:
                    continue
                if not entries:
                    self.read_position = self.ledger.next_position(view.horizon)
                    continue
                self.read_position = self.ledger.next_position(entries[-1].position)
                self._deliver(entries, replaying=False)
                continue
            last = self.ledger.last_confirmed
            if last is None or self.read_position > last:
                return
            count = min(max(self._permits_available(), 1), read_entries_max)
            entries = await self.ledger.read_entries(self.read_position, count)
            if epoch != self._epoch:
                continue
            if not entries:
                return
            self.read_position = self.ledger.next_position(entries[-1].position)
            self._deliver(entries, replaying=False)

    async def _read_positions(self, positions: list[Position]) -> list[Entry]:
        """Read sorted positions, one storage read per contiguous run."""
        out: list[Entry] = []
        i = 0
        while i < len(positions):
            j = i + 1
            while j < len(positions) and positions[j] == self.ledger.next_position(positions[j - 1]):
                j += 1
            out.extend(await self.ledger.read_entries(positions[i], j - i))
            i = j
        return out

    def _deliver(self, entries: list[Entry], replaying: bool) -> bool:
        now = self.clock.now_ms()
        monotonic_now = self.clock.monotonic_s()
        key_shared = self.sub_type == SubType.KEY_SHARED
        # A key with an entry waiting in the replay set must not be overtaken by a newer entry.
        blocked_keys: set[bytes] = set(self._replay_keys.values()) if key_shared and not replaying else set()
        delivered = False
        mark_delete = self.cursor.mark_delete_position
        for entry in entries:
            position = entry.position
            if position <= mark_delete or position in self._pending or self.cursor.is_acked(position):
                self._replay_keys.pop(position, None)
                continue
            info = entry_info(entry.data)
            if (
                info.deliver_at_ms > now
                and self.delayed_delivery
                and self.sub_type in (SubType.SHARED, SubType.KEY_SHARED)
                and position not in self._redelivery_counts
            ):
                self._delay(position, info.deliver_at_ms)
                continue
            consumer = None if info.sticky_key in blocked_keys else self._select(info)
            if consumer is not None and self._joined_at:
                joined = self._joined_at.get(id(consumer))
                if joined is not None and position >= joined:
                    consumer = None
            if consumer is None or consumer.permits <= 0:
                self._replay.add(position)
                if key_shared:
                    self._replay_keys[position] = info.sticky_key
                    blocked_keys.add(info.sticky_key)
                continue
            consumer.send_entry(
                position,
                entry.data,
                info.num_messages,
                self._redelivery_counts.get(position, 0),
                self.cursor.batch_ack_set(position),
            )
            self._replay_keys.pop(position, None)
            self._pending[position] = consumer
            self._dispatched_at[position] = monotonic_now
            self.out.add(info.num_messages, len(entry.data))
            if info.is_chunk:
                self.chunks_out.add(1, len(entry.data))
                consumer.chunks_out.add(1, len(entry.data))
            delivered = True
        return delivered

    def _select(self, info: EntryInfo) -> Consumer | None:
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return self._active
        if self.sub_type == SubType.KEY_SHARED:
            return self._key_selector.select(info.sticky_key)
        n = len(self.consumers)
        for _ in range(n):
            consumer = self.consumers[self._round_robin % n]
            self._round_robin += 1
            if consumer.permits > 0:
                return consumer
        return None

    # ---- delayed delivery (CO-4) -----------------------------------------------------------------

    def _delay(self, position: Position, deliver_at_ms: int) -> None:
        heapq.heappush(self._delayed, (deliver_at_ms, position))
        self._schedule_delayed()

    def _schedule_delayed(self) -> None:
        if not self._delayed or self._closed:
            return
        if self._delayed_timer is not None:
            self._delayed_timer.cancel()
        delay_s = max(0.0, (self._delayed[0][0] - self.clock.now_ms()) / 1000.0)
        self._delayed_timer = asyncio.get_running_loop().call_later(delay_s, self._release_delayed)

    def _release_delayed(self) -> None:
        self._delayed_timer = None
        now = self.clock.now_ms()
        while self._delayed and self._delayed[0][0] <= now:
            _, position = heapq.heappop(self._delayed)
            # Marked as seen so _deliver does not delay it again; a zero count is sent as 0.
            self._redelivery_counts.setdefault(position, 0)
            self._replay.add(position)
        self._schedule_delayed()
        self.wake()
