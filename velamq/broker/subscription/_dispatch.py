"""A subscription's dispatch task: reads entries from the log and sends them to consumers.

One asyncio task per subscription owns dispatch. It wakes when something changes (new entries,
permits, consumers, redeliveries, acks that free a Key_Shared consumer), reads entries from the
managed ledger and hands each to the consumer the ConsumerSelector picks (_selector.py).

Redeliveries (nack, consumer gone, Key_Shared consumer without permits, delayed entries that are
due) go to the replay set and are sent before new entries, in position order, so a key never
overtakes itself. A seek bumps the epoch so a read that was in flight across the seek is thrown
away. Entries to be delivered later go to the delayed-delivery tracker (delayed/_tracker.py), made on the
first one and, for a durable subscription, restored from storage before the first read.
"""

from __future__ import annotations

import asyncio
import logging

from velamq import _limits
from velamq.broker._rates import SubscriptionRates, own
from velamq.broker.delayed._store import DelayedIndexStore, delayed_index_name
from velamq.broker.delayed._tracker import DelayedDeliveryTracker
from velamq.broker.log import _positions
from velamq.broker.log._entry_info import EntryInfo, entry_info
from velamq.broker.subscription._chunk_owners import ChunkOwners
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._end_of_topic import check_end_of_topic
from velamq.broker.subscription._selector import ConsumerSelector, SubType
from velamq.broker.subscription._state import SubscriptionState
from velamq.storage import Entry, Position

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


class Dispatcher(SubscriptionState):
    """A base of Subscription: owns the dispatch task (started by wake() while consumers are
    attached, gone when they leave), its read size, and the glue to the delayed-delivery tracker.
    It is the only code that reads entries for the subscription and sends them to consumers."""

    __slots__ = ()

    _read_size: ReadSize

    def wake(self) -> None:
        """Something changed: the dispatch task runs a round (started if consumers are attached;
        without consumers there is nothing to dispatch)."""
        self._wake_pending = True
        waiter = self._waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)
        elif self._task is None and not self._closed and self.consumers and not self._round_would_be_idle():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatch:{self.name}")

    def _round_would_be_idle(self) -> bool:
        """Whether a round now would return at once, having done nothing: then wake() starts no
        task (the next wake-up starts it). A created topic's subscription is woken by its first
        consumer and that consumer's first FLOW before anything is published (issue 22: a task,
        two steps and a future per topic saved). When in doubt it answers False."""
        if not self._delayed_restored:
            if self._may_have_stored_delayed_index():
                return False  # the task loads the stored delayed index first
            self._delayed_restored = True  # what _restore_delayed would do: nothing to load
        selector = self._selector
        if selector is None or selector.permits_available() <= 0:
            return True  # the round's first check
        if (self._in_flight is not None and self._in_flight.replay) or self.terminated:
            return False
        if self.read_compacted and self.compacted_view is not None:
            return False
        last = self.ledger.last_confirmed
        return last is None or self.read_position > last

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
                if replay and self._sub_type != SubType.KEY_SHARED:
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
                    if self.terminated and not self.durable:
                        check_end_of_topic(self)  # a reader read it all
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
            if info.marker_type:  # never delivered (Pulsar's isServerOnlyMarker): acked at once
                self.cursor.ack((position,))
                continue
            if may_delay and info.deliver_at_ms > now and position not in in_flight.redelivery_counts:
                self._delay(position, info.deliver_at_ms)
                continue
            if info.is_chunk and may_delay_type:
                consumer = self._chunk_consumer(info, selector, position, info.sticky_key in blocked_keys)
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
            consumer.last_consumed_ms = now
            rates.out.add(info.num_messages, len(entry.data))
            if info.is_chunk:
                _chunk_sent(rates, consumer, len(entry.data))
            delivered = True
        return delivered

    def _chunk_consumer(
        self, info: EntryInfo, selector: ConsumerSelector, position: Position, key_blocked: bool
    ) -> ServerConsumer | None:
        """The consumer a chunk of a Shared or Key_Shared subscription goes to: the one its
        message's first chunk went to (CH-7, _chunk_owners.py)."""
        owners = self._chunk_owners
        if owners is None:
            owners = self._chunk_owners = ChunkOwners()
        return owners.consumer_for(info, selector, position, key_blocked)

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

    def _may_have_stored_delayed_index(self) -> bool:
        """Whether _restore_delayed has an index to look for (one rule for it and wake())."""
        may_delay = self.delayed_delivery and self._sub_type in (SubType.SHARED, SubType.KEY_SHARED)
        return may_delay and self._storage is not None and self._delayed is None

    async def _restore_delayed(self) -> None:
        """Before the first read: the stored delayed index, if this subscription has one, so the
        entries it holds are skipped, not read again (and released when due)."""
        self._delayed_restored = True
        if not self._may_have_stored_delayed_index():
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

    # ---- delayed delivery ------------------------------------------------------------------------

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

    @property
    def delayed_messages(self) -> int:
        return len(self._delayed) if self._delayed is not None else 0


class ReadSize:
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


def _chunk_sent(rates: SubscriptionRates, consumer: ServerConsumer, size: int) -> None:
    """Count a chunk sent, for the subscription and for its consumer (whose counter is made on its
    first chunk, on the schedule of its `out`)."""
    rates.add_chunk(size)
    consumer.chunks_out = counter = own(consumer.chunks_out, consumer.out)
    counter.add(1, size)
