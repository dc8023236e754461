"""The official Pulsar client (`pulsar-client`) as the ordered consumer's transport.

    consumer = OrderedConsumer.over_pulsar_client(pulsar.Client(url), "orders", "billing", handle,
                                                  partition_parallelism=8)

OfficialClient gives the ordered consumer what it asks of a client (partition counts, one consumer
per partition, a dead-letter producer); OfficialPartitionSource is one partition's pulsar.Consumer
seen as a PartitionSource. The guarantees are the same, by the same code (_partition.py), because
what they rest on holds for the official consumer too:

    flow control   its receiver queue gets permits back only for what the application takes, so a
                   partition whose window is full stops the broker after one receiver queue's
                   worth, plus at most one batch_receive (its policy's max_num_message) waiting here
    positions      its message ids give ledger, entry and batch index, so redeliveries are
                   recognised as with velamq's consumer
    acks           cumulative acknowledgement of a message inside a batch entry, with
                   batch_index_ack_enabled, acknowledges exactly up to it; the original message
                   object of each held position is kept until it is acknowledged

Its batch_receive blocks a thread (one per partition while it waits, up to the policy's timeout).
Each message is copied into velamq's form (a ReceivedBatch per entry), so the handler receives a
velamq.client.Message (value, key, ordering key, properties, id, times). Schemas are not decoded:
value is the payload.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from typing import Any

from velamq._clock import Clock, system_clock
from velamq._topic_name import TopicName
from velamq.client._config import ConsumerConfig
from velamq.client._errors import AlreadyClosedError, InvalidConfigurationError
from velamq.client._message import Message, MessageId, ReceivedBatch, message_at
from velamq.client._message_batch import Messages
from velamq.client.ordered._progress import Position, position
from velamq.protocol import MessageColumns

batch_receive_timeout_ms = 100


class OfficialPartitionSource:
    """One partition's pulsar.Consumer as the ordered consumer's PartitionSource."""

    def __init__(self, consumer: Any, topic: str, partition: int) -> None:
        self._consumer = consumer
        self.topic = topic
        self.partition = partition
        self._buffer: deque[Any] = deque()  # official messages received, not yet taken
        self._held: dict[Position, Any] = {}  # taken and not yet acknowledged
        self._closed = False
        # Its own thread for the blocking batch_receive, so partitions never queue for threads.
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="velamq-ordered-receive")

    async def batch_receive(self, max_messages: int | None = None, timeout_ms: int | None = None) -> Messages:
        """What is buffered, up to max_messages (never waits: receive() does)."""
        self._check_open()
        count = min(max_messages or len(self._buffer), len(self._buffer))
        return Messages(self._take(count))

    async def receive(self, timeout_ms: int | None = None) -> Message:
        while not self._buffer:
            self._check_open()
            try:
                received = await asyncio.get_running_loop().run_in_executor(self._thread,
                                                                           self._consumer.batch_receive)
            except Exception as exc:
                if self._closed:
                    raise AlreadyClosedError(f"{self.topic}: consumer is closed") from exc
                raise
            self._buffer.extend(received)
        batch, first, _ = self._take(1)[0]
        return message_at(batch, first)

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosedError(f"{self.topic}: consumer is closed")

    def _take(self, count: int) -> list[tuple[ReceivedBatch, int, int]]:
        """The next count messages as ranges of entries (one ReceivedBatch per run of one entry)."""
        out: list[tuple[ReceivedBatch, int, int]] = []
        group: list[Any] = []
        for _ in range(count):
            official = self._buffer.popleft()
            if group and _entry(group[0]) != _entry(official):
                out.append(self._batch_of(group))
                group = []
            group.append(official)
        if group:
            out.append(self._batch_of(group))
        return out

    def _batch_of(self, messages: list[Any]) -> tuple[ReceivedBatch, int, int]:
        datas = [m.data() for m in messages]
        starts, ends, at = [], [], 0
        for data in datas:
            starts.append(at)
            at += len(data)
            ends.append(at)
        ids = [m.message_id() for m in messages]
        indexes = [i.batch_index() for i in ids]
        batched = indexes[0] >= 0
        columns = MessageColumns(b"".join(datas), starts, ends, max(indexes) + 1 if batched else 0,
                                 indexes if batched else None, [m.partition_key() or None for m in messages],
                                 [list(m.properties().items()) or None for m in messages],
                                 [m.event_timestamp() for m in messages],
                                 [_ordering_key(m) for m in messages])
        first = messages[0]
        batch = ReceivedBatch(columns, self.topic, self.partition, ids[0].ledger_id(), ids[0].entry_id(), None,
                              first.redelivery_count(), None, 0)
        batch.publish_time, batch.producer_name = first.publish_timestamp(), first.producer_name()
        for j, official in enumerate(messages):
            self._held[position(batch, j)] = official
        return batch, 0, len(messages)

    async def acknowledge(self, target: Message | MessageId | Messages) -> None:
        targets = list(target) if isinstance(target, Messages) else [target]
        for one in targets:
            mid = one.message_id if isinstance(one, Message) else one
            official = self._held.pop(_position_of(mid), None)
            if official is not None:
                self._consumer.acknowledge(official)

    async def acknowledge_cumulative(self, target: Message | MessageId) -> None:
        mid = target.message_id if isinstance(target, Message) else target
        at = _position_of(mid)
        official = self._held.get(at)
        if official is None:
            return
        self._consumer.acknowledge_cumulative(official)
        for held in [p for p in self._held if p <= at]:
            del self._held[held]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._consumer.close)
        self._thread.shutdown(wait=False)


class OfficialClient:
    """What OrderedConsumer needs of a client, over a pulsar.Client (see the module docstring)."""

    def __init__(self, client: Any, clock: Clock = system_clock) -> None:
        self.client = client
        self.clock = clock

    async def partitions_of(self, topic: str) -> int:
        names = await asyncio.to_thread(self.client.get_topic_partitions, topic)
        name = TopicName.parse(topic)
        return 0 if len(names) == 1 and TopicName.parse(names[0]) == name else len(names)

    async def subscribe(self, topic: str, subscription_name: str, config: ConsumerConfig) -> OfficialPartitionSource:
        import pulsar

        types = {"failover": pulsar.ConsumerType.Failover, "exclusive": pulsar.ConsumerType.Exclusive}
        positions = {"earliest": pulsar.InitialPosition.Earliest, "latest": pulsar.InitialPosition.Latest}
        if config.initial_position not in positions:
            raise InvalidConfigurationError(f"initial_position {config.initial_position!r} with the official client")
        policy = pulsar.ConsumerBatchReceivePolicy(config.receiver_queue_size, 0, batch_receive_timeout_ms)
        consumer = await asyncio.to_thread(
            self.client.subscribe, topic, subscription_name, consumer_type=types[config.subscription_type],
            receiver_queue_size=config.receiver_queue_size, consumer_name=config.consumer_name,
            initial_position=positions[config.initial_position], batch_receive_policy=policy,
            batch_index_ack_enabled=True)
        return OfficialPartitionSource(consumer, topic, TopicName.parse(topic).partition_index)

    async def create_producer(self, topic: str, **options: Any) -> OfficialProducer:
        producer = await asyncio.to_thread(self.client.create_producer, topic, batching_enabled=False)
        return OfficialProducer(producer)


class OfficialProducer:
    """The dead-letter producer over a pulsar.Producer (DeadLetterSender's send and close)."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    async def send(self, value: bytes, *, key: str | None = None, properties: dict[str, str] | None = None,
                   event_time: int | None = None, ordering_key: bytes | None = None) -> MessageId:
        options: dict[str, Any] = {"properties": properties or {}}
        if key is not None:
            options["partition_key"] = key
        if event_time:
            options["event_timestamp"] = event_time
        if ordering_key is not None:
            options["ordering_key"] = ordering_key.decode("utf-8", "replace")
        sent = await asyncio.to_thread(self._producer.send, value, **options)
        return MessageId(sent.ledger_id(), sent.entry_id(), sent.partition(), sent.batch_index())

    async def close(self) -> None:
        await asyncio.to_thread(self._producer.close)


def _entry(official: Any) -> tuple[int, int]:
    mid = official.message_id()
    return mid.ledger_id(), mid.entry_id()


def _ordering_key(official: Any) -> bytes | None:
    key = official.ordering_key()
    if not key:
        return None
    return key if isinstance(key, bytes) else str(key).encode("utf-8")


def _position_of(mid: MessageId) -> Position:
    return (mid.ledger_id, mid.entry_id, mid.batch_index)
