"""The consumer the application holds: one subscription over one or many topic partitions.

    subscribe("t", ...)                 one TopicConsumer (non-partitioned) or one per partition
    subscribe(["a", "b"], ...)          all partitions of every topic, one receiver queue
    subscribe(re.compile("ns/x-.*"))    the namespace's topics matching the pattern, rediscovered
                                        every pattern_auto_discovery_period_s (GET_TOPICS_OF_NAMESPACE)

Every TopicConsumer puts its messages into the one ReceiverQueue; receive() takes the next one
and gives its permit back to the TopicConsumer it came from. With a schema, the message is decoded
on its way out (schema/_decoder.py): receive() waits for the writer's schema if it must be fetched;
receive_nowait() then holds the message back (answers None) until it has arrived; batch_receive()
fetches what its messages need, and they decode on access. Acknowledgements are routed to that
TopicConsumer too (by the message, or by the message id's topic / partition: _routing.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from velamq._topic_name import TopicName
from velamq.client._config import ConsumerConfig
from velamq.client._errors import AlreadyClosedError, InvalidConfigurationError, OperationTimeoutError
from velamq.client._gather import gather_all
from velamq.client._message import Message, MessageId, message_at
from velamq.client._message_batch import Messages, range_bytes
from velamq.client.consumer._dead_letter import DeadLetterSender, ProducerFactory, default_dead_letter_topic
from velamq.client.consumer._receiver_queue import Range, ReceiverQueue
from velamq.client.consumer._routing import ConsumerRouting
from velamq.client.consumer._topic_consumer import TopicConsumer
from velamq.client.schema._decoder import SchemaDecoder, needs_decoding
from velamq.client.transport._handler import ClientOwner


class ConsumerClient(ClientOwner, ProducerFactory, Protocol):
    """What a consumer needs of its client: ClientOwner's, and producers for its dead letters."""

log = logging.getLogger("velamq.client")


class Consumer(ConsumerRouting):
    """The consumer the application holds: one subscription over one or many topics or partitions.

    It holds one TopicConsumer per partition of every topic (or of every topic a pattern matches,
    rediscovered periodically), all feeding one receiver queue; receive() takes the next message
    and returns its permit to the TopicConsumer it came from, and acknowledge / negative_acknowledge
    / seek go to the TopicConsumer a message or message id belongs to (ConsumerRouting,
    _routing.py). A dead-letter policy sends
    messages that used up their redeliveries to the dead-letter topic.
    """

    def __init__(self, client: ConsumerClient, topics: Sequence[str], subscription: str, config: ConsumerConfig,
                 consumer_ids: itertools.count[int], *, pattern: re.Pattern[str] | None = None,
                 pattern_namespace: str | None = None, durable: bool = True,
                 start_message_id: MessageId | None = None) -> None:
        self.client = client
        self.topics = list(topics)
        self.subscription = subscription
        self.config = config
        self.pattern = pattern
        self.pattern_namespace = pattern_namespace
        self.durable = durable
        self.start_message_id = start_message_id
        self.queue = ReceiverQueue()
        self._consumer_ids = consumer_ids
        self._children: dict[str, TopicConsumer] = {}
        self._dead_letters: DeadLetterSender | None = None
        self._discovery_task: asyncio.Task[None] | None = None
        self._closed = False
        self._decoder = (SchemaDecoder(config.schema, client.lookup.get_schema)
                         if config.schema is not None and needs_decoding(config.schema) else None)
        # A message taken from the queue whose writer schema is still being fetched: the next one out.
        self._held: Message | None = None
        policy = config.dead_letter_policy
        if policy is not None:
            first = self.topics[0] if self.topics else (pattern_namespace or "pattern")
            self._dead_letters = DeadLetterSender(
                client, policy.dead_letter_topic or default_dead_letter_topic(first, subscription),
                policy.initial_subscription_name)

    def __repr__(self) -> str:
        return f"Consumer({self.topics!r}, {self.subscription!r})"

    @property
    def topic(self) -> str:
        return self.topics[0] if len(self.topics) == 1 else ",".join(self.topics)

    @property
    def subscription_name(self) -> str:
        return self.subscription

    @property
    def consumer_name(self) -> str:
        for c in self._children.values():
            return c.consumer_name
        return self.config.consumer_name or ""

    @property
    def children(self) -> list[TopicConsumer]:
        return list(self._children.values())

    # ---- starting ------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            if self.pattern is not None:
                self.topics = await self._discover()
            await gather_all(self._add_topic(t) for t in self.topics)
        except BaseException:
            await self.close()
            raise
        if self.pattern is not None and self.config.pattern_auto_discovery_period_s > 0:
            self._discovery_task = asyncio.get_running_loop().create_task(self._discovery_loop())

    async def _discover(self) -> list[str]:
        assert self.pattern is not None and self.pattern_namespace is not None
        names = await self.client.lookup.topics_of_namespace(self.pattern_namespace,
                                                             self.config.regex_subscription_mode)
        out: list[str] = []
        for name in names:
            topic = TopicName.parse(name).partitioned_parent
            parent = str(topic)
            without_domain = f"{topic.tenant}/{topic.namespace_part}/{topic.local_name}"
            if (self.pattern.fullmatch(parent) or self.pattern.fullmatch(without_domain)) and parent not in out:
                out.append(parent)
        return out

    async def _discovery_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.config.pattern_auto_discovery_period_s)
            try:
                for topic in await self._discover():
                    if topic not in self.topics:
                        self.topics.append(topic)
                        await self._add_topic(topic)
            except asyncio.CancelledError:
                return
            except Exception as exc:
                log.warning("pattern discovery for %s failed: %s", self.subscription, exc)

    async def _add_topic(self, topic: str) -> None:
        partitions = await self.client.partitions_of(topic)
        total = max(1, partitions) * max(1, len(self.topics))
        queue_size = self.config.receiver_queue_size
        if total > 1 and self.config.max_total_receiver_queue_size_across_partitions > 0:
            queue_size = min(queue_size, max(1, self.config.max_total_receiver_queue_size_across_partitions // total))
        name = TopicName.parse(topic)
        if partitions > 0 and self.start_message_id not in (None, MessageId.earliest, MessageId.latest):
            raise InvalidConfigurationError("a partitioned reader starts at earliest or latest only")
        targets = [(str(name.partition(i)), i) for i in range(partitions)] if partitions > 0 else \
            [(str(name), name.partition_index)]
        new = [TopicConsumer(self.client, t, index, self.subscription, self.config, self.queue,
                             next(self._consumer_ids), queue_size, durable=self.durable,
                             start_message_id=self.start_message_id, dead_letters=self._dead_letters, owner=self)
               for t, index in targets]
        for child in new:
            self._children[child.topic] = child
        await gather_all(child.start() for child in new)

    # ---- receiving -----------------------------------------------------------------------------

    async def receive(self, timeout_ms: int | None = None) -> Message:
        """The next message; OperationTimeoutError after timeout_ms (None: wait for ever)."""
        while self._held is None:  # the common case inline: a message is queued
            if self._closed:
                raise AlreadyClosedError(f"{self.topic}: consumer is closed")
            item = self.queue.pop()
            if item is None:
                break
            batch, j = item
            if batch.owner.take_one(batch, j):
                message = message_at(batch, j)
                return message if self._decoder is None else await self._decoded(message)
        if timeout_ms is None:
            return await self._receive()
        try:
            return await asyncio.wait_for(self._receive(), timeout_ms / 1000)
        except TimeoutError:
            raise OperationTimeoutError(f"no message within {timeout_ms} ms") from None

    async def _receive(self) -> Message:
        held = self._take_held()
        if held is not None:
            return await self._decoded(held)
        while True:
            if self._closed:
                raise AlreadyClosedError(f"{self.topic}: consumer is closed")
            item = self.queue.pop()
            if item is None:
                await self.queue.wait()
                continue
            batch, j = item
            if batch.owner.take(batch, j, j + 1):
                return await self._decoded(message_at(batch, j))

    def receive_nowait(self) -> Message | None:
        decoder = self._decoder
        held = self._held
        if held is not None:
            if decoder is None or not decoder.ready(held):
                return None
            self._held = None
            return decoder.decode_now(held)
        while (item := self.queue.pop()) is not None:
            batch, j = item
            if batch.owner.take(batch, j, j + 1):
                message = message_at(batch, j)
                if decoder is None:
                    return message
                if decoder.ready(message):
                    return decoder.decode_now(message)
                self._held = message
                decoder.prefetch(message)
                return None
        return None

    def _take_held(self) -> Message | None:
        held, self._held = self._held, None
        return held

    async def _decoded(self, message: Message) -> Message:
        if self._decoder is None:
            return message
        try:
            return await self._decoder.decode(message)
        except asyncio.CancelledError:
            self._held = message  # a receive timed out while the schema was fetched: keep it first
            raise

    def take_ranges(self, max_messages: int, max_bytes: int = 0, taken_bytes: int = 0, *,
                    handed_out: bool = True) -> list[Range]:
        """What is queued now, up to the limits (see ReceiverQueue.pop_ranges), as ranges of
        received batches; stale ones are dropped on the way. handed_out=False: a prefetch that
        records what the application takes itself (TopicConsumer.take)."""
        out: list[Range] = []
        while max_messages > 0 and len(self.queue) and (max_bytes <= 0 or taken_bytes < max_bytes):
            popped = self.queue.pop_ranges(max_messages, max_bytes, taken_bytes)
            if not popped:
                break
            for batch, first, end in popped:
                if batch.owner.take(batch, first, end, handed_out):
                    out.append((batch, first, end))
                    max_messages -= end - first
                    if max_bytes > 0:
                        taken_bytes += range_bytes(batch, first, end)
        return out

    async def batch_receive(self, max_messages: int | None = None, timeout_ms: int | None = None, *,
                            max_bytes: int | None = None) -> Messages:
        """Messages in bulk, as Pulsar's batchReceive: returns when max_messages or max_bytes are
        reached, or when timeout_ms has passed since the call (with what came until then, possibly
        nothing). Each limit defaults to the consumer's batch_receive_policy. The result is a
        Messages (a sequence of Message, made on access; to_arrow() gives a pyarrow.RecordBatch)
        that acknowledge() / acknowledge_cumulative() take as a whole."""
        policy = self.config.batch_receive_policy
        limit = policy.effective_max_messages(self.config.receiver_queue_size) if max_messages is None else max_messages
        limit_bytes = policy.max_num_bytes if max_bytes is None else max_bytes
        timeout = policy.timeout_ms if timeout_ms is None else timeout_ms
        if self._closed:
            raise AlreadyClosedError(f"{self.topic}: consumer is closed")
        ranges: list[Range] = []
        count = used = 0

        def take() -> bool:
            nonlocal count, used
            for batch, first, end in self.take_ranges(limit - count, limit_bytes, used):
                ranges.append((batch, first, end))
                count += end - first
                if limit_bytes > 0:
                    used += range_bytes(batch, first, end)
            return count >= limit or 0 < limit_bytes <= used

        if take():
            return await self._bulk(ranges)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout / 1000
        while not self._closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    await self.queue.wait()
            except TimeoutError:
                break
            if take():
                break
        return await self._bulk(ranges)

    async def _bulk(self, ranges: list[Range]) -> Messages:
        """A Messages; with a schema, its messages decode on access: the writers' schemas they need
        are fetched first, once per topic and version."""
        decoder = self._decoder
        if decoder is None:
            return Messages(ranges)
        seen: set[tuple[str, bytes | None]] = set()
        for batch, first, _ in ranges:
            if (batch.topic, batch.schema_version) not in seen:
                seen.add((batch.topic, batch.schema_version))
                await decoder.decode(message_at(batch, first))
        return Messages(ranges, decoder)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except AlreadyClosedError:
            raise StopAsyncIteration from None

    # ---- unsubscribe, close --------------------------------------------------------------------

    def is_connected(self) -> bool:
        return not self._closed and all(c.is_connected for c in self._children.values())

    def is_end_of_topic(self) -> bool:
        """True once every topic (partition) it reads is terminated and it has consumed it all (the
        broker's REACHED_END_OF_TOPIC), and no message is left in its queue; Pulsar's
        hasReachedEndOfTopic."""
        children = self._children.values()
        return bool(children) and all(c.reached_end_of_topic for c in children) and (
            self._held is None and len(self.queue) == 0
        )

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(c.unsubscribe() for c in self._children.values()))
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._discovery_task is not None:
            self._discovery_task.cancel()
        await gather_all((c.close() for c in self._children.values()), return_exceptions=True)
        if self._dead_letters is not None:
            await self._dead_letters.close()
        self.queue.close(AlreadyClosedError(f"{self.topic}: consumer is closed"))
        self.client.forget(self)

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

