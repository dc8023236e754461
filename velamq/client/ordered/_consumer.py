"""The ordered key-parallel consumer (ZTO's design, OC-1..OC-4): order per key, keys in parallel.

    async def handle(message): ...                  # or a plain function: it runs in a thread pool
    async with AsyncClient(url) as client:
        consumer = OrderedConsumer(client, "orders", "billing", handle,
                                   partition_parallelism=8, max_in_flight=1000)
        await consumer.start()
        ...
        print(consumer.metrics().partition(0).effective_parallelism)
        await consumer.close()                      # or: async with OrderedConsumer(...) as consumer

    with Client(url) as client:                     # the blocking facade: the same, on the client's loop
        consumer = BlockingOrderedConsumer(client, "orders", "billing", handle_sync, partition_parallelism=8)
        consumer.start(); ...; consumer.stop()

ZTO's model (ZMS on Kafka), on Pulsar: one consumer per partition ("t-partition-i",
a Failover subscription by default, so several instances share the partitions and take over from
each other), and per partition N workers; a message runs on worker hash(key) % N. Messages of one
key stay in order (one worker, one at a time), keys run in parallel, and partition_parallelism=1
is strict partition order. How each partition fetches, pauses, retries and acknowledges is in
_partition.py; what the metrics mean, in _metrics.py.

Options (per partition unless said otherwise):

    partition_parallelism   N workers; ZTO's orderlyConsumePartitionParallelism
    max_in_flight           M: messages received and not yet acknowledged; at M, fetching pauses
    receiver_queue_size     the partition consumer's queue; small (default min(M, 100)) so that a
                            pause stops the broker quickly and memory stays near M messages
    ack_mode                "cumulative" (default): one cumulative ack of the prefix's last id
                            (with batch-index acks, so a half-finished batch is exact);
                            "individual": every id of the prefix (for chunked messages of several
                            producers that interleave, where a cumulative ack could cover chunks
                            of a message still being assembled)
    unkeyed                 messages without key: "ordered" (default) all go to worker 0 and keep
                            their partition order; "round_robin" spreads them, without order
    max_attempts, retry_initial_backoff_ms, retry_max_backoff_ms, dead_letter_topic
                            the failure policy (RetryPolicy): retry on the same worker with
                            backoff for ever, or max_attempts times and then the dead-letter topic
    executor                where plain-function handlers run; default a thread pool with one
                            thread per worker (partitions x N), closed with the consumer

The partition list is read once, at start().
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from velamq._clock import Clock
from velamq._topic_name import TopicName
from velamq.client._config import ConsumerConfig
from velamq.client._errors import InvalidConfigurationError
from velamq.client._message import Message
from velamq.client.consumer._consumer import Consumer
from velamq.client.consumer._dead_letter import DeadLetterSender, ProducerFactory
from velamq.client.ordered._metrics import OrderedConsumerMetrics
from velamq.client.ordered._partition import (
    ACK_MODES,
    UNKEYED_MODES,
    HandlerCall,
    PartitionRunner,
    PartitionSettings,
    RetryPolicy,
)


class OrderedClient(ProducerFactory, Protocol):
    """What the ordered consumer needs of its client (AsyncClient is one): partition counts, a
    consumer per partition, the clock, and a producer for dead letters."""

    clock: Clock

    async def partitions_of(self, topic: str) -> int: ...

    async def subscribe(self, topic: str, subscription_name: str, config: ConsumerConfig) -> Consumer: ...

log = logging.getLogger("velamq.client")

Handler = Callable[[Message], Awaitable[object] | object]
receiver_queue_size_default = 100
close_timeout_s_default = 30.0
# A plain-function handler gets one thread per worker, up to this many threads.
handler_threads_max = 256


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """A coroutine function, a partial of one, or an object whose __call__ is one."""
    target: Any = handler
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - a callable object's async __call__
    return call is not None and inspect.iscoroutinefunction(call)


class OrderedConsumer:
    """Consumes a topic with order per key and keys in parallel (ZTO's ordered consumption).

    One Failover consumer per partition, each with partition_parallelism workers: a message runs on
    worker hash(key) % N, so messages of one key are handled one at a time in their order while
    other keys run alongside. At most max_in_flight messages per partition are received and not yet
    acknowledged; the acknowledged position only moves over a prefix of finished messages. A
    handler that fails is retried by its RetryPolicy, then dead-lettered. start() subscribes,
    close() drains (or not) and closes.
    """

    def __init__(self, client: OrderedClient, topic: str, subscription: str, handler: Handler, *,
                 partition_parallelism: int = 1, max_in_flight: int = 1000, subscription_type: str = "failover",
                 initial_position: str = "latest", receiver_queue_size: int | None = None,
                 consumer_name: str | None = None, ack_mode: str = "cumulative", unkeyed: str = "ordered",
                 max_attempts: int | None = None, retry_initial_backoff_ms: int = 100,
                 retry_max_backoff_ms: int = 10_000, dead_letter_topic: str | None = None,
                 executor: concurrent.futures.Executor | None = None, key_window_messages: int = 1000,
                 consumer_config: ConsumerConfig | None = None) -> None:
        if partition_parallelism < 1:
            raise InvalidConfigurationError("partition_parallelism must be >= 1")
        if max_in_flight < 1:
            raise InvalidConfigurationError("max_in_flight must be >= 1")
        if ack_mode not in ACK_MODES:
            raise InvalidConfigurationError(f"ack_mode must be one of {list(ACK_MODES)}, not {ack_mode!r}")
        if unkeyed not in UNKEYED_MODES:
            raise InvalidConfigurationError(f"unkeyed must be one of {list(UNKEYED_MODES)}, not {unkeyed!r}")
        queue_size = receiver_queue_size if receiver_queue_size is not None else \
            min(max_in_flight, receiver_queue_size_default)
        options: dict[str, Any] = {"subscription_type": subscription_type, "initial_position": initial_position,
                                   "receiver_queue_size": queue_size, "batch_index_ack_enabled": True}
        if consumer_name is not None:
            options["consumer_name"] = consumer_name
        config = (consumer_config or ConsumerConfig()).with_options(**options)
        if config.subscription_type not in ("failover", "exclusive"):
            raise InvalidConfigurationError(
                "the ordered consumer needs one consumer per partition: subscription_type 'failover' or 'exclusive'")
        if config.ack_timeout_ms or config.dead_letter_policy is not None:
            raise InvalidConfigurationError(
                "ack_timeout_ms and dead_letter_policy would redeliver messages still in flight; "
                "use max_attempts / dead_letter_topic of the ordered consumer")
        self.client = client
        self.topic = str(TopicName.parse(topic))
        self.subscription = subscription
        self.handler = handler
        self.consumer_config = config
        self.retry_policy = RetryPolicy(max_attempts, retry_initial_backoff_ms, retry_max_backoff_ms,
                                        dead_letter_topic)
        self.settings = PartitionSettings(partition_parallelism, max_in_flight, ack_mode, unkeyed, self.retry_policy,
                                          key_window_messages)
        self._is_async = is_async_handler(handler)
        self._executor = executor
        self._own_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._dead_letters = DeadLetterSender(client, dead_letter_topic) if dead_letter_topic else None
        self._runners: list[PartitionRunner] = []
        self._consumers: list[Consumer] = []
        self._started_s: float | None = None
        self._state = "new"

    def __repr__(self) -> str:
        return (f"OrderedConsumer({self.topic!r}, {self.subscription!r}, "
                f"partition_parallelism={self.settings.parallelism}, {self._state})")

    @property
    def partition_topics(self) -> list[str]:
        return [r.topic for r in self._runners]

    @property
    def consumers(self) -> list[Consumer]:
        """The per-partition consumers (for inspection; the ordered consumer owns them)."""
        return list(self._consumers)

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state != "new":
            raise InvalidConfigurationError(f"start() on a {self._state} ordered consumer; make a new one")
        self._state = "starting"
        name = TopicName.parse(self.topic)
        partitions = await self.client.partitions_of(self.topic)
        targets = [(str(name.partition(i)), i) for i in range(partitions)] if partitions else \
            [(self.topic, name.partition_index)]
        if not self._is_async and self._executor is None:
            threads = min(handler_threads_max, len(targets) * self.settings.parallelism)
            self._own_executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="velamq-ordered")
            self._executor = self._own_executor
        results = await asyncio.gather(*(self.client.subscribe(t, self.subscription, self.consumer_config)
                                         for t, _ in targets), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        consumers = [r for r in results if isinstance(r, Consumer)]
        if failures:
            await asyncio.gather(*(c.close() for c in consumers), return_exceptions=True)
            self._shutdown_executor()
            self._state = "closed"
            raise failures[0]
        call = self._handler_call()
        self._consumers = consumers
        self._runners = [PartitionRunner(t, index, consumer, call, self.settings, self.client.clock,
                                         self._dead_letters)
                         for (t, index), consumer in zip(targets, consumers, strict=True)]
        self._started_s = self.client.clock.monotonic_s()
        for runner in self._runners:
            runner.start()
        self._state = "running"

    def _handler_call(self) -> HandlerCall:
        handler = self.handler
        if self._is_async:
            async def call_async(message: Message) -> object:
                return await handler(message)  # type: ignore[misc]

            return call_async
        executor = self._executor

        async def call_in_thread(message: Message) -> object:
            result = await asyncio.get_running_loop().run_in_executor(executor, handler, message)
            if inspect.isawaitable(result):
                # A plain function that returned a coroutine: run it here rather than drop it.
                return await result
            return result

        return call_in_thread

    async def close(self, drain: bool = False, timeout_s: float = close_timeout_s_default) -> None:
        """Stop: no more fetching; running handlers finish (with drain, everything already fetched
        does), the completed prefix is acknowledged, the partition consumers close. What did not
        finish within timeout_s is not acknowledged, so the broker delivers it again."""
        if self._state in ("closed", "closing"):
            return
        self._state = "closing"
        await asyncio.gather(*(r.stop(drain, timeout_s) for r in self._runners), return_exceptions=True)
        await asyncio.gather(*(r.consumer.close() for r in self._runners), return_exceptions=True)
        if self._dead_letters is not None:
            await self._dead_letters.close()
        self._shutdown_executor()
        self._state = "closed"

    stop = close

    def _shutdown_executor(self) -> None:
        if self._own_executor is not None:
            # Handlers still running after the timeout cannot be interrupted; do not wait for them.
            self._own_executor.shutdown(wait=False, cancel_futures=True)
            self._own_executor = None

    async def __aenter__(self) -> OrderedConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- metrics -------------------------------------------------------------------------------

    def metrics(self) -> OrderedConsumerMetrics:
        """A snapshot of every partition's figures (call it on the client's loop)."""
        now = self.client.clock.monotonic_s()
        elapsed = now - self._started_s if self._started_s is not None else 0.0
        return OrderedConsumerMetrics(self.topic, self.subscription, tuple(r.metrics() for r in self._runners),
                                      elapsed)

