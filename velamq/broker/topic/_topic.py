"""A loaded topic: its managed ledger, producers and subscriptions. Lives on the broker loop.

Publish path: SEND → ProducerCommands.on_send → Topic.publish_with → ManagedLedger.append_with (durable
under the sync policy) → a wake-up of every subscription's dispatcher and the receipt, both from
the entry's Published (_publish.py). Positions are assigned in call order, so receipts for one
producer go out in the order its sends arrived.

A loaded topic that nobody uses is small: `__slots__`, a rate counter, locks and events made on
first use, policies shared with the other topics of its namespace, and subscriptions that keep
nothing but their cursor while they have no consumer. `idle` says whether the broker may unload
it (docs/architecture.md, "Topic lifecycle").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq._topic_name import TopicName
from velamq.broker._errors import BrokerRequestError
from velamq.broker._rates import NO_RATE, RateCounter
from velamq.broker.delayed._store import delayed_index_name
from velamq.broker.log._compaction import CompactedView, CompactionStatus, compact
from velamq.broker.log._positions import end_of_log
from velamq.broker.subscription._selector import SubType
from velamq.broker.subscription._subscription import Subscription
from velamq.broker.topic._backlog_quota import check_quota_on_publish, quota_exceeded
from velamq.broker.topic._dedup import DUPLICATE_POSITION, Deduplication
from velamq.broker.topic._producer import ProducerAccess, ProducerHost, ServerProducer
from velamq.broker.topic._publish import Published, PublishedFuture
from velamq.metadata import Policies
from velamq.protocol import pb
from velamq.storage import LedgerStore, ManagedCursor, ManagedLedger, Position

log = logging.getLogger(__name__)

_NO_NAMES: frozenset[str] = frozenset()

# Names of geo-replicators' cursors (pulsar.repl.<remote>) and producers (pulsar.repl.<from>--><to>).
REPLICATOR_PREFIX = "pulsar.repl."


_NOT_RUN = CompactionStatus()


class _NonDurableOwner:
    """A cursor owner that forwards to the ledger but never persists: the cursors of readers."""

    __slots__ = ("_ledger",)

    def __init__(self, ledger: ManagedLedger) -> None:
        self._ledger = ledger

    @property
    def last_confirmed(self) -> Position | None:
        return self._ledger.last_confirmed

    def next_position(self, pos: Position) -> Position:
        return self._ledger.next_position(pos)

    def count_entries(self, after: Position, up_to: Position) -> int:
        return self._ledger.count_entries(after, up_to)

    def entry_exists(self, pos: Position) -> bool:
        return bool(self._ledger.entry_exists(pos))

    def cursor_changed(self, cursor: ManagedCursor) -> None:
        pass


class Topic(ProducerHost):
    """One loaded topic: its managed ledger, the producers publishing to it and the subscriptions
    reading it, plus the topic-wide state policies need (deduplication, backlog quota, producer
    access mode and epoch, compacted view). It is the only writer of its ledger; everything here
    runs on the broker loop."""

    __slots__ = (
        "_access",
        "_compaction_task",
        "_creating",
        "chunks_published",
        "clock",
        "closed",
        "compacted",
        "compaction",
        "dedup",
        "entry_watchers",
        "full_name",
        "idle_queued",
        "last_used_s",
        "ledger",
        "name",
        "partition_index",
        "policies",
        "producers",
        "quota_age_exceeded",
        "rate_in",
        "replicated_subscriptions",
        "storage",
        "subscriptions",
        "terminated_at",
        "terminating",
    )

    def __init__(self, name: TopicName, ledger: ManagedLedger, clock: Clock) -> None:
        self.name = name
        self.full_name = str(name)
        self.ledger = ledger
        self.clock = clock
        self.partition_index = name.partition_index
        self.producers: dict[str, ServerProducer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        # Where durable subscriptions store their delayed-delivery index (the broker sets it).
        self.storage: LedgerStore | None = None
        self.rate_in: RateCounter = NO_RATE  # its own counter from the first publish on
        self.chunks_published = 0
        self.closed = False
        self.dedup: Deduplication | None = None
        self.policies = Policies()
        self.compacted: CompactedView | None = None
        self.compaction = _NOT_RUN
        self._compaction_task: asyncio.Task[None] | None = None
        # The last policy check found the oldest unacknowledged message older than the quota's
        # age limit (an age needs a read; the size is known at any time: backlog_quota_exceeded).
        self.quota_age_exceeded = False
        # Producer access modes and the topic epoch: made by the first exclusive producer.
        self._access: ProducerAccess | None = None
        # Subscriptions being created (their cursors journaled): a second SUBSCRIBE of the same
        # name waits for the first. None while there is none (most of a topic's life).
        self._creating: dict[str, asyncio.Future[None]] | None = None
        # The broker's clock when this topic was last looked up, and whether the broker's idle
        # check holds an entry for it (docs/architecture.md, "Topic lifecycle").
        self.last_used_s = clock.monotonic_s()
        self.idle_queued = False
        # Terminated (_terminate.py): producers are refused from `terminating` on; `terminated_at`
        # is the position of its last entry once it is recorded.
        self.terminating = False
        self.terminated_at: Position | None = None
        # Called after each durable append and when the topic closes: the geo-replicators' wake-ups
        # (velamq.replication). A topic with any is never idle, as a replicated topic in Pulsar.
        self.entry_watchers: tuple[Callable[[], None], ...] = ()
        # Subscriptions whose consumers asked for replicate_subscription_state: their position is
        # mirrored to the other clusters (velamq.replication). Shared empty set until one asks.
        self.replicated_subscriptions: frozenset[str] = _NO_NAMES

    # ---- producers -------------------------------------------------------------------------------

    async def admit_producer(
        self, producer: ServerProducer, request_epoch: int | None, on_queued: Callable[[], None]
    ) -> None:
        """ProducerHost's access modes; a terminated topic admits nobody (TopicTerminatedError,
        _terminate.py), also a WaitForExclusive producer whose wait ended after the termination."""
        self._check_not_terminated()
        await super().admit_producer(producer, request_epoch, on_queued)
        if self.terminating:  # terminated while it waited its turn
            self.not_registered(producer.name)
            self._check_not_terminated()

    def _check_not_terminated(self) -> None:
        if self.terminating:  # as Pulsar's AbstractTopic.addProducer (TopicTerminatedException)
            raise BrokerRequestError(pb.TopicTerminatedError, f"Topic {self.full_name} was already terminated")

    # ---- backlog quota (BR-3) --------------------------------------------------------------------

    @property
    def backlog_quota_exceeded(self) -> str | None:
        """The producer policy in force when the backlog quota is exceeded now, else None
        (_backlog_quota.py)."""
        return quota_exceeded(self)

    def after_durable(self) -> None:
        """An entry of this topic is durable and its receipt on its way (_publish.py): with a size
        quota, check it now, after the receipt, so the producer hears of the entry first."""
        quota = self.policies.backlog_quota
        if quota is None or quota.limit_bytes < 0 or quota.policy == "consumer_backlog_eviction":
            return
        if self.producers:
            asyncio.get_running_loop().call_soon(check_quota_on_publish, self)

    async def apply_policies(self, policies: Policies) -> None:
        self.policies = policies
        for subscription in self.subscriptions.values():
            subscription.delayed_delivery = policies.delayed_delivery
        await self.refresh_dedup(policies.deduplication)

    async def refresh_dedup(self, enabled: bool) -> None:
        if not enabled:
            self.dedup = None
        elif self.dedup is None:
            dedup = Deduplication()
            await dedup.recover(self.ledger)
            if self.dedup is None:
                self.dedup = dedup

    def publish(self, producer: ServerProducer, entry: bytes, num_messages: int, sequence_id: int,
                highest_sequence_id: int, dedup_checked: bool) -> asyncio.Future[Position]:
        """`publish_with` answering with a future: the entry's position once durable."""
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.publish_with(
            producer, entry, num_messages, sequence_id, highest_sequence_id, dedup_checked, PublishedFuture(future)
        )
        return future

    def append_marker(self, entry: bytes) -> asyncio.Future[Position]:
        """Append a marker the broker made (replicated subscriptions): the position once durable."""
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self.append_marker_with(entry, PublishedFuture(future))
        return future

    def append_marker_with(self, entry: bytes, published: Published) -> None:
        """Append a marker (made here, or replicated from another cluster): no deduplication, not
        counted as a message in (replicated subscriptions snapshot only after data came in, as
        Pulsar's last data publish time), never delivered to consumers."""
        published.appended_to(self, None, "", -1)
        try:
            self.ledger.append_with(entry, published)
        except (StorageError, ValueError) as exc:
            published.set_exception(exc)

    def replicate_subscription(self, name: str) -> None:
        if name not in self.replicated_subscriptions:
            self.replicated_subscriptions = self.replicated_subscriptions | {name}

    def publish_with(
        self,
        producer: ServerProducer,
        entry: bytes,
        num_messages: int,
        sequence_id: int,
        highest_sequence_id: int,
        dedup_checked: bool,
        published: Published,
        dedup_name: str | None = None,
    ) -> None:
        """Append an entry; `published` learns the outcome (_publish.py). With deduplication on, a
        duplicate is answered with (-1, -1) on the next loop turn, and nothing is stored.
        `dedup_checked` is False for all chunks of a chunked message but the last; `dedup_name`
        replaces the producer's name as the deduplication key (a geo-replicator's messages)."""
        dedup = self.dedup
        if dedup is not None and dedup_checked:
            name = producer.name if dedup_name is None else dedup_name
            if dedup.is_duplicate(name, sequence_id, highest_sequence_id):
                asyncio.get_running_loop().call_soon(published.durable, DUPLICATE_POSITION)
                return
            published.appended_to(self, dedup, name, max(sequence_id, highest_sequence_id))
        else:
            published.appended_to(self, None, "", -1)
        try:
            self.ledger.append_with(entry, published)
        except (StorageError, ValueError) as exc:
            published.set_exception(exc)  # the same path as a failed write: SEND_ERROR
        # RateCounter.add inlined: twice per unbatched entry.
        size = len(entry)
        rate_in = producer.rate_in
        rate_in.messages_total += num_messages
        rate_in.bytes_total += size
        rate_in = self.rate_in
        if rate_in is NO_RATE:
            rate_in = self.rate_in = RateCounter.since(self.clock.monotonic_s())
        rate_in.messages_total += num_messages
        rate_in.bytes_total += size

    # ---- subscriptions ---------------------------------------------------------------------------

    async def subscription(
        self,
        name: str,
        sub_type: SubType,
        durable: bool,
        initial_earliest: bool,
        start: Position | None,
    ) -> Subscription:
        """The named subscription, created if needed. `start` is the non-durable start mark-delete."""
        while True:
            existing = self.subscriptions.get(name)
            if existing is not None:
                return existing
            pending = self._creating.get(name) if self._creating is not None else None
            if pending is None:
                break
            await asyncio.shield(pending)  # always resolves with None, whatever became of the creation
        if self._creating is None:
            self._creating = {}
        created = self._creating[name] = asyncio.get_running_loop().create_future()
        try:
            if durable:
                cursor = await self.ledger.open_cursor(name, "earliest" if initial_earliest else "latest")
            else:
                mark_delete = start if start is not None else end_of_log(self.ledger)
                cursor = ManagedCursor(name, _NonDurableOwner(self.ledger), mark_delete)
            subscription = Subscription(
                name, self.ledger, cursor, sub_type, durable, self.partition_index, self.clock, self.storage
            )
            subscription.delayed_delivery = self.policies.delayed_delivery
            subscription.compacted_view = self.compacted
            subscription.terminated = self.terminated_at is not None
            self.subscriptions[name] = subscription
            return subscription
        finally:
            del self._creating[name]
            if not self._creating:
                self._creating = None
            created.set_result(None)

    def set_compacted_view(self, view: CompactedView | None) -> None:
        self.compacted = view
        for subscription in self.subscriptions.values():
            subscription.compacted_view = view
            subscription.wake()

    def trigger_compaction(self, storage: LedgerStore) -> None:
        if self._compaction_task is not None and not self._compaction_task.done():
            return
        self.compaction = CompactionStatus("RUNNING")
        self._compaction_task = asyncio.get_running_loop().create_task(self._compact(storage))

    async def _compact(self, storage: LedgerStore) -> None:
        try:
            # Readers fall back to the live log while the store is rebuilt under the same name.
            self.set_compacted_view(None)
            view = await compact(storage, self.ledger)
            self.set_compacted_view(view)
            self.compaction = CompactionStatus("SUCCESS")
        except Exception as exc:
            log.exception("compaction of %s failed", self.full_name)
            self.compaction = CompactionStatus("ERROR", str(exc))

    async def remove_subscription(self, name: str, delete_cursor: bool) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            await subscription.close()
        if delete_cursor and name in self.ledger.cursors:
            await self.ledger.delete_cursor(name)
        if delete_cursor and self.storage is not None:
            await self.storage.delete_ledger(delayed_index_name(self.full_name, name))

    # ---- figures and lifecycle -------------------------------------------------------------------

    @property
    def has_entries(self) -> bool:
        return self.ledger.entries_total > 0

    @property
    def in_use(self) -> bool:
        return bool(self.producers) or any(s.consumers for s in self.subscriptions.values())

    @property
    def idle(self) -> bool:
        """Nobody uses it and it has no work pending: no producer (or one waiting to be admitted),
        no consumer, no dispatch running, no delayed entry waiting, no compaction, no append in
        flight. Only an idle topic may be unloaded."""
        if self.producers or (self._access is not None and self._access.waiting) or self.ledger.pending_appends:
            return False
        if self._compaction_task is not None and not self._compaction_task.done():
            return False
        if self._creating:
            return False
        if self.entry_watchers:
            return False
        return all(s.idle for s in self.subscriptions.values())

    def disconnect_clients(self) -> None:
        """Close every producer and consumer from the broker's side (delete, unload)."""
        for producer in list(self.producers.values()):
            producer.close_by_broker()
        for subscription in self.subscriptions.values():
            subscription.disconnect_consumers()

    def cursors(self, replicators: bool = False) -> list[tuple[str, ManagedCursor, Subscription | None]]:
        """Every subscription as (name, cursor, live subscription or None): the durable cursors
        (with or without consumers), then the non-durable subscriptions of readers. The cursors of
        geo-replicators are not subscriptions (Pulsar's stats do not list them) unless asked for."""
        found = [(name, cursor, self.subscriptions.get(name)) for name, cursor in self.ledger.cursors.items()
                 if replicators or not name.startswith(REPLICATOR_PREFIX)]
        found += [(name, s.cursor, s) for name, s in self.subscriptions.items() if name not in self.ledger.cursors]
        return found

    async def close(self) -> None:
        self.closed = True
        for watch in self.entry_watchers:
            watch()
        if self._compaction_task is not None and not self._compaction_task.done():
            self._compaction_task.cancel()
        if self.compacted is not None:
            await self.compacted.store.close()
        for subscription in list(self.subscriptions.values()):
            await subscription.close()
        self.subscriptions.clear()
