"""The blocking facade (PR-10): the same client, producers, consumers and readers with plain
methods, for code that is not asyncio. The AsyncClient runs on its own event-loop thread; every
call is submitted to that loop and waited for, except receiving and acknowledging: consumers and
readers receive from a local prefetch and hand acknowledgements over without waiting
(_consumer.py).

    with Client("pulsar://localhost:6650") as client:
        producer = client.create_producer("t")
        producer.send(b"x")                        # waits for the receipt
        future = producer.send_async(b"y")         # waits only for admission (block_if_queue_full)
        consumer = client.subscribe("t", "sub")
        msg = consumer.receive(timeout_ms=1000)
        consumer.acknowledge(msg)

send_async returns a concurrent.futures.Future of the MessageId; an optional callback is called
with (message_id, None) or (None, error) on the client's loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import weakref
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from velamq.client._client import AsyncClient
from velamq.client._config import ClientConfig
from velamq.client._errors import AlreadyClosedError
from velamq.client._message import MessageId
from velamq.client.blocking._consumer import BlockingConsumer, BlockingReader
from velamq.client.blocking._loop import ClientLoop
from velamq.client.producer._producer import Producer
from velamq.client.transport._failover import ServiceInfo, ServiceInfoProvider
from velamq.client.transport._lookup import DiscoveryStats

R = TypeVar("R")
SendCallback = Callable[[MessageId | None, BaseException | None], None]


class Client:
    """The blocking client: an AsyncClient running on its own event-loop thread, with plain methods.

    Every call is submitted to that loop and waited for, so it may be used from any number of
    threads (but not from inside the loop itself). It hands out BlockingProducer, BlockingConsumer
    and BlockingReader, thin wrappers with the same methods as their asyncio counterparts.
    """

    def __init__(self, service_url: str | ServiceInfoProvider, config: ClientConfig | None = None,
                 **options: Any) -> None:
        self._loop = ClientLoop()

        async def make() -> AsyncClient:
            return AsyncClient(service_url, config, **options)

        try:
            self._client = self._loop.run(make())
        except BaseException:
            self._loop.stop()
            raise
        # Consumers and readers made here: their handed-over acknowledgements go before the close.
        self._receivers: weakref.WeakSet[Any] = weakref.WeakSet()

    @property
    def async_client(self) -> AsyncClient:
        return self._client

    def get_service_info(self) -> ServiceInfo:
        """The cluster in use now (it changes with an AutoClusterFailover given as the service URL)."""
        return self._client.get_service_info()

    def _run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        return self._loop.run(coroutine)

    def create_producer(self, topic: str, *args: Any, **options: Any) -> BlockingProducer:
        return BlockingProducer(self._loop, self._run(self._client.create_producer(topic, *args, **options)))

    def subscribe(self, topic: Any = None, subscription_name: str | None = None, *args: Any,
                  **options: Any) -> BlockingConsumer:
        consumer = BlockingConsumer(self._loop, self._run(self._client.subscribe(topic, subscription_name, *args,
                                                                                 **options)))
        self._receivers.add(consumer)
        return consumer

    def create_reader(self, topic: str, start_message_id: Any = "latest", *args: Any, **options: Any) -> BlockingReader:
        reader = BlockingReader(self._loop, self._run(self._client.create_reader(topic, start_message_id, *args,
                                                                                 **options)))
        self._receivers.add(reader)
        return reader

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._run(self._client.get_topic_partitions(topic))

    def discovery_stats(self) -> DiscoveryStats:
        """AsyncClient.discovery_stats, read on the client's loop (the one owner of the counts)."""
        async def read() -> DiscoveryStats:
            return self._client.discovery_stats()

        return self._run(read())

    def close(self) -> None:
        if self._loop.closed:
            return
        receivers = list(self._receivers)

        async def close() -> None:
            for receiver in receivers:
                receiver._acks.drain()
            await self._client.close()

        self._loop.run(close())
        self._loop.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingProducer:
    """A Producer for the blocking Client: send() waits for the receipt, send_async() only for admission."""

    def __init__(self, loop: ClientLoop, producer: Producer) -> None:
        self._loop = loop
        self.async_producer = producer

    @property
    def topic(self) -> str:
        return self.async_producer.topic

    @property
    def producer_name(self) -> str:
        return self.async_producer.producer_name

    @property
    def last_sequence_id(self) -> int:
        return self.async_producer.last_sequence_id

    def send(self, value: Any, **kwargs: Any) -> MessageId:
        return self._loop.run(self.async_producer.send(value, **kwargs))

    def send_async(self, value: Any, callback: SendCallback | None = None,
                   **kwargs: Any) -> concurrent.futures.Future[MessageId]:
        result: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        def transfer(future: asyncio.Future[MessageId]) -> None:
            error = future.exception() if not future.cancelled() else AlreadyClosedError("send cancelled")
            if error is not None:
                result.set_exception(error)
            else:
                result.set_result(future.result())
            if callback is not None:
                callback(None if error is not None else future.result(), error)

        async def admit() -> None:
            inner = await self.async_producer.send_async(value, **kwargs)
            inner.add_done_callback(transfer)

        self._loop.run(admit())
        return result

    def send_many(self, values: Any, **kwargs: Any) -> Sequence[MessageId]:
        """Producer.send_many: many messages at once; waits for every receipt."""
        return self._loop.run(self.async_producer.send_many(values, **kwargs))

    def flush(self) -> None:
        self._loop.run(self.async_producer.flush())

    def is_connected(self) -> bool:
        return self.async_producer.is_connected()

    def close(self) -> None:
        self._loop.run(self.async_producer.close())

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
