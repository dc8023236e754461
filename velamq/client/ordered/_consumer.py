"""The ordered key-parallel consumer (ZTO's ordered consumption, OC-1..OC-4): order per key, keys in parallel.

    async def handle(message): ...                  # or a plain function: threads, or processes
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

ZTO's model (their ZMS on Kafka), on Pulsar: one consumer per partition ("t-partition-i",
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
    key_assignment          "hash" (default; OC-1, ZTO's design): a key always runs on worker
                            hash(key) % N, so each worker sees a fixed set of keys (per-worker
                            state, caches). "free_worker": a key's next message runs on whichever
                            worker is free once its previous one finished (as Kafka's parallel
                            consumers order by key): the same order per key, but no worker waits
                            while another key has work, so an uneven spread of keys over the
                            workers no longer bounds the partition (async and thread modes)
    max_attempts, retry_initial_backoff_ms, retry_max_backoff_ms, dead_letter_topic
                            the failure policy (RetryPolicy): retry on the same worker with
                            backoff for ever, or max_attempts times and then the dead-letter topic
    handler_mode            "auto" (default): "async" for a coroutine function, else "thread";
                            "async": awaited on the client's loop (I/O-bound work);
                            "thread": a plain function in a thread pool (blocking I/O, or C code
                            that releases the GIL); "process": a plain, picklable function in
                            `processes` handler processes (CPU-bound Python: _processes.py)
    executor                where thread-mode handlers run; default a thread pool with one
                            thread per worker (partitions x N, at most 256), closed with the consumer
    processes               the process mode's number of processes (default: the CPU count)

The partition list is read once, at start().
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from velamq._clock import Clock
from velamq._topic_name import TopicName
from velamq.client._config import ConsumerConfig
from velamq.client._errors import InvalidConfigurationError
from velamq.client._message import Message
from velamq.client.consumer._consumer import Consumer
from velamq.client.consumer._dead_letter import DeadLetterSender, ProducerFactory
from velamq.client.ordered._failures import Failures, RetryPolicy
from velamq.client.ordered._key_workers import AsyncKeyWorkers, ThreadKeyWorkers
from velamq.client.ordered._lanes import AsyncLanes, ThreadLanes
from velamq.client.ordered._metrics import OrderedConsumerMetrics
from velamq.client.ordered._official import OfficialClient
from velamq.client.ordered._partition import (
    ACK_MODES,
    KEY_ASSIGNMENTS,
    UNKEYED_MODES,
    LanesFactory,
    PartitionRunner,
    PartitionSettings,
    PartitionSource,
)
from velamq.client.ordered._processes import ProcessLanes, ProcessPool
from velamq.client.ordered._progress import KeyHashes


class OrderedClient(ProducerFactory, Protocol):
    """What the ordered consumer needs of its client (AsyncClient is one): partition counts, a
    consumer per partition, the clock, and a producer for dead letters."""

    clock: Clock

    async def partitions_of(self, topic: str) -> int: ...

    async def subscribe(self, topic: str, subscription_name: str, config: ConsumerConfig) -> PartitionSource: ...

log = logging.getLogger("velamq.client")

Handler = Callable[[Message], Awaitable[object] | object]
receiver_queue_size_default = 100
close_timeout_s_default = 30.0
# A plain-function handler gets one thread per worker, up to this many threads.
handler_threads_max = 256
HANDLER_MODES = ("auto", "async", "thread", "process")


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
    """Consumes a topic with order per key and keys in parallel (OC-1..OC-4).

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
                 consumer_config: ConsumerConfig | None = None, handler_mode: str = "auto",
                 processes: int | None = None, key_assignment: str = "hash") -> None:
        if partition_parallelism < 1:
            raise InvalidConfigurationError("partition_parallelism must be >= 1")
        if max_in_flight < 1:
            raise InvalidConfigurationError("max_in_flight must be >= 1")
        if ack_mode not in ACK_MODES:
            raise InvalidConfigurationError(f"ack_mode must be one of {list(ACK_MODES)}, not {ack_mode!r}")
        if unkeyed not in UNKEYED_MODES:
            raise InvalidConfigurationError(f"unkeyed must be one of {list(UNKEYED_MODES)}, not {unkeyed!r}")
        self.handler_mode = _handler_mode(handler, handler_mode)
        if key_assignment not in KEY_ASSIGNMENTS:
            raise InvalidConfigurationError(
                f"key_assignment must be one of {list(KEY_ASSIGNMENTS)}, not {key_assignment!r}")
        if key_assignment == "free_worker" and self.handler_mode == "process":
            raise InvalidConfigurationError(
                "key_assignment 'free_worker' runs handlers on the loop or in threads; the process mode "
                "hashes keys to its processes")
        if processes is not None and processes < 1:
            raise InvalidConfigurationError("processes must be >= 1")
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
                                          key_window_messages, key_assignment)
        self._executor = executor
        # The process mode's pool: the handler is pickled now, so a handler that cannot be is refused here.
        self._pool = ProcessPool(handler, processes or os.cpu_count() or 1, self.retry_policy) \
            if self.handler_mode == "process" else None
        self._hashes = KeyHashes()
        self._own_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._dead_letters = DeadLetterSender(client, dead_letter_topic) if dead_letter_topic else None
        self._runners: list[PartitionRunner] = []
        self._sources: list[PartitionSource] = []
        self._started_s: float | None = None
        self._state = "new"

    @classmethod
    def over_pulsar_client(cls, client: Any, topic: str, subscription: str, handler: Handler,
                           **options: Any) -> OrderedConsumer:
        """The same consumer over the official client's pulsar.Client (ordered/_official.py): one
        pulsar.Consumer per partition; the handler receives velamq Messages."""
        # OfficialClient's dead-letter producer has the send() and close() DeadLetterSender uses.
        return cls(cast(OrderedClient, OfficialClient(client)), topic, subscription, handler, **options)

    def __repr__(self) -> str:
        return (f"OrderedConsumer({self.topic!r}, {self.subscription!r}, "
                f"partition_parallelism={self.settings.parallelism}, {self._state})")

    @property
    def partition_topics(self) -> list[str]:
        return [r.topic for r in self._runners]

    @property
    def consumers(self) -> list[Consumer]:
        """The per-partition consumers (for inspection; the ordered consumer owns them). Empty over
        the official client."""
        return [s for s in self._sources if isinstance(s, Consumer)]

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state != "new":
            raise InvalidConfigurationError(f"start() on a {self._state} ordered consumer; make a new one")
        self._state = "starting"
        name = TopicName.parse(self.topic)
        partitions = await self.client.partitions_of(self.topic)
        targets = [(str(name.partition(i)), i) for i in range(partitions)] if partitions else \
            [(self.topic, name.partition_index)]
        if self.handler_mode == "thread" and self._executor is None:
            threads = min(handler_threads_max, len(targets) * self.settings.parallelism)
            self._own_executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="velamq-ordered")
            self._executor = self._own_executor
        if self._pool is not None:
            try:
                await self._pool.start()
            except BaseException:
                self._state = "closed"
                raise
        results = await asyncio.gather(*(self.client.subscribe(t, self.subscription, self.consumer_config)
                                         for t, _ in targets), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        consumers = [r for r in results if not isinstance(r, BaseException)]
        if failures:
            await asyncio.gather(*(c.close() for c in consumers), return_exceptions=True)
            if self._pool is not None:
                await self._pool.close(0.0)
            self._shutdown_executor()
            self._state = "closed"
            raise failures[0]
        self._sources = consumers
        self._runners = [PartitionRunner(t, index, consumer, self._lanes_for(index), self.settings,
                                         self.client.clock, self._failures(t), self._hashes)
                         for (t, index), consumer in zip(targets, consumers, strict=True)]
        self._started_s = self.client.clock.monotonic_s()
        for runner in self._runners:
            runner.start()
        self._state = "running"

    def _failures(self, topic: str) -> Failures:
        return Failures(topic, self.retry_policy, self._dead_letters, asyncio.Event())

    def _lanes_for(self, partition: int) -> LanesFactory:
        """How the partition's lanes run the handler (made once its runner exists)."""
        handler = self.handler
        free = self.settings.free_workers
        n = self.settings.parallelism
        if self.handler_mode == "async":
            if free:
                return lambda runner: AsyncKeyWorkers(runner, handler, n, runner.topic)  # type: ignore[arg-type]
            return lambda runner: AsyncLanes(runner, handler, runner.topic)  # type: ignore[arg-type]
        if self.handler_mode == "thread":
            executor = self._executor
            assert executor is not None
            if free:
                return lambda runner: ThreadKeyWorkers(runner, handler, n, executor)
            return lambda runner: ThreadLanes(runner, handler, executor)
        pool = self._pool
        assert pool is not None
        return lambda runner: ProcessLanes(runner, pool, partition)

    async def close(self, drain: bool = False, timeout_s: float = close_timeout_s_default) -> None:
        """Stop: no more fetching; running handlers finish (with drain, everything already fetched
        does), the completed prefix is acknowledged, the partition consumers close. What did not
        finish within timeout_s is not acknowledged, so the broker delivers it again."""
        if self._state in ("closed", "closing"):
            return
        self._state = "closing"
        await asyncio.gather(*(r.stop(drain, timeout_s) for r in self._runners), return_exceptions=True)
        if self._pool is not None:
            await self._pool.close(timeout_s)
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


def _handler_mode(handler: Handler, mode: str) -> str:
    if mode not in HANDLER_MODES:
        raise InvalidConfigurationError(f"handler_mode must be one of {list(HANDLER_MODES)}, not {mode!r}")
    is_async = is_async_handler(handler)
    if mode == "auto":
        return "async" if is_async else "thread"
    if is_async != (mode == "async"):
        raise InvalidConfigurationError(
            f"handler_mode {mode!r} needs {'a coroutine function' if mode == 'async' else 'a plain function'}")
    return mode

