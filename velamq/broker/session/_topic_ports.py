"""A topic and a subscription as the command handlers see them, whichever kind the topic is.

The persistent Topic and Subscription (a managed ledger and its cursors) and the non-persistent
ones (broker/nonpersistent: nothing stored) both meet these protocols, so PRODUCER, SEND, SUBSCRIBE,
FLOW, ACK and the rest have one path for both kinds:

    PublishingTopic       what the producer commands need of a producer's topic
    ConsumerSubscription  what the consumer commands need of a consumer's subscription
    CommandTopic          a topic as the registry hands it out (open_topic, find_topic): both of
                          the above and the subscriptions

What only a persistent topic has (its ledger, for a reader's start position) is reached by
narrowing to Topic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from velamq._topic_name import TopicName
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._selector import SubType
from velamq.broker.topic._dedup import Deduplication
from velamq.broker.topic._producer import ServerProducer
from velamq.broker.topic._publish import Published
from velamq.metadata import Policies
from velamq.storage import Position


class PublishingTopic(Protocol):
    chunks_published: int

    @property
    def name(self) -> TopicName: ...

    @property
    def full_name(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    @property
    def policies(self) -> Policies: ...

    @property
    def producers(self) -> Mapping[str, ServerProducer]: ...

    @property
    def dedup(self) -> Deduplication | None: ...

    @property
    def topic_epoch(self) -> int: ...

    @property
    def backlog_quota_exceeded(self) -> str | None: ...

    def add_producer(self, producer: ServerProducer) -> str | None: ...

    def remove_producer(self, producer: ServerProducer) -> None: ...

    def not_registered(self, name: str) -> None: ...

    async def admit_producer(
        self, producer: ServerProducer, request_epoch: int | None, on_queued: Callable[[], None]
    ) -> None: ...

    async def apply_policies(self, policies: Policies) -> None: ...

    def publish_with(
        self,
        producer: ServerProducer,
        entry: bytes,
        num_messages: int,
        sequence_id: int,
        highest_sequence_id: int,
        dedup_checked: bool,
        published: Published,
    ) -> None: ...


class ConsumerSubscription(Protocol):
    read_compacted: bool
    allow_out_of_order: bool  # Key_Shared: a joining consumer gets its keys at once
    resetting: bool
    sub_type: SubType

    @property
    def name(self) -> str: ...

    @property
    def topic_name(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def consumers(self) -> Sequence[ServerConsumer]: ...

    @property
    def backlog(self) -> int: ...

    @property
    def mark_delete_position(self) -> Position: ...

    def add_consumer(self, consumer: ServerConsumer, sticky_ranges: list[tuple[int, int]] | None = None) -> None: ...

    def remove_consumer(self, consumer: ServerConsumer) -> None: ...

    def flow(self, consumer: ServerConsumer, permits: int) -> None: ...

    def wake(self) -> None: ...

    def acknowledge(self, acks: list[tuple[Position, list[int] | None]]) -> None: ...

    def acknowledge_cumulative(self, position: Position, ack_set: list[int] | None) -> None: ...

    def redeliver(self, consumer: ServerConsumer, positions: list[Position] | None) -> None: ...

    async def seek_target(self, message_id: tuple[int, int] | None, publish_time_ms: int | None) -> Position: ...

    def seek(self, mark_delete: Position) -> None: ...

    async def last_message_id(self) -> tuple[Position, int]: ...


class CommandTopic(PublishingTopic, Protocol):
    @property
    def partition_index(self) -> int: ...

    @property
    def subscriptions(self) -> Mapping[str, ConsumerSubscription]: ...

    @property
    def has_entries(self) -> bool:
        """Messages went through it (the schema rules' test of a topic in use)."""
        ...

    async def subscription(
        self, name: str, sub_type: SubType, durable: bool, initial_earliest: bool, start: Position | None
    ) -> ConsumerSubscription: ...

    async def remove_subscription(self, name: str, delete_cursor: bool) -> None: ...
