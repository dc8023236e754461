"""Backpressure (PR-5), send timeout (PR-9) and reconnect with deduplication (PR-9, CO-6) against
a real broker: nothing admitted is lost, nothing is duplicated, order holds."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest

from velamq.client import (
    AsyncClient,
    MemoryBufferIsFullError,
    MessageId,
    OperationTimeoutError,
    ProducerQueueIsFullError,
    SendTimeoutError,
)
from velamq.testing import BrokerProcess

receive_timeout_ms = 15_000


async def drain_values(consumer: Any, count: int, quiet_ms: int = 500) -> list[bytes]:
    """The `count` messages that were stored (each may take up to receive_timeout_ms: a broker just
    restarted, on a loaded machine, is no quicker), then any more that come within quiet_ms (a
    duplicate would)."""
    out = []
    while True:
        try:
            m = await consumer.receive(receive_timeout_ms if len(out) < count else quiet_ms)
        except OperationTimeoutError:
            if len(out) < count:
                raise
            return out
        out.append(m.value)
        await consumer.acknowledge(m)


def test_fail_fast_gives_distinct_errors_and_loses_nothing(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(broker.service_url, memory_limit_bytes=50_000) as client:
            consumer = await client.subscribe(topic, "s")
            producer = await client.create_producer(topic, max_pending_messages=10, block_if_queue_full=False)
            admitted: list[asyncio.Future[MessageId]] = []
            queue_full = 0
            for i in range(200):
                try:
                    admitted.append(await producer.send_async(b"%d" % i))
                except ProducerQueueIsFullError:
                    queue_full += 1
            assert queue_full > 0 and len(admitted) >= 10
            sent = [int((await f) is not None and i) for i, f in enumerate(admitted)]
            assert len(sent) == len(admitted)
            values = await drain_values(consumer, len(admitted))
            assert len(values) == len(admitted) == len(set(values))
            assert [int(v) for v in values] == sorted(int(v) for v in values)  # in order

            big = await client.create_producer(f"{topic}-mem", max_pending_messages=0, block_if_queue_full=False)
            memory_full = 0
            futures = []
            for _ in range(20):
                try:
                    futures.append(await big.send_async(b"x" * 10_000))
                except MemoryBufferIsFullError:
                    memory_full += 1
            assert memory_full > 0 and futures
            await asyncio.gather(*futures)
            assert client.memory.used == 0  # every reservation was given back

    asyncio.run(main())


def test_blocking_senders_wait_and_everything_arrives(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(broker.service_url, memory_limit_bytes=20_000) as client:
            consumer = await client.subscribe(topic, "s")
            producer = await client.create_producer(topic, max_pending_messages=5, block_if_queue_full=True,
                                                    batching_enabled=True, batching_max_messages=3)
            futures = [await producer.send_async(b"%04d" % i + b"." * 1000) for i in range(300)]
            ids = await asyncio.gather(*futures)
            assert ids == sorted(ids) and len(set(ids)) == 300
            values = await drain_values(consumer, 300)
            assert [v[:4] for v in values] == [b"%04d" % i for i in range(300)]
            assert client.memory.used == 0

    asyncio.run(main())


def test_send_timeout_releases_permits_and_memory(fresh_broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(fresh_broker.service_url, operation_timeout_s=5) as client:
            producer = await client.create_producer(topic, send_timeout_ms=1000, max_pending_messages=10)
            await producer.send(b"before")
            fresh_broker.stop()
            futures = [await producer.send_async(b"lost") for _ in range(10)]
            results = await asyncio.gather(*futures, return_exceptions=True)
            assert all(isinstance(r, SendTimeoutError) for r in results)
            assert client.memory.used == 0
            assert producer.partition_producers[0].permits.used == 0

    asyncio.run(main())


def _enable_dedup(broker: BrokerProcess) -> None:
    req = urllib.request.Request(f"{broker.admin_url}/admin/v2/namespaces/public/default/deduplication",
                                 data=json.dumps(True).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 204)


@pytest.mark.parametrize("batching", [False, True])
def test_broker_restart_mid_stream_delivers_everything_once_in_order(fresh_broker: BrokerProcess, topic: str,
                                                                     batching: bool) -> None:
    _enable_dedup(fresh_broker)
    total = 1500

    async def main() -> None:
        async with AsyncClient(fresh_broker.service_url, operation_timeout_s=30, max_backoff_s=1.0) as client:
            # The subscription exists from the start; it is read once the stream is done, so what is
            # checked is the producer's side: resend after reconnect plus the broker's dedup.
            await (await client.subscribe(topic, "s", initial_position="earliest")).close()
            producer = await client.create_producer(topic, producer_name="restart-test", block_if_queue_full=True,
                                                    max_pending_messages=100, send_timeout_ms=60_000,
                                                    batching_enabled=batching, batching_max_messages=20)
            futures = []
            for i in range(total):
                futures.append(await producer.send_async(b"%05d" % i))
                if i == total // 3:
                    await asyncio.to_thread(fresh_broker.stop)
                    await asyncio.to_thread(fresh_broker.start)
            ids = await asyncio.gather(*futures)
            assert len(ids) == total
            consumer = await client.subscribe(topic, "s")
            values = await drain_values(consumer, total)
            assert values == [b"%05d" % i for i in range(total)]

    asyncio.run(main())
