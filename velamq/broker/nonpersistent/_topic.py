"""A loaded non-persistent topic: producers and subscriptions, and no managed ledger.

Pulsar's NonPersistentTopic: a SEND is answered at once (its receipt says (0, 0), as Pulsar's do)
and the entry goes to every subscription of the topic in the same call, each handing it to the
consumer that can take it now or dropping it (_subscription.py). Nothing is written anywhere:
no journal, no entry log, no cursor, no deduplication state, no schema of its own (the registry
keeps a topic's schema by its name, shared with the persistent topic of that name). What a
non-persistent topic holds in memory is its producers and subscriptions; the frames on their way
to consumers are the connections', bounded by the network's share of the memory budget.

It speaks the same interface to the command handlers as the persistent Topic (producers, access
modes, policies, subscriptions, publish_with), so PRODUCER, SEND, SUBSCRIBE, FLOW and the rest
work unchanged; what has no meaning without a log (a reader's start position, read_compacted,
backlog quotas, deduplication) is simply absent here.
"""

from __future__ import annotations

from velamq._clock import Clock
from velamq._topic_name import TopicName
from velamq.broker._rates import NO_RATE, RateCounter
from velamq.broker.log._entry_info import NONE_KEY, entry_info
from velamq.broker.nonpersistent._subscription import NON_PERSISTENT_POSITION, NonPersistentSubscription
from velamq.broker.subscription._selector import SubType
from velamq.broker.topic._dedup import Deduplication
from velamq.broker.topic._producer import ProducerAccess, ProducerHost, ServerProducer
from velamq.broker.topic._publish import Published
from velamq.metadata import Policies
from velamq.storage import Position


class NonPersistentTopic(ProducerHost):
    """One loaded non-persistent topic. Everything here runs on the broker loop."""

    __slots__ = (
        "_access",
        "chunks_published",
        "clock",
        "closed",
        "entries_added",
        "full_name",
        "last_used_s",
        "name",
        "partition_index",
        "policies",
        "producers",
        "rate_in",
        "subscriptions",
    )

    def __init__(self, name: TopicName, clock: Clock) -> None:
        self.name = name
        self.full_name = str(name)
        self.clock = clock
        self.partition_index = name.partition_index
        self.producers: dict[str, ServerProducer] = {}
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.policies = Policies()
        self.rate_in: RateCounter = NO_RATE  # made on the first publish
        self.entries_added = 0
        self.chunks_published = 0
        self.closed = False
        self._access: ProducerAccess | None = None  # made by the first exclusive producer
        self.last_used_s = clock.monotonic_s()

    # ---- what the persistent Topic has and this one never has -------------------------------------

    @property
    def dedup(self) -> Deduplication | None:
        """Never: Pulsar keeps no deduplication state for non-persistent topics."""
        return None

    @property
    def backlog_quota_exceeded(self) -> str | None:
        """Never: a non-persistent topic has no backlog."""
        return None

    @property
    def has_entries(self) -> bool:
        """Entries went through it (Pulsar's entriesAddedCounter, the schema rules' test of a
        topic in use); none of them was stored."""
        return self.entries_added > 0

    async def apply_policies(self, policies: Policies) -> None:
        self.policies = policies

    # ---- producers -------------------------------------------------------------------------------


    # ---- publishing ------------------------------------------------------------------------------

    def publish_with(
        self,
        producer: ServerProducer,
        entry: bytes,
        num_messages: int,
        sequence_id: int,
        highest_sequence_id: int,
        dedup_checked: bool,
        published: Published,
    ) -> None:
        """Hand the entry to every subscription now, then answer the producer: nothing waits for
        storage, so the receipt goes out in this call (at (0, 0), as Pulsar's)."""
        size = len(entry)
        producer.rate_in.add(num_messages, size)
        rate_in = self.rate_in
        if rate_in is NO_RATE:
            rate_in = self.rate_in = RateCounter.since(self.clock.monotonic_s())
        rate_in.add(num_messages, size)
        self.entries_added += 1
        subscriptions = self.subscriptions
        if subscriptions:
            key = NONE_KEY
            if any(s.sub_type == SubType.KEY_SHARED and s.consumers for s in subscriptions.values()):
                key = entry_info(entry).sticky_key
            for subscription in list(subscriptions.values()):
                subscription.dispatch(entry, num_messages, key)
        published.durable(NON_PERSISTENT_POSITION)

    # ---- subscriptions ---------------------------------------------------------------------------

    async def subscription(
        self,
        name: str,
        sub_type: SubType,
        durable: bool,
        initial_earliest: bool,
        start: Position | None,
    ) -> NonPersistentSubscription:
        """The named subscription, created if needed. Where it starts does not matter: it gets
        what is published while its consumers are connected, whatever they asked for."""
        existing = self.subscriptions.get(name)
        if existing is not None:
            return existing
        subscription = NonPersistentSubscription(
            self.full_name, name, sub_type, durable, self.partition_index, self.clock, self._consumers_left
        )
        self.subscriptions[name] = subscription
        return subscription

    def _consumers_left(self, subscription: NonPersistentSubscription) -> None:
        """The last consumer of a subscription left: that counts as a use of the topic (its idle
        time starts now), and a non-durable subscription goes with its consumer, as in Pulsar."""
        self.last_used_s = self.clock.monotonic_s()
        gone = not subscription.durable and not subscription.resetting
        if gone and self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]

    async def remove_subscription(self, name: str, delete_cursor: bool) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            subscription.disconnect_consumers()
        self.last_used_s = self.clock.monotonic_s()

    # ---- figures and lifecycle -------------------------------------------------------------------

    @property
    def in_use(self) -> bool:
        return bool(self.producers) or any(s.consumers for s in self.subscriptions.values())

    @property
    def idle(self) -> bool:
        """No producer (nor one waiting for exclusive access) and no consumer: the broker may drop
        the topic, and its subscriptions with it (there is nothing else to lose)."""
        if self._access is not None and self._access.waiting:
            return False
        return not self.in_use

    def sample_rates(self, now_s: float) -> None:
        if self.rate_in is not NO_RATE:
            self.rate_in.sample(now_s)
        for producer in self.producers.values():
            producer.rate_in.sample(now_s)
            producer.chunks_in.sample(now_s)
        for subscription in self.subscriptions.values():
            subscription.sample_rates(now_s)

    def disconnect_clients(self) -> None:
        """Close every producer and consumer from the broker's side (delete, unload)."""
        for producer in list(self.producers.values()):
            producer.close_by_broker()
        for subscription in list(self.subscriptions.values()):
            subscription.disconnect_consumers()

    async def close(self) -> None:
        """Closed for good (unloaded, deleted, the broker stopping): its clients are told."""
        self.closed = True
        self.disconnect_clients()
        self.subscriptions.clear()
