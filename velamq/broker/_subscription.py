"""A subscription: a cursor over the topic's log plus the consumers that read through it.

One asyncio task per subscription owns dispatch. It wakes when something changes (new entries,
permits, consumers, redeliveries, acks that free a Key_Shared consumer), reads entries from the
managed ledger and hands each to the consumer the ConsumerSelector picks (_consumer_selector.py).

Redeliveries (nack, consumer gone, Key_Shared consumer without permits, delayed entries that are
due) go to the replay set and are sent before new entries, in position order, so a key never
overtakes itself. A seek bumps the epoch so a read that was in flight across the seek is thrown
away.

A subscription without consumers is small (most subscriptions of a million topics are): its
dispatch task, consumer selector, in-flight bookkeeping, delayed-delivery tracker and rate counters
exist only while they have something to do. When the last consumer leaves, the entries it had out
are not kept in a replay set: the read position goes back to the first unacknowledged entry, so
the next consumer reads them again from the log, in order (unless some of them carry a
redelivery count, which only the in-flight bookkeeping remembers).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence

from velamq import _limits
from velamq._clock import Clock
from velamq.broker import _positions
from velamq.broker._chunk_owners import ChunkOwners
from velamq.broker._compaction import CompactedView
from velamq.broker._consumer import ServerConsumer
from velamq.broker._consumer_selector import ConsumerSelector, SubType
from velamq.broker._delay_store import DelayedIndexStore, delayed_index_name
from velamq.broker._delayed import DelayedDeliveryTracker
from velamq.broker._entry_info import entry_info
from velamq.broker._in_flight import InFlight
from velamq.broker._rates import NO_RATE, RateCounter, SubscriptionRates
from velamq.storage import Entry, ManagedCursor, ManagedLedger, Position, Storage

log = logging.getLogger(__name__)

read_entries_max = _limits.dispatch_read_entries_max
# Stop reading new entries while this many are waiting for redelivery (bounds memory when a
# Key_Shared consumer is stuck without permits).
replay_entries_max = 5000
# After a failed read (corrupt entry, I/O error), dispatch tries again this much later.
dispatch_retry_s = 1.0
# One read from storage brings about this many bytes at most (by the subscription's average entry
# size), whatever the permits: permits count messages, not memory.
read_bytes_max = _limits.dispatch_read_bytes_max

_NO_CONSUMERS: tuple[ServerConsumer, ...] = ()


class Subscription:
    """A named cursor over a topic's log and the consumers reading through it. It owns what is in
    flight (_in_flight.py): which entry is out at which consumer, which must go again and how
    often each went; acknowledgements move the cursor, a seek resets everything. Its own
    dispatch task is the only code that reads entries for it and sends them to consumers."""

    __slots__ = (
        "_chunk_owners",
        "_closed",
        "_delayed",
        "_delayed_restored",
        "_epoch",
        "_in_flight",
        "_partition_index",
        "_rates",
        "_read_size",
        "_selector",
        "_storage",
        "_sub_type",
        "_task",
        "_waiter",
        "_wake_pending",
        "clock",
        "compacted_view",
        "cursor",
        "delayed_delivery",
        "durable",
        "ledger",
        "name",
        "read_compacted",
        "read_position",
        "resetting",
    )

    def __init__(
        self,
        name: str,
        ledger: ManagedLedger,
        cursor: ManagedCursor,
        sub_type: SubType,
        durable: bool,
        partition_index: int,
        clock: Clock,
        storage: Storage | None = None,
    ) -> None:
        """`storage` keeps the delayed-delivery index of a durable subscription (_delay_store.py);
        without it the index lives in memory."""
        self.name = name
        self.ledger = ledger
        self.cursor = cursor
        self.durable = durable
        self.clock = clock
        self._sub_type = sub_type
        self._partition_index = partition_index
        self._selector: ConsumerSelector | None = None  # while consumers are attached
        self.read_position = ledger.next_position(cursor.mark_delete_position)
        self._in_flight: InFlight | None = None  # while something is out or waits for redelivery
        self.delayed_delivery = True  # topic policy; off: deliver_at_time is ignored
        self._delayed: DelayedDeliveryTracker | None = None  # while delayed entries wait
        # CH-7: which consumer each chunked message under way belongs to (_chunk_owners.py).
        self._chunk_owners: ChunkOwners | None = None
        self._storage = storage if durable else None
        self._delayed_restored = False  # the stored index was looked for (first dispatch)
        # read_compacted subscriptions read the compacted view up to its horizon (set by the topic).
        self.read_compacted = False
        self.compacted_view: CompactedView | None = None
        self._epoch = 0
        self._read_size = _ReadSize()
        self._wake_pending = False
        self._waiter: asyncio.Future[None] | None = None  # the dispatch task waits for a wake-up
        self._task: asyncio.Task[None] | None = None  # the dispatch task, while consumers are attached
        self._closed = False
        self._rates: SubscriptionRates | None = None
        # Set while consumers are closed by a seek: a non-durable subscription must survive it.
        self.resetting = False

    # ---- counters (made on first use) --------------------------------------------------------

    def _counting(self) -> SubscriptionRates:
        rates = self._rates
        if rates is None:
            rates = self._rates = SubscriptionRates.since(self.clock.monotonic_s())
        return rates

    @property
    def out(self) -> RateCounter:
        return self._rates.out if self._rates is not None else NO_RATE

    @property
    def redelivered(self) -> RateCounter:
        return self._rates.redelivered if self._rates is not None else NO_RATE

    @property
    def expired(self) -> RateCounter:
        return self._rates.expired if self._rates is not None else NO_RATE

    @property
    def chunks_out(self) -> RateCounter:
        return self._rates.chunks_out if self._rates is not None else NO_RATE

    def count_expired(self, entries: int) -> None:
        """Entries acknowledged by TTL or an admin expire."""
        if entries:
            self._counting().expired.add(entries, 0)

    def sample_rates(self, now_s: float) -> None:
        if self._rates is not None:
            self._rates.sample(now_s)
        for consumer in self.consumers:
            consumer.out.sample(now_s)
            consumer.chunks_out.sample(now_s)

    # ---- consumers -------------------------------------------------------------------------------

    @property
    def sub_type(self) -> SubType:
        return self._sub_type

    @sub_type.setter
    def sub_type(self, value: SubType) -> None:
        """Only while no consumer is attached: the first consumer decides the type."""
        self._sub_type = value
        if self._selector is not None:
            self._selector.sub_type = value

    @property
    def consumers(self) -> Sequence[ServerConsumer]:
        return self._selector.consumers if self._selector is not None else _NO_CONSUMERS

    def _flight(self) -> InFlight:
        in_flight = self._in_flight
        if in_flight is None:
            in_flight = self._in_flight = InFlight()
        return in_flight

    def add_consumer(self, consumer: ServerConsumer, sticky_ranges: list[tuple[int, int]] | None = None) -> None:
        """Raises HashRangeOverlapError for bad sticky ranges; the caller checks type rules."""
        joined_at = None
        if self.consumers and self.ledger.next_position(self.cursor.mark_delete_position) < self.read_position:
            joined_at = self.read_position  # entries are out: keys moving to it must wait for them
        selector = self._selector
        if selector is None:
            selector = ConsumerSelector(self._sub_type, self._partition_index)
        demoted = selector.add(consumer, sticky_ranges, joined_at)
        self._selector = selector
        if demoted is not None:
            self._flight().take_back_all(demoted, count_redelivery=False)
        self.wake()

    def remove_consumer(self, consumer: ServerConsumer) -> None:
        selector = self._selector
        if selector is None or consumer not in selector.consumers:
            return
        demoted = selector.remove(consumer)
        if self._chunk_owners is not None:
            self._chunk_owners.forget(consumer)
        in_flight = self._in_flight
        if in_flight is not None:
            in_flight.take_back_all(consumer, count_redelivery=False)
            if demoted is not None:
                # The old active consumer's unacked entries go to the new one, in order.
                in_flight.take_back_all(demoted, count_redelivery=False)
        if not selector.consumers:
            self._selector = None
            self._release_idle_state()
        self.wake()

    def _release_idle_state(self) -> None:
        """The last consumer left: drop what only consumers need. Entries that were out go back to
        the log (the read position rewinds to the first unacknowledged entry) unless some carry a
        redelivery count, which only the in-flight bookkeeping remembers."""
        self._chunk_owners = None
        in_flight = self._in_flight
        if in_flight is None or not in_flight.redelivery_counts:
            self._in_flight = None
            self._epoch += 1  # a read in flight belongs to the consumers that left
            self.read_position = self.ledger.next_position(self.cursor.mark_delete_position)

    def disconnect_consumers(self) -> None:
        """Close every consumer from the broker's side; clients subscribe again."""
        for consumer in list(self.consumers):
            self.remove_consumer(consumer)
            consumer.close_by_broker()

    def is_active(self, consumer: ServerConsumer) -> bool:
        return self._selector is not None and self._selector.is_active(consumer)

    @property
    def idle(self) -> bool:
        """No consumer, nothing waiting for delivery, no read in progress: the topic may unload."""
        return not self.consumers and not self._delayed and self._task is None

    # ---- flow, acks, redelivery ------------------------------------------------------------------

    def flow(self, consumer: ServerConsumer, permits: int) -> None:
        consumer.permits += permits
        self.wake()

    def acknowledge(self, acks: Iterable[tuple[Position, list[int] | None]]) -> None:
        full: list[Position] = []
        for position, ack_set in acks:
            if ack_set is not None and self._partial_ack(position, ack_set):
                continue
            full.append(position)
        if full:
            self.cursor.ack(full)
            in_flight = self._in_flight
            if in_flight is not None:
                for position in full:
                    in_flight.forget(position)
        self._after_ack()

    def acknowledge_cumulative(self, position: Position, ack_set: list[int] | None) -> None:
        if ack_set is not None and self._partial_ack(position, ack_set):
            # Everything before the batch is acknowledged; the batch itself only partly.
            position = _positions.before(position)
        self.cursor.ack_cumulative(position)
        in_flight = self._in_flight
        if in_flight is not None:
            for p in [p for p in in_flight.pending if p <= position]:
                in_flight.forget(p)
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
        """Drop pending, replay and delayed entries that were acknowledged behind the consumers'
        backs (admin skip / expire, TTL, backlog eviction)."""
        mark_delete = self.cursor.mark_delete_position

        def gone(p: Position) -> bool:
            return p <= mark_delete or self.cursor.is_acked(p)

        in_flight = self._in_flight
        if in_flight is not None:
            for position in [p for p in in_flight.pending if gone(p)] + [p for p in in_flight.replay if gone(p)]:
                in_flight.forget(position)
        if self._delayed is not None:
            self._delayed.discard_up_to(mark_delete)
        if self.read_position <= mark_delete:
            self.read_position = self.ledger.next_position(mark_delete)
        self._after_ack()
        self.wake()

    def redeliver_stuck_holes(self, threshold_s: float) -> int:
        """BR-4: entries still unacknowledged behind acknowledged ones after threshold_s go back
        to the replay set (to any consumer), so the mark-delete position can move on."""
        in_flight = self._in_flight
        if in_flight is None or not in_flight.pending:
            return 0
        acked = self.cursor.individually_acked.ranges()
        if not acked:
            return 0
        stuck = in_flight.stuck_behind(acked[-1][1], self.clock.monotonic_s(), threshold_s)
        for position in stuck:
            in_flight.take_back(position, count_redelivery=True)
        if stuck:
            self._counting().redelivered.add(len(stuck), 0)
            self.wake()
        return len(stuck)

    def redeliver(self, consumer: ServerConsumer, positions: list[Position] | None) -> None:
        """A consumer's nack: all its unacked entries (None) or the listed ones go to the replay set."""
        in_flight = self._flight()
        if positions is None:
            in_flight.take_back_all(consumer, count_redelivery=True)
        else:
            mine = [p for p in positions if in_flight.pending.get(p) is consumer]
            for position in mine:
                in_flight.take_back(position, count_redelivery=True)
            if mine:
                self._counting().redelivered.add(len(mine), 0)
        self.wake()

    def _after_ack(self) -> None:
        if self._sub_type != SubType.KEY_SHARED or self._selector is None:
            return
        first_unacked = self.ledger.next_position(self.cursor.mark_delete_position)
        if self._selector.release_joined(first_unacked) or (self._in_flight is not None and self._in_flight.replay):
            self.wake()

    @property
    def may_delay(self) -> bool:
        return self.delayed_delivery and self._sub_type in (SubType.SHARED, SubType.KEY_SHARED)

    def delayed_read(self, up_to: Position) -> tuple[Position, list[tuple[Position, Position]]] | None:
        """For TTL: the last position dispatch has read (it knows every delayed entry before it)
        and the delayed entries not yet due, as runs, from the first unacknowledged one to `up_to`
        or that position; None while dispatch has not read since the subscription was loaded."""
        if not self._delayed_restored:
            return None
        read_up_to = _positions.before(self.read_position)
        first = self.ledger.next_position(self.cursor.mark_delete_position)
        delayed = self._delayed
        pending = list(delayed.pending_runs(first, min(up_to, read_up_to))) if delayed else []
        return read_up_to, pending

    def _release_delayed(self, due: list[Position]) -> None:
        in_flight = self._flight()
        for position in due:
            in_flight.due_after_delay(position)
        self.wake()

    # ---- positions -------------------------------------------------------------------------------

    def seek(self, mark_delete: Position) -> None:
        """Seek / reset-cursor, as Pulsar does it: disconnect the consumers, then reset the cursor;
        the clients subscribe again and start from the new position with a fresh receiver queue."""
        self.resetting = True
        self.disconnect_consumers()
        self.reset(mark_delete)

    def reset(self, mark_delete: Position) -> None:
        """Everything after mark_delete is delivered again; in-flight reads are discarded."""
        self._epoch += 1
        self.cursor.reset(mark_delete)
        self.read_position = self.ledger.next_position(mark_delete)
        if self._in_flight is not None:
            self._in_flight.clear(list(self.consumers))
        if self._selector is not None:
            self._selector.forget_joins()
        self._chunk_owners = None
        if self._delayed is not None:
            self._delayed.clear()
        self.wake()

    async def seek_target(self, message_id: tuple[int, int] | None, publish_time_ms: int | None) -> Position:
        """The mark-delete position for a SEEK to a message id (earliest and latest included) or
        to a publish time."""
        if message_id is not None:
            return _positions.mark_delete_for_message_id(self.ledger, *message_id)
        if publish_time_ms is not None:
            return await _positions.mark_delete_for_publish_time(self.ledger, publish_time_ms)
        raise ValueError("a seek needs a message id or a publish time")

    async def last_message_id(self) -> tuple[Position, int]:
        """The newest message this subscription can get and its batch index (GET_LAST_MESSAGE_ID)."""
        return await _positions.last_message(self.ledger, self.compacted_view if self.read_compacted else None)

    # ---- figures ---------------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        return self.cursor.backlog

    @property
    def delayed_messages(self) -> int:
        return len(self._delayed) if self._delayed is not None else 0

    @property
    def unacked_messages(self) -> int:
        return sum(c.unacked_messages for c in self.consumers)

    # ---- dispatch --------------------------------------------------------------------------------

    def wake(self) -> None:
        """Something changed: the dispatch task runs a round (started if consumers are attached;
        without consumers there is nothing to dispatch)."""
        self._wake_pending = True
        waiter = self._waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)
        elif self._task is None and not self._closed and self.consumers:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatch:{self.name}")

    @property
    def dispatch_idle(self) -> bool:
        """The dispatcher has done all it can and waits for something to change (tests use it to
        check that nothing more is sent)."""
        return self._task is None or (self._waiter is not None and not self._wake_pending)

    async def close(self) -> None:
        self._closed = True
        task = self._task
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        delayed, self._delayed = self._delayed, None  # it points back here (its release callback)
        if delayed is not None:
            await delayed.close()

    async def _run(self) -> None:
        """The dispatch task: a round per wake-up, while consumers are attached."""
        loop = asyncio.get_running_loop()
        try:
            if not self._delayed_restored:
                await self._restore_delayed()
            while not self._closed:
                if not self._wake_pending:
                    if not self.consumers:
                        return  # wake() starts a new task when consumers come
                    self._waiter = loop.create_future()
                    try:
                        await self._waiter
                    finally:
                        self._waiter = None
                    continue
                self._wake_pending = False
                try:
                    await self._dispatch_round()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    # A failed read (corrupt entry, I/O error) must not kill dispatch for good.
                    log.exception("dispatch failed for subscription %s on %s", self.name, self.ledger.name)
                    await self.clock.sleep(dispatch_retry_s)
                    self._wake_pending = True
        finally:
            self._task = None

    async def _dispatch_round(self) -> None:
        while not self._closed:
            selector = self._selector
            if selector is None or selector.permits_available() <= 0:
                return
            epoch = self._epoch
            replay = self._in_flight.replay if self._in_flight is not None else set()
            if replay:
                positions = sorted(replay)[: self._read_size.count(read_entries_max)]
                entries = await _positions.read_at(self.ledger, positions)
                if epoch != self._epoch or self._selector is None:
                    continue
                # Undeliverable ones are put back by _deliver; positions gone from storage are dropped.
                replay.difference_update(positions)
                delivered = self._deliver(entries, replaying=True)
                if replay and self.sub_type != SubType.KEY_SHARED:
                    if not delivered:
                        return  # waiting for permits
                    continue
                if replay and delivered:
                    continue
                # Replay drained, or Key_Shared with blocked keys: new entries may still go to
                # consumers that have permits (their keys are not blocked).
            if len(replay) >= replay_entries_max:
                return
            count = self._read_size.count(min(max(selector.permits_available(), 1), read_entries_max))
            view = self.compacted_view if self.read_compacted else None
            if view is not None and self.read_position <= view.horizon:
                entries = await view.read_from(self.read_position, count)
                if epoch != self._epoch or self._selector is None:
                    continue
                if not entries:
                    self.read_position = self.ledger.next_position(view.horizon)
                    continue
            else:
                self.read_position = self._skip_known(self.read_position)
                last = self.ledger.last_confirmed
                if last is None or self.read_position > last:
                    return
                entries = await self.ledger.read_entries(self.read_position, count)
                if epoch != self._epoch or self._selector is None:
                    continue
                if not entries:
                    return
            self.read_position = self.ledger.next_position(entries[-1].position)
            self._deliver(entries, replaying=False)

    def _deliver(self, entries: list[Entry], replaying: bool) -> bool:
        selector = self._selector
        assert selector is not None, "the dispatch round checks for consumers after every read"
        now = self.clock.now_ms()
        monotonic_now = self.clock.monotonic_s()
        key_shared = self._sub_type == SubType.KEY_SHARED
        may_delay_type = self._sub_type in (SubType.SHARED, SubType.KEY_SHARED)
        may_delay = self.delayed_delivery and may_delay_type
        in_flight = self._flight()
        rates = self._counting()
        # A key with an entry waiting in the replay set must not be overtaken by a newer entry.
        blocked_keys: set[bytes] = set(in_flight.replay_keys.values()) if key_shared and not replaying else set()
        delivered = False
        mark_delete = self.cursor.mark_delete_position
        self._read_size.observed(entries)
        delayed = self._delayed if self._delayed else None
        for entry in entries:
            position = entry.position
            if position <= mark_delete or position in in_flight.pending or self.cursor.is_acked(position):
                in_flight.replay_keys.pop(position, None)
                continue
            if delayed is not None and position in delayed:
                continue  # a read that started before a run of pending delayed entries
            info = entry_info(entry.data)
            if may_delay and info.deliver_at_ms > now and position not in in_flight.redelivery_counts:
                self._delay(position, info.deliver_at_ms)
                continue
            if info.is_chunk and may_delay_type:
                owners = self._chunk_owners
                if owners is None:
                    owners = self._chunk_owners = ChunkOwners()
                consumer = owners.consumer_for(info, selector, position, info.sticky_key in blocked_keys)
            else:
                consumer = None if info.sticky_key in blocked_keys else selector.select(info.sticky_key, position)
            if consumer is None or consumer.permits <= 0 or not consumer.channel.writable:
                in_flight.replay.add(position)
                if key_shared:
                    in_flight.replay_keys[position] = info.sticky_key
                    blocked_keys.add(info.sticky_key)
                continue
            consumer.send_entry(
                position,
                entry.data,
                info.num_messages,
                in_flight.redelivery_counts.get(position, 0),
                self.cursor.batch_ack_set(position),
            )
            in_flight.sent(position, consumer, monotonic_now)
            rates.out.add(info.num_messages, len(entry.data))
            if info.is_chunk:
                rates.chunks_out.add(1, len(entry.data))
                consumer.chunks_out.add(1, len(entry.data))
            delivered = True
        return delivered

    def _skip_known(self, position: Position) -> Position:
        """Where the next read starts: past entries that would be read only to be dropped, the
        pending delayed ones (the index has them) and individually acknowledged ones (after a
        restart, normal messages acknowledged behind pending delayed ones), without I/O."""
        acked = self.cursor.individually_acked
        delayed = self._delayed
        next_position = self.ledger.next_position
        while True:
            start = position
            if delayed:
                position = delayed.skip(position, self.ledger)
            if acked:
                while position in acked:
                    position = next_position(position)
            if position == start:
                return position

    def _delay(self, position: Position, deliver_at_ms: int) -> None:
        delayed = self._delayed
        if delayed is None:
            delayed = self._delayed = self._new_tracker()
        delayed.add(position, deliver_at_ms)

    def _new_tracker(self) -> DelayedDeliveryTracker:
        store = DelayedIndexStore(self._storage, delayed_index_name(self.ledger.name, self.name))
        return DelayedDeliveryTracker(self.clock, self._release_delayed, store)

    async def _restore_delayed(self) -> None:
        """Before the first read: the stored delayed index, if this subscription has one, so the
        entries it holds are skipped, not read again (and released when due)."""
        self._delayed_restored = True
        may_delay = self.delayed_delivery and self._sub_type in (SubType.SHARED, SubType.KEY_SHARED)
        if self._storage is None or self._delayed is not None or not may_delay:
            return
        tracker = self._new_tracker()
        try:
            await tracker.load()
        except Exception:
            # Read from the topic instead: every pending entry is there, and is indexed again.
            log.exception("delayed index of %s on %s unreadable; rebuilding it", self.name, self.ledger.name)
            await tracker.close()
            return
        if len(tracker):
            self._delayed = tracker
        else:
            await tracker.close()


class _ReadSize:
    """How many entries one read from storage brings: what the permits ask for, but about
    read_bytes_max at most, by the average size of the entries read so far."""

    def __init__(self) -> None:
        self.entry_bytes_avg = 0.0

    def count(self, wanted: int) -> int:
        if self.entry_bytes_avg <= 0:
            return min(wanted, 8)  # nothing known yet: a small first read
        return max(1, min(wanted, int(read_bytes_max // self.entry_bytes_avg)))

    def observed(self, entries: list[Entry]) -> None:
        if entries:
            size = sum(len(e.data) for e in entries) / len(entries)
            self.entry_bytes_avg = size if self.entry_bytes_avg <= 0 else 0.8 * self.entry_bytes_avg + 0.2 * size
