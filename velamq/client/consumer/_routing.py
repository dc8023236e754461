"""Where the consumer's per-message operations go: to the TopicConsumer a message belongs to.

A multi-topic or partitioned Consumer holds one TopicConsumer per partition. An acknowledgement, a
negative acknowledgement or a seek to a message id names one message; it goes to the TopicConsumer
that received it (the message knows it), or, for a bare message id, to the one of its topic or
partition. Operations over every partition (redeliver all, flush, seek by time, last message id)
go to each of them.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterable

from velamq.client._config import ConsumerConfig
from velamq.client._message import Message, MessageId, ReceivedBatch
from velamq.client._message_batch import Messages
from velamq.client.consumer._topic_consumer import TopicConsumer

MessageOrId = Message | MessageId


class ConsumerRouting:
    """A base of Consumer: owns the routing of acknowledgements, negative acknowledgements, seeks
    and last-message-id queries to its TopicConsumers (the children themselves, the receiver queue
    and the life cycle stay in Consumer)."""

    config: ConsumerConfig
    _children: dict[str, TopicConsumer]

    # ---- acknowledging -------------------------------------------------------------------------

    def _child_of(self, target: MessageOrId) -> tuple[TopicConsumer, MessageId]:
        if isinstance(target, Message):
            owner = target._owner
            if owner is not None and owner.topic in self._children:
                return owner, target.message_id
            target = target.message_id
        if target.topic and target.topic in self._children:
            return self._children[target.topic], target
        if len(self._children) == 1:
            return next(iter(self._children.values())), target
        for child in self._children.values():
            if child.partition == target.partition:
                return child, target
        raise ValueError(f"message id {target} does not belong to this consumer")

    def _own_child(self, batch: ReceivedBatch) -> TopicConsumer:
        owner: TopicConsumer = batch.owner
        if self._children.get(owner.topic) is not owner:
            raise ValueError(f"message of {owner.topic} does not belong to this consumer")
        return owner

    def acknowledge_now(self, target: MessageOrId | Messages | Iterable[MessageOrId]) -> None:
        """acknowledge() without the coroutine: it never waits (the ack leaves with the group)."""
        if type(target) is Message and target._batch.owner is not None:
            batch = target._batch
            owner: TopicConsumer = batch.owner
            if self._children.get(owner.topic) is not owner:
                raise ValueError(f"message of {owner.topic} does not belong to this consumer")
            owner.acknowledge_one(batch, target._j)
        elif isinstance(target, Messages):
            for batch, first, end in target.ranges:
                self._own_child(batch).acknowledge_range(batch, first, end)
        elif isinstance(target, (Message, MessageId)):
            child, mid = self._child_of(target)
            child.acknowledge(mid)
        else:
            for item in target:
                self.acknowledge_now(item)

    async def acknowledge(self, target: MessageOrId | Messages | Iterable[MessageOrId]) -> None:
        """Acknowledge a message, a message id, a Messages from batch_receive, or a list of them.
        With ack_receipt_enabled, wait until the broker confirmed it; raise if it did not (no
        connection: ConnectError; refused: the broker's error)."""
        self.acknowledge_now(target)
        if self.config.ack_receipt_enabled:
            await self._confirm_acks()

    async def _confirm_acks(self) -> None:
        for child in list(self._children.values()):
            await child.confirm_acks()

    def acknowledge_cumulative_now(self, target: MessageOrId | Messages) -> None:
        if isinstance(target, Messages):
            last: dict[TopicConsumer, MessageId] = {}
            for batch, _, end in target.ranges:  # the last message of each partition in the batch
                last[self._own_child(batch)] = batch.message_id(end - 1)
            for child, mid in last.items():
                child.acknowledge_cumulative(mid)
            return
        child, mid = self._child_of(target)
        child.acknowledge_cumulative(mid)

    async def acknowledge_cumulative(self, target: MessageOrId | Messages) -> None:
        """Acknowledge everything up to a message (of its partition); for a Messages, up to its last
        message of each partition it has messages of. With ack_receipt_enabled, as acknowledge."""
        self.acknowledge_cumulative_now(target)
        if self.config.ack_receipt_enabled:
            await self._confirm_acks()

    async def negative_acknowledge(self, target: MessageOrId | Messages) -> None:
        self.negative_acknowledge_now(target)

    def negative_acknowledge_now(self, target: MessageOrId | Messages) -> None:
        if isinstance(target, Messages):
            for batch, first, end in target.ranges:
                child = self._own_child(batch)
                for j in range(first, end):
                    child.negative_acknowledge(batch.message_id(j))
            return
        child, mid = self._child_of(target)
        child.negative_acknowledge(mid)

    async def redeliver_unacknowledged_messages(self) -> None:
        for child in self._children.values():
            child.redeliver_all()

    async def flush_acknowledgements(self) -> None:
        for child in self._children.values():
            child.acks.flush()

    # ---- seek, last id -------------------------------------------------------------------------

    async def seek(self, target: MessageId | int | datetime.datetime) -> None:
        """Reset to a message id (inclusive) or to a publish time (epoch ms or datetime)."""
        if isinstance(target, MessageId):
            if target in (MessageId.earliest, MessageId.latest) or len(self._children) == 1:
                await asyncio.gather(*(c.seek(message_id=target) for c in self._children.values()))
            else:
                child, mid = self._child_of(target)
                await child.seek(message_id=mid)
            return
        ms = int(target.timestamp() * 1000) if isinstance(target, datetime.datetime) else int(target)
        await asyncio.gather(*(c.seek(publish_time_ms=ms) for c in self._children.values()))

    async def get_last_message_id(self) -> MessageId:
        ids = await asyncio.gather(*(c.get_last_message_id() for c in self._children.values()))
        return max((last for last, _ in ids), default=MessageId.earliest)

    async def has_message_available(self) -> bool:
        for child in self._children.values():
            if await child.has_message_available():
                return True
        return False

