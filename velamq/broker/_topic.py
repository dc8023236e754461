"""A loaded topic: its managed ledger, producers and subscriptions. Lives on the broker loop.

Publish path: SEND → Topic.publish → ManagedLedger.append (durable under the sync policy) →
receipt and a wake-up of every subscription's dispatcher. Positions are assigned in call order,
so receipts for one producer go out in the order its sends arrived.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq._topic_name import TopicName
from velamq.broker._compaction import CompactedView, CompactionStatus, compact
from velamq.broker._dedup import DUPLICATE_POSITION, Deduplication
from velamq.broker._errors import BrokerRequestError
from velamq.broker._rates import RateCounter
from velamq.broker._stats import SubscriptionMetrics, TopicMetrics
from velamq.broker._subscription import Subscription, SubType
from velamq.metadata import Policies
from velamq.protocol import pb
from velamq.storage import ManagedCursor, ManagedLedger, Position, Storage

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class Producer:
    connection: Any  # the ServerConnection; typed loosely to keep this module free of it
    producer_id: int
    name: str
    topic: Topic
    epoch: int
    access_mode: int
    rate_in: RateCounter = field(default_factory=RateCounter)
    chunks_in: RateCounter = field(default_factory=RateCounter)
    connected_since_ms: int = 0

    def close_by_broker(self) -> None:
        """Detach from the connection and tell the client; it reconnects (or learns it is fenced)."""
        self.topic.remove_producer(self)
        self.connection.forget_producer(self)
        command = pb.BaseCommand(type=pb.BaseCommand.CLOSE_PRODUCER)
        command.close_producer.producer_id = self.producer_id
        command.close_producer.request_id = (1 << 64) - 1
        self.connection.send_command(command)


class Topic:
    def __init__(self, name: TopicName, ledger: ManagedLedger, clock: Clock) -> None:
        self.name = name
        self.full_name = str(name)
        self.ledger = ledger
        self.clock = clock
        self.partition_index = name.partition_index
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.rate_in = RateCounter()
        self.chunks_published = 0
        self.closed = False
        self.dedup: Deduplication | None = None
        self.policies = Policies()
        self.compacted: CompactedView | None = None
        self.compaction = CompactionStatus()
        self._compaction_task: asyncio.Task[None] | None = None
        # The backlog quota policy in force while the quota is exceeded (producers refused).
        self.backlog_quota_exceeded: str | None = None
        # Producer access modes: the epoch moves each time an exclusive producer takes the topic;
        # a producer reconnecting with an older epoch has been fenced.
        self.topic_epoch = 0
        self.exclusive_producer: str | None = None
        self._producers_changed = asyncio.Event()
        self._subscribe_lock = asyncio.Lock()

    # ---- producers -------------------------------------------------------------------------------

    def add_producer(self, producer: Producer) -> str | None:
        """Register a producer; returns an error text (ProducerBusy) instead of raising."""
        existing = self.producers.get(producer.name)
        if existing is not None and existing is not producer:
            if existing.connection is producer.connection or producer.epoch <= existing.epoch:
                return f"producer with name '{producer.name}' is already connected to topic {self.full_name}"
            # A reconnecting producer (higher epoch) replaces its stale registration.
            existing.connection.forget_producer(existing)
        self.producers[producer.name] = producer
        return None

    def remove_producer(self, producer: Producer) -> None:
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]
            if self.exclusive_producer == producer.name:
                self.exclusive_producer = None
            self._producers_changed.set()

    async def admit_producer(
        self, producer: Producer, request_epoch: int | None, on_queued: Callable[[], None]
    ) -> None:
        """Apply the producer access mode (Shared, Exclusive, WaitForExclusive, ExclusiveWithFencing).

        Raises BrokerRequestError with ProducerBusy or ProducerFenced. WaitForExclusive calls
        `on_queued` once and waits until the topic has no other producer."""
        mode = producer.access_mode
        if mode == pb.Shared:
            if self.exclusive_producer not in (None, producer.name):
                raise BrokerRequestError(
                    pb.ProducerBusy, f"Topic has an existing exclusive producer: {self.exclusive_producer}"
                )
            return
        if request_epoch is not None and request_epoch < self.topic_epoch and mode != pb.ExclusiveWithFencing:
            raise BrokerRequestError(pb.ProducerFenced, f"producer {producer.name} was fenced (topic epoch moved)")
        queued = False
        while True:
            others = [p for p in self.producers.values() if p.name != producer.name]
            if not others:
                break
            if mode == pb.Exclusive:
                kind = "exclusive" if self.exclusive_producer else "shared"
                raise BrokerRequestError(pb.ProducerFenced, f"Topic has existing {kind} producers")
            if mode == pb.ExclusiveWithFencing:
                for other in others:
                    other.close_by_broker()
                continue
            if not queued:
                queued = True
                on_queued()
            self._producers_changed.clear()
            await self._producers_changed.wait()
        if self.exclusive_producer != producer.name or request_epoch is None or request_epoch < self.topic_epoch:
            self.topic_epoch += 1
        self.exclusive_producer = producer.name

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

    def publish(
        self,
        producer: Producer,
        entry: bytes,
        num_messages: int,
        sequence_id: int,
        highest_sequence_id: int,
        dedup_checked: bool,
    ) -> asyncio.Future[Position]:
        """Append an entry. With deduplication on, a duplicate resolves at once to (-1, -1).
        `dedup_checked` is False for all chunks of a chunked message but the last."""
        dedup = self.dedup
        if dedup is not None and dedup_checked and dedup.is_duplicate(producer.name, sequence_id, highest_sequence_id):
            done: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
            done.set_result(DUPLICATE_POSITION)
            return done
        try:
            future = self.ledger.append_nowait(entry)
        except (StorageError, ValueError) as exc:
            # Same path as a failed write: the receipt callback answers SEND_ERROR.
            future = asyncio.get_running_loop().create_future()
            future.set_exception(exc)
        producer.rate_in.add(num_messages, len(entry))
        self.rate_in.add(num_messages, len(entry))
        future.add_done_callback(self._appended)
        if dedup is not None and dedup_checked:
            seq = max(sequence_id, highest_sequence_id)
            future.add_done_callback(partial(_dedup_done, dedup, producer.name, seq))
        return future

    def _appended(self, future: asyncio.Future[Position]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        for subscription in self.subscriptions.values():
            subscription.wake()

    # ---- subscriptions ---------------------------------------------------------------------------

    async def subscription(
        self,
        name: str,
        sub_type: SubType,
        durable: bool,
        initial_earliest: bool,
        start: Position | None,
        make_non_durable_cursor: Callable[[ManagedLedger, str, Position], ManagedCursor],
    ) -> Subscription:
        """The named subscription, created if needed. `start` is the non-durable start mark-delete."""
        async with self._subscribe_lock:
            existing = self.subscriptions.get(name)
            if existing is not None:
                return existing
            if durable:
                cursor = await self.ledger.open_cursor(name, "earliest" if initial_earliest else "latest")
            else:
                mark_delete = start if start is not None else self._latest_mark_delete()
                cursor = make_non_durable_cursor(self.ledger, name, mark_delete)
            subscription = Subscription(name, self.ledger, cursor, sub_type, durable, self.partition_index, self.clock)
            subscription.delayed_delivery = self.policies.delayed_delivery
            subscription.compacted_view = self.compacted
            self.subscriptions[name] = subscription
            return subscription

    def _latest_mark_delete(self) -> Position:
        last = self.ledger.last_confirmed
        return last if last is not None else Position(self.ledger.current_ledger_id, -1)

    def set_compacted_view(self, view: CompactedView | None) -> None:
        self.compacted = view
        for subscription in self.subscriptions.values():
            subscription.compacted_view = view
            subscription.wake()

    def trigger_compaction(self, storage: Storage) -> None:
        if self._compaction_task is not None and not self._compaction_task.done():
            return
        self.compaction = CompactionStatus("RUNNING")
        self._compaction_task = asyncio.get_running_loop().create_task(self._compact(storage))

    async def _compact(self, storage: Storage) -> None:
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

    # ---- figures and lifecycle -------------------------------------------------------------------

    def metrics(self) -> TopicMetrics:
        subs = []
        for name, cursor in self.ledger.cursors.items():
            subs.append(self._subscription_metrics(name, cursor, self.subscriptions.get(name)))
        for name, s in self.subscriptions.items():
            if name not in self.ledger.cursors:
                subs.append(self._subscription_metrics(name, s.cursor, s))
        backlog = max((s.backlog_entries for s in subs), default=0)
        entries = self.ledger.entries_total
        average_entry = self.ledger.size_bytes / entries if entries else 0.0
        quota = self.policies.backlog_quota
        return TopicMetrics(
            topic=self.full_name,
            producers=len(self.producers),
            consumers=sum(len(s.consumers) for s in self.subscriptions.values()),
            msg_in_total=self.rate_in.messages_total,
            bytes_in_total=self.rate_in.bytes_total,
            msg_out_total=sum(s.out.messages_total for s in self.subscriptions.values()),
            bytes_out_total=sum(s.out.bytes_total for s in self.subscriptions.values()),
            storage_size_bytes=self.ledger.size_bytes,
            entries_total=entries,
            backlog_entries=backlog,
            subscriptions=tuple(subs),
            msg_rate_in=self.rate_in.message_rate,
            msg_rate_out=sum(s.msg_rate_out for s in subs),
            msg_throughput_in=self.rate_in.byte_rate,
            msg_throughput_out=sum(s.msg_throughput_out for s in subs),
            backlog_size_bytes=int(backlog * average_entry),
            backlog_quota_limit_bytes=quota.limit_bytes if quota else -1,
            backlog_quota_limit_time_s=quota.limit_time_s if quota else -1,
        )

    @staticmethod
    def _subscription_metrics(name: str, cursor: ManagedCursor, s: Subscription | None) -> SubscriptionMetrics:
        md = cursor.mark_delete_position
        return SubscriptionMetrics(
            name=name,
            type=s.sub_type.name.title().replace("Key_shared", "Key_Shared") if s else "Exclusive",
            consumers=len(s.consumers) if s else 0,
            backlog_entries=cursor.backlog,
            unacked_messages=s.unacked_messages if s else 0,
            msg_out_total=s.out.messages_total if s else 0,
            bytes_out_total=s.out.bytes_total if s else 0,
            mark_delete_position=f"{md.ledger_id}:{md.entry_id}",
            delayed_messages=s.delayed_messages if s else 0,
            msg_rate_out=s.out.message_rate if s else 0.0,
            msg_throughput_out=s.out.byte_rate if s else 0.0,
            msg_rate_redeliver=s.redelivered.message_rate if s else 0.0,
            msg_rate_expired=s.expired.message_rate if s else 0.0,
            total_msg_expired=s.expired.messages_total if s else 0,
        )

    @property
    def in_use(self) -> bool:
        return bool(self.producers) or any(s.consumers for s in self.subscriptions.values())

    async def close(self) -> None:
        self.closed = True
        if self._compaction_task is not None and not self._compaction_task.done():
            self._compaction_task.cancel()
        if self.compacted is not None:
            await self.compacted.store.close()
        for subscription in list(self.subscriptions.values()):
            await subscription.close()
        self.subscriptions.clear()


def _dedup_done(dedup: Deduplication, producer_name: str, sequence_id: int, future: asyncio.Future[Position]) -> None:
    if future.cancelled() or future.exception() is not None:
        dedup.failed(producer_name)
    else:
        dedup.persisted_up_to(producer_name, sequence_id)
