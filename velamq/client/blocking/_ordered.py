"""The ordered key-parallel consumer for the blocking Client (docs/client.md): the asyncio
OrderedConsumer, run on the client's event-loop thread."""

from __future__ import annotations

from typing import Any

from velamq.client.blocking._client import Client
from velamq.client.ordered._consumer import Handler, OrderedConsumer, close_timeout_s_default
from velamq.client.ordered._metrics import OrderedConsumerMetrics


class BlockingOrderedConsumer:
    """OrderedConsumer for the blocking Client: it runs on the client's event-loop thread."""

    def __init__(self, client: Client, topic: str, subscription: str, handler: Handler, **options: Any) -> None:
        self._loop = client._loop

        async def make() -> OrderedConsumer:
            return OrderedConsumer(client.async_client, topic, subscription, handler, **options)

        self.async_consumer = self._loop.run(make())

    def start(self) -> None:
        self._loop.run(self.async_consumer.start())

    def close(self, drain: bool = False, timeout_s: float = close_timeout_s_default) -> None:
        self._loop.run(self.async_consumer.close(drain, timeout_s))

    stop = close

    def metrics(self) -> OrderedConsumerMetrics:
        async def snapshot() -> OrderedConsumerMetrics:
            return self.async_consumer.metrics()

        return self._loop.run(snapshot())

    def __enter__(self) -> BlockingOrderedConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
