"""A subscription of a non-persistent topic: the consumers attached now, and nothing kept.

As Pulsar's NonPersistentSubscription and its three dispatchers: an entry published to the topic
goes at once to the consumer the subscription type picks, or nowhere:

    Exclusive / Failover   the active consumer (NonPersistentDispatcherSingleActiveConsumer)
    Shared                 the next consumer, round robin, that has a permit (...MultipleConsumers)
    Key_Shared             the consumer owning the key's hash range (...StickyKeyDispatcher...)

and the chosen consumer must have a permit and a connection that takes bytes now (under its
high-water mark and the broker's outbound bound). Otherwise the entry is dropped and its messages
counted in `drops` (Pulsar's msgDropRate): a consumer that stops reading costs the broker nothing
but the frames already queued for it, which the network budget bounds.

There is no cursor, no backlog, nothing in flight and nothing to redeliver. Acknowledgements are
accepted and ignored (the official client sends none on non-persistent topics), a seek changes
nothing, and a consumer that joins late gets only what is published from then on. Every message
goes out with the id Pulsar gives them all, (0, 0) plus the partition and batch index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from velamq._clock import Clock
from velamq.broker._errors import BrokerRequestError
from velamq.broker._rates import NO_RATE, RateCounter
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._selector import ConsumerSelector, SubType
from velamq.protocol import encode_payload_command, pb
from velamq.storage import Position

# The message id of every entry of a non-persistent topic (Pulsar's NonPersistentTopic builds each
# dispatched entry at ledger 0, entry 0, and its send receipts say the same).
NON_PERSISTENT_POSITION = Position(0, 0)

_NO_CONSUMERS: tuple[ServerConsumer, ...] = ()


class NonPersistentSubscription:
    """The consumers of one subscription of a non-persistent topic and the rule that picks the one
    an entry goes to (ConsumerSelector, as for persistent subscriptions). It holds no entry: what
    no consumer can take when it is published is dropped and counted. Lives on the broker loop."""

    __slots__ = (
        "_left",
        "_selector",
        "_sub_type",
        "allow_out_of_order",
        "clock",
        "drops",
        "durable",
        "name",
        "out",
        "partition_index",
        "read_compacted",
        "resetting",
        "topic_name",
    )

    def __init__(
        self,
        topic_name: str,
        name: str,
        sub_type: SubType,
        durable: bool,
        partition_index: int,
        clock: Clock,
        left: Callable[[NonPersistentSubscription], None],
    ) -> None:
        """`left` is told when the last consumer has left (the topic then drops a non-durable
        subscription, a reader's, as Pulsar does)."""
        self.topic_name = topic_name
        self.name = name
        self.durable = durable
        self.partition_index = partition_index
        self.clock = clock
        self._sub_type = sub_type
        self._selector: ConsumerSelector | None = None  # while consumers are attached
        self._left = left
        self.drops: RateCounter = NO_RATE  # messages dropped (msgDropRate); made on first drop
        self.out: RateCounter = NO_RATE  # messages dispatched; made on first dispatch
        self.read_compacted = False
        # Key_Shared's allowOutOfOrderDelivery: kept as asked; nothing is held back here anyway
        # (a joining consumer gets only what is published from then on).
        self.allow_out_of_order = False
        self.resetting = False

    # ---- consumers -------------------------------------------------------------------------------

    @property
    def consumers(self) -> Sequence[ServerConsumer]:
        return self._selector.consumers if self._selector is not None else _NO_CONSUMERS

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
        """Raises HashRangeOverlapError for bad sticky ranges; the caller checks type rules. A
        Key_Shared consumer gets its keys at once: nothing is out that it could overtake."""
        selector = self._selector
        if selector is None:
            selector = ConsumerSelector(self._sub_type, self.partition_index)
        selector.add(consumer, sticky_ranges, None)
        self._selector = selector

    def remove_consumer(self, consumer: ServerConsumer) -> None:
        selector = self._selector
        if selector is None or consumer not in selector.consumers:
            return
        selector.remove(consumer)
        if not selector.consumers:
            self._selector = None
            self._left(self)

    def disconnect_consumers(self) -> None:
        """Close every consumer from the broker's side; clients subscribe again."""
        for consumer in list(self.consumers):
            self.remove_consumer(consumer)
            consumer.close_by_broker()

    def is_active(self, consumer: ServerConsumer) -> bool:
        return self._selector is not None and self._selector.is_active(consumer)

    # ---- dispatch --------------------------------------------------------------------------------

    def dispatch(self, entry: bytes, num_messages: int, sticky_key: bytes) -> None:
        """Send an entry just published to the consumer that may take it now, or drop it."""
        selector = self._selector
        consumer = None if selector is None else selector.select(sticky_key, NON_PERSISTENT_POSITION)
        if consumer is None or consumer.permits <= 0 or not consumer.channel.writable:
            self._dropped(num_messages)
            return
        command = pb.BaseCommand(type=pb.BaseCommand.MESSAGE)
        message = command.message
        message.consumer_id = consumer.consumer_id
        message.message_id.ledgerId = 0
        message.message_id.entryId = 0
        if consumer.partition_index >= 0:
            message.message_id.partition = consumer.partition_index
        consumer.channel.write(encode_payload_command(command, entry))
        consumer.permits -= num_messages
        consumer.out.add(num_messages, len(entry))
        out = self.out
        if out is NO_RATE:
            out = self.out = RateCounter.since(self.clock.monotonic_s())
        out.add(num_messages, len(entry))

    def _dropped(self, num_messages: int) -> None:
        drops = self.drops
        if drops is NO_RATE:
            drops = self.drops = RateCounter.since(self.clock.monotonic_s())
        drops.add(num_messages, 0)

    def flow(self, consumer: ServerConsumer, permits: int) -> None:
        consumer.permits += permits

    def wake(self) -> None:
        """Nothing waits to be dispatched: entries go out when they are published."""

    # ---- what a persistent subscription does and this one does not --------------------------------

    def acknowledge(self, acks: list[tuple[Position, list[int] | None]]) -> None:
        """Ignored, as Pulsar ignores them: nothing is kept that an ack could release."""

    def acknowledge_cumulative(self, position: Position, ack_set: list[int] | None) -> None:
        """Ignored (see acknowledge)."""

    def redeliver(self, consumer: ServerConsumer, positions: list[Position] | None) -> None:
        """Nothing to send again: what was sent is not kept."""

    async def seek_target(self, message_id: tuple[int, int] | None, publish_time_ms: int | None) -> Position:
        return NON_PERSISTENT_POSITION

    def seek(self, mark_delete: Position) -> None:
        """A no-op, as Pulsar's resetCursor on a non-persistent subscription: there is no log."""

    async def last_message_id(self) -> tuple[Position, int]:
        raise BrokerRequestError(pb.NotAllowedError, "getLastMessageId is not supported on non-persistent topic")

    @property
    def mark_delete_position(self) -> Position:
        return NON_PERSISTENT_POSITION

    # ---- figures ---------------------------------------------------------------------------------

    @property
    def backlog(self) -> int:
        return 0

    @property
    def unacked_messages(self) -> int:
        return 0

    @property
    def idle(self) -> bool:
        return not self.consumers

    def sample_rates(self, now_s: float) -> None:
        for counter in (self.out, self.drops):
            if counter is not NO_RATE:
                counter.sample(now_s)
        for consumer in self.consumers:
            consumer.out.sample(now_s)
