"""The producer the application holds (PR-1..PR-3, PR-10, PR-11): one logical producer over one
partition producer per partition (a non-partitioned topic is the one-partition case).

    send_async(value, key=..., ...)  build the ProducerMessage (step 2), choose its partition
                                      (step 3: key hash / routing mode / custom router, skipping
                                      partitions without free permits when blocking-aware), then
                                      hand it to that partition's producer; returns, once the
                                      message is admitted, a future of its MessageId
    send(...)                         send_async plus the wait for the receipt
    send_many(values, keys=...)       many messages at once (a sequence, or a pyarrow table):
                                      routed in one pass, batched by each partition producer's
                                      container from columns, one future for all (_bulk_send.py)

Each partition producer has its own pending permits: min(max_pending_messages,
max_pending_messages_across_partitions / partitions) of them (PR-5). With
lazy_start_partitioned_producers a partition producer connects on its first message.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from velamq._topic_name import TopicName
from velamq.client._config import ProducerConfig
from velamq.client._errors import AlreadyClosedError
from velamq.client._gather import gather_all
from velamq.client._message import MessageId, ProducerMessage
from velamq.client.producer._backpressure import MemoryLimit, Permits
from velamq.client.producer._bulk_send import BulkSend, RoutedIds
from velamq.client.producer._partition import PartitionProducer
from velamq.client.producer._routing import PartitionChooser
from velamq.client.schema._schemas import BytesSchema, Schema
from velamq.client.transport._handler import ClientOwner


class ProducerClient(ClientOwner, Protocol):
    """What a producer needs of its client: ClientOwner's, and the client-wide memory limit."""

    memory: MemoryLimit

Value = bytes | bytearray | memoryview | str


def _as_bytes(value: Value) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _encode(schema: Schema[Any] | None, value: Any) -> bytes:
    """The payload of a value: the schema's encoding (a Record, str ...) or the bytes themselves."""
    if schema is None or isinstance(schema, BytesSchema):
        return _as_bytes(value)
    return schema.encode(value)


def _epoch_ms(value: int | float | datetime.datetime) -> int:
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


class Producer:
    """The producer the application holds, on one topic: one PartitionProducer per partition (one in
    all for a non-partitioned topic).

    send_async builds the message, chooses its partition (key hash, routing mode or a custom
    router) and hands it to that partition's producer; it returns once the message is admitted,
    with a future of its MessageId. Each partition producer has its own pending permits and shares
    the client's memory limit; with lazy start a partition producer connects on its first message.
    """

    def __init__(self, client: ProducerClient, topic: str, partitions: int, config: ProducerConfig,
                 producer_ids: itertools.count[int]) -> None:
        self.client = client
        self.topic = topic
        self.config = config
        self.num_partitions = partitions
        count = max(1, partitions)
        limit = config.pending_limit_per_partition(count)
        self._permits = [Permits(limit) for _ in range(count)]
        self._producer_ids = producer_ids
        self._partitions: list[PartitionProducer | None] = [None] * count
        self._starting: dict[int, asyncio.Task[PartitionProducer]] = {}
        self._chooser = PartitionChooser(
            config.message_routing_mode,
            config.hashing_scheme,
            batching_enabled=config.batching_enabled,
            batching_max_publish_delay_ms=config.batching_max_publish_delay_ms,
            partition_switch_frequency=config.batching_partition_switch_frequency_by_publish_delay,
            custom_router=config.message_router,
            blocking_aware=config.blocking_aware_routing,
            clock=client.clock,
        )
        self._closed = False

    def __repr__(self) -> str:
        return f"Producer({self.topic!r}, partitions={self.num_partitions})"

    def _partition_topic(self, index: int) -> str:
        if self.num_partitions == 0:
            return self.topic
        return str(TopicName.parse(self.topic).partition(index))

    def _new_partition_producer(self, index: int) -> PartitionProducer:
        # A user-given name is used as is on every partition: each partition is its own topic, so
        # the broker's dedup state (name + sequence id) stays per partition (Java does the same).
        return PartitionProducer(self.client, self, self._partition_topic(index),
                                 index if self.num_partitions > 0 else -1, self.config, self._permits[index],
                                 self.client.memory, next(self._producer_ids))

    async def start(self) -> None:
        """Connect every partition producer (only the first one with lazy start)."""
        indexes = range(len(self._partitions))
        if self.config.lazy_start_partitioned_producers and self.num_partitions > 0:
            indexes = range(0)
        try:
            await gather_all(self._partition(i) for i in indexes)
        except BaseException:
            await self.close()
            raise

    async def _partition(self, index: int) -> PartitionProducer:
        producer = self._partitions[index]
        if producer is not None:
            return producer
        task = self._starting.get(index)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._start_partition(index))
            self._starting[index] = task
        return await asyncio.shield(task)

    async def _start_partition(self, index: int) -> PartitionProducer:
        producer = self._new_partition_producer(index)
        try:
            await producer.start()
        finally:
            self._starting.pop(index, None)
        if self._closed:
            await producer.close()
            raise AlreadyClosedError(f"{self.topic}: producer closed")
        self._partitions[index] = producer
        return producer

    # ---- sending -------------------------------------------------------------------------------

    def build_message(self, value: Any, key: str | None = None, properties: Mapping[str, str] | None = None,
                      event_time: int | datetime.datetime | None = None, ordering_key: bytes | str | None = None,
                      sequence_id: int | None = None, deliver_at: int | datetime.datetime | None = None,
                      deliver_after: int | datetime.timedelta | None = None,
                      replication_clusters: tuple[str, ...] = (), disable_replication: bool = False) -> ProducerMessage:
        if deliver_after is not None:
            after_ms = (int(deliver_after.total_seconds() * 1000) if isinstance(deliver_after, datetime.timedelta)
                        else int(deliver_after))
            deliver_at = self.client.clock.now_ms() + after_ms
        return ProducerMessage(
            value=_encode(self.config.schema, value),
            key=key or None,
            properties=dict(properties or {}),
            event_time=_epoch_ms(event_time) if event_time is not None else None,
            ordering_key=ordering_key.encode() if isinstance(ordering_key, str) else ordering_key,
            sequence_id=sequence_id,
            deliver_at=_epoch_ms(deliver_at) if deliver_at is not None else None,
            replication_clusters=tuple(replication_clusters),
            disable_replication=disable_replication,
        )

    async def send_async(self, value: Any, key: str | None = None,
                         properties: Mapping[str, str] | None = None, event_time: int | datetime.datetime | None = None,
                         ordering_key: bytes | str | None = None, sequence_id: int | None = None,
                         deliver_at: int | datetime.datetime | None = None,
                         deliver_after: int | datetime.timedelta | None = None) -> asyncio.Future[MessageId]:
        """Admit the message (waiting for room if block_if_queue_full) and return the future of
        its id. `value`: bytes or str, or with a schema what it encodes (a Record ...). Raises
        ProducerQueueIsFullError / MemoryBufferIsFullError when full and not blocking."""
        if self._closed:
            raise AlreadyClosedError(f"{self.topic}: producer is closed")
        message = value if isinstance(value, ProducerMessage) else self.build_message(
            value, key, properties, event_time, ordering_key, sequence_id, deliver_at, deliver_after)
        index = self._chooser.choose(message, self.num_partitions, self._has_room)
        producer = self._partitions[index] or await self._partition(index)
        return await producer.send_async(message)

    async def send(self, value: Any, key: str | None = None,
                   properties: Mapping[str, str] | None = None, event_time: int | datetime.datetime | None = None,
                   ordering_key: bytes | str | None = None, sequence_id: int | None = None,
                   deliver_at: int | datetime.datetime | None = None,
                   deliver_after: int | datetime.timedelta | None = None) -> MessageId:
        future = await self.send_async(value, key, properties, event_time, ordering_key, sequence_id, deliver_at,
                                       deliver_after)
        return await future

    async def send_many_async(self, values: Any, *, keys: Sequence[str | None] | None = None,
                              properties: Sequence[Mapping[str, str] | None] | None = None,
                              event_times: Sequence[int | datetime.datetime | None] | None = None,
                              sequence_ids: Sequence[int] | None = None) -> asyncio.Future[Sequence[MessageId]]:
        """Admit many messages at once and return the future of their ids (in the order of the
        values). `values` is a sequence of bytes / str, or a pyarrow Table / RecordBatch (columns
        value, and optionally key, properties, event_time or eventTime) or Array of values; the
        other arguments give one item per value (None where a message has none).

        Messages are routed, batched, compressed, ordered and receipted as single sends of the same
        messages would be (see docs/client.md for the two differences in routing); admission waits
        for room, batch by batch, whatever block_if_queue_full says, since a bulk call cannot fail
        half-way. Without batching, with interceptors or a custom router, it is send_async per
        message."""
        if self._closed:
            raise AlreadyClosedError(f"{self.topic}: producer is closed")
        if not isinstance(values, Sequence):
            from velamq.client._arrow import send_columns

            columns = send_columns(values)
            values, keys = columns.values, keys if keys is not None else columns.keys
            properties = properties if properties is not None else columns.properties
            event_times = event_times if event_times is not None else columns.event_times
        schema = self.config.schema
        if schema is None or isinstance(schema, BytesSchema):
            data = [v if type(v) is bytes else _as_bytes(v) for v in values]
        else:
            data = [schema.encode(v) for v in values]
        n = len(data)
        for name, column in (("keys", keys), ("properties", properties), ("event_times", event_times),
                             ("sequence_ids", sequence_ids)):
            if column is not None and len(column) != n:
                raise ValueError(f"{name} has {len(column)} items for {n} values")
        times = None if event_times is None else [
            t if t is None or type(t) is int else _epoch_ms(t) for t in event_times]
        keys = None if keys is None or not any(keys) else [k or None for k in keys]
        config = self.config
        if not config.batching_enabled or config.interceptors or config.message_routing_mode == "custom":
            return await self._send_each(data, keys, properties, times, sequence_ids)
        chosen = self._chooser.choose_many(keys, n, self.num_partitions, config.batching_max_messages)
        sizes = list(map(len, data))
        if isinstance(chosen, int):
            return await self._send_run(chosen, data, sizes, keys, properties, times, sequence_ids)
        groups: dict[int, list[int]] = {}
        for j, partition in enumerate(chosen):
            groups.setdefault(partition, []).append(j)
        parts = list(groups.items())
        futures = []
        for partition, idx in parts:
            def pick(column: Sequence[Any] | None, idx: list[int] = idx) -> list[Any] | None:
                return None if column is None else [column[j] for j in idx]

            futures.append(await self._send_run(partition, pick(data) or [], [sizes[j] for j in idx], pick(keys),
                                                pick(properties), pick(times), pick(sequence_ids)))
        at: list[tuple[int, int]] = [(0, 0)] * n
        for p, (_, idx) in enumerate(parts):
            for position, j in enumerate(idx):
                at[j] = (p, position)

        async def gathered() -> Sequence[MessageId]:
            return RoutedIds(list(await asyncio.gather(*futures)), at)

        return asyncio.ensure_future(gathered())

    async def send_many(self, values: Any, *, keys: Sequence[str | None] | None = None,
                        properties: Sequence[Mapping[str, str] | None] | None = None,
                        event_times: Sequence[int | datetime.datetime | None] | None = None,
                        sequence_ids: Sequence[int] | None = None) -> Sequence[MessageId]:
        """send_many_async plus the wait for every receipt: the ids, in the order of the values."""
        future = await self.send_many_async(values, keys=keys, properties=properties, event_times=event_times,
                                            sequence_ids=sequence_ids)
        return await future

    async def _send_run(self, index: int, values: list[bytes], sizes: list[int], keys: Any, properties: Any,
                        event_times: Any, sequence_ids: Any) -> asyncio.Future[Any]:
        producer = self._partitions[index] or await self._partition(index)
        bulk = BulkSend(producer.topic, len(values))
        try:
            await producer.send_columns(values, sizes, bulk, 0, sequence_ids=sequence_ids, keys=keys,
                                        properties=properties, event_times=event_times)
        except BaseException as exc:
            bulk.failed(exc)
            raise
        return bulk.future

    async def _send_each(self, values: list[bytes], keys: Any, properties: Any, event_times: Any,
                         sequence_ids: Any) -> asyncio.Future[Sequence[MessageId]]:
        futures = []
        for j, value in enumerate(values):
            futures.append(await self.send_async(
                value, key=keys[j] if keys is not None else None,
                properties=properties[j] if properties is not None else None,
                event_time=event_times[j] if event_times is not None else None,
                sequence_id=sequence_ids[j] if sequence_ids is not None else None))

        async def gathered() -> Sequence[MessageId]:
            return list(await asyncio.gather(*futures))

        return asyncio.ensure_future(gathered())

    def _has_room(self, index: int) -> bool:
        """PR-11, for blocking-aware round robin: a partition is blocked when its pending queue is
        full, or when its producer is disconnected, reconnecting or failed (a partition whose
        producer is not created yet is not). Keyed messages never move."""
        if self._permits[index].available <= 0:
            return False
        producer = self._partitions[index]
        return producer is None or producer.is_connected

    # ---- state ---------------------------------------------------------------------------------

    @property
    def producer_name(self) -> str:
        for p in self._partitions:
            if p is not None:
                return p.producer_name
        return self.config.producer_name or ""

    @property
    def last_sequence_id(self) -> int:
        ids = [p.last_sequence_id_published for p in self._partitions if p is not None]
        return max(ids) if ids else -1

    @property
    def partition_producers(self) -> list[PartitionProducer]:
        return [p for p in self._partitions if p is not None]

    def is_connected(self) -> bool:
        started = self.partition_producers
        return bool(started) and all(p.is_connected for p in started) and not self._closed

    @property
    def pending_count(self) -> int:
        return sum(p.pending_count for p in self.partition_producers)

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.partition_producers))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in list(self._starting.values()):
            task.cancel()
        await gather_all((p.close() for p in self.partition_producers), return_exceptions=True)
        self.client.forget(self)

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
