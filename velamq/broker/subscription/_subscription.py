"""A subscription: a cursor over the topic's log plus the consumers that read through it.

The subscription is made of three parts over one state (_state.py): this module has
the consumers, the positions (seek, reset) and the figures; _dispatch.py the dispatch task that
reads entries and sends them to consumers (and the delayed-delivery glue); _acks.py the
acknowledgements and redeliveries.

A subscription without consumers is small (most subscriptions of a million topics are): its
dispatch task, consumer selector, in-flight bookkeeping, delayed-delivery tracker and rate counters
exist only while they have something to do. When the last consumer leaves, the entries it had out
are not kept in a replay set: the read position goes back to the first unacknowledged entry, so
the next consumer reads them again from the log, in order (unless some of them carry a
redelivery count, which only the in-flight bookkeeping remembers).
"""

from __future__ import annotations

from velamq._clock import Clock
from velamq.broker._rates import NO_RATE, RateCounter
from velamq.broker.log import _positions
from velamq.broker.subscription._acks import Acknowledgements
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._dispatch import Dispatcher, ReadSize
from velamq.broker.subscription._end_of_topic import check_end_of_topic
from velamq.broker.subscription._selector import ConsumerSelector, SubType
from velamq.storage import LedgerStore, ManagedCursor, ManagedLedger, Position


class Subscription(Dispatcher, Acknowledgements):
    """A named cursor over a topic's log and the consumers reading through it. It owns what is in
    flight (_in_flight.py): which entry is out at which consumer, which must go again and how
    often each went; acknowledgements (_acks.py) move the cursor, a seek resets everything. Its own
    dispatch task (_dispatch.py) is the only code that reads entries for it and sends them to
    consumers."""

    __slots__ = ()  # declared by SubscriptionState

    def __init__(
        self,
        name: str,
        ledger: ManagedLedger,
        cursor: ManagedCursor,
        sub_type: SubType,
        durable: bool,
        partition_index: int,
        clock: Clock,
        storage: LedgerStore | None = None,
    ) -> None:
        """`storage` keeps the delayed-delivery index of a durable subscription (delayed/_store.py);
        without it the index lives in memory."""
        self.name = name
        self.ledger = ledger
        self.cursor = cursor
        self.durable = durable
        self.clock = clock
        self._sub_type = sub_type
        self._partition_index = partition_index
        self._selector = None  # while consumers are attached
        self.read_position = ledger.next_position(cursor.mark_delete_position)
        self._in_flight = None  # while something is out or waits for redelivery
        self.delayed_delivery = True  # topic policy; off: deliver_at_time is ignored
        self._delayed = None  # while delayed entries wait
        # CH-7: which consumer each chunked message under way belongs to (_chunk_owners.py).
        self._chunk_owners = None
        self._storage = storage if durable else None
        self._delayed_restored = False  # the stored index was looked for (first dispatch)
        # read_compacted subscriptions read the compacted view up to its horizon (set by the topic).
        self.read_compacted = False
        self.compacted_view = None
        self._epoch = 0
        self._read_size = ReadSize()
        self._wake_pending = False
        self._waiter = None  # the dispatch task waits for a wake-up
        self._task = None  # the dispatch task, while consumers are attached
        self._closed = False
        self._rates = None
        # Set while consumers are closed by a seek: a non-durable subscription must survive it.
        self.resetting = False
        # Key_Shared allowOutOfOrderDelivery, as its first consumer asked: a consumer that joins
        # gets its keys at once instead of waiting for the entries out before it joined.
        self.allow_out_of_order = False
        # Its topic is terminated: consumers hear of the end once it is all consumed (_terminate.py).
        self.terminated = False

    # ---- counters (made on first use) --------------------------------------------------------

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
            self._counting().add_expired(entries)

    def sample_rates(self, now_s: float) -> None:
        if self._rates is not None:
            self._rates.sample(now_s)
        for consumer in self.consumers:
            consumer.out.sample(now_s)
            consumer.redelivered.sample(now_s)
            if consumer.chunks_out is not NO_RATE:  # made on its first chunk
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

    def add_consumer(self, consumer: ServerConsumer, sticky_ranges: list[tuple[int, int]] | None = None) -> None:
        """Raises HashRangeOverlapError for bad sticky ranges; the caller checks type rules."""
        joined_at = None
        if (
            self.consumers
            and not self.allow_out_of_order
            and self.ledger.next_position(self.cursor.mark_delete_position) < self.read_position
        ):
            joined_at = self.read_position  # entries are out: keys moving to it must wait for them
        selector = self._selector
        if selector is None:
            selector = ConsumerSelector(self._sub_type, self._partition_index)
        demoted = selector.add(consumer, sticky_ranges, joined_at)
        self._selector = selector
        # Its first rate covers the time since it joined (a nack before the first sample counts).
        consumer.redelivered = RateCounter.since(self.clock.monotonic_s())
        if demoted is not None:
            self._flight().take_back_all(demoted, count_redelivery=False)
        self.wake()
        if self.terminated:
            check_end_of_topic(self)

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

    def joined_at(self, consumer: ServerConsumer) -> Position | None:
        """Key_Shared: the read position when the consumer joined, while it waits for what was
        out before (stats' readPositionWhenJoining)."""
        return self._selector.joined_at(consumer) if self._selector is not None else None

    @property
    def idle(self) -> bool:
        """No consumer, nothing waiting for delivery, no read in progress: the topic may unload."""
        return not self.consumers and not self._delayed and self._task is None

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
    def topic_name(self) -> str:
        return self.ledger.name

    @property
    def mark_delete_position(self) -> Position:
        return self.cursor.mark_delete_position

    @property
    def backlog(self) -> int:
        return self.cursor.backlog

    @property
    def unacked_messages(self) -> int:
        return sum(c.unacked_messages for c in self.consumers)
