"""CH-7 with the official client: chunked messages on Shared and Key_Shared subscriptions with three
consumers, two producers interleaving chunked messages with normal ones, and one consumer closed
mid-way. Every message is acknowledged exactly once, whole (the chunks of one message all go to
the consumer that got its first chunk, PIP-37)."""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
import time
from typing import Any

import pulsar
import pytest

pytestmark = pytest.mark.timeout(240)

CHUNKED = 8  # per producer
NORMAL = 60  # per producer
chunked_bytes = 6 * 1024 * 1024 + 1000  # two chunks at the broker's 5 MiB


def payload(producer: int, index: int, chunked: bool) -> bytes:
    head = f"p{producer}-{index}-".encode()
    if not chunked:
        return head + b"small"
    return head + random.Random(producer * 1000 + index).randbytes(chunked_bytes)


def key(data: bytes) -> str:
    return data.split(b"-", 2)[0].decode() + "-" + data.split(b"-", 2)[1].decode()


def kinds(producer_index: int) -> list[bool]:
    """Which of a producer's messages are chunked (True), in send order."""
    out = [True] * CHUNKED + [False] * NORMAL
    random.Random(producer_index).shuffle(out)
    return out


def produce(client: Any, topic: str, producer_index: int) -> None:
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    for index, chunked in enumerate(kinds(producer_index)):
        producer.send_async(payload(producer_index, index, chunked), None, partition_key=f"k{index % 7}")
    producer.flush()
    producer.close()


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
def test_chunked_messages_on_shared_subscriptions_with_a_consumer_closed_mid_way(
    client: Any, topic: str, sub_type: Any
) -> None:
    consumers = [client.subscribe(topic, "sub", consumer_type=sub_type, receiver_queue_size=20,
                                  consumer_name=f"c{i}") for i in range(3)]
    producers = [threading.Thread(target=produce, args=(client, topic, p)) for p in range(2)]
    for thread in producers:
        thread.start()
    total = 2 * (CHUNKED + NORMAL)
    acked: dict[str, str] = {}  # message key -> digest, once each
    twice: list[str] = []
    closed_after = 20
    closed: Any = None
    alive = list(consumers)
    deadline = time.monotonic() + 180
    while len(acked) < total and time.monotonic() < deadline:
        for consumer in list(alive):
            try:
                message = consumer.receive(50)
            except pulsar.Timeout:
                continue
            data = message.data()
            name = key(data)
            if closed is None and len(acked) >= closed_after:
                consumer.close()  # mid-way, with this message (and maybe more) not acknowledged
                alive.remove(consumer)
                closed = consumer
                continue
            if name in acked:
                twice.append(name)
            acked[name] = hashlib.sha256(data).hexdigest()
            consumer.acknowledge(message)
    for thread in producers:
        thread.join()
    assert closed is not None
    assert twice == []
    assert len(acked) == total
    for name, digest in acked.items():
        p, index = (int(x.lstrip("p")) for x in name.split("-"))
        assert hashlib.sha256(payload(p, index, kinds(p)[index])).hexdigest() == digest, name  # whole


@pytest.mark.parametrize("sub_type", ["shared", "key_shared"])
def test_velamq_consumers_get_chunked_messages_whole_on_shared_subscriptions(
    broker: Any, client: Any, topic: str, sub_type: str
) -> None:
    """The same with velamq's consumers (the official client produces)."""
    from velamq.client import AsyncClient

    async def main() -> None:
        async with AsyncClient(broker.service_url) as ours:
            consumers = [await ours.subscribe(f"persistent://public/default/{topic}", "sub",
                                              subscription_type=sub_type, receiver_queue_size=20)
                         for _ in range(3)]
            producers = [threading.Thread(target=produce, args=(client, topic, p)) for p in range(2)]
            for thread in producers:
                thread.start()
            total = 2 * (CHUNKED + NORMAL)
            acked: dict[str, str] = {}
            twice: list[str] = []
            closed: Any = None
            alive = list(consumers)
            deadline = time.monotonic() + 180
            while len(acked) < total and time.monotonic() < deadline:
                for consumer in list(alive):
                    try:
                        message = await consumer.receive(timeout_ms=50)
                    except TimeoutError:
                        continue
                    data = message.data()
                    if closed is None and len(acked) >= 20:
                        await consumer.close()  # mid-way, this message not acknowledged
                        alive.remove(consumer)
                        closed = consumer
                        continue
                    name = key(data)
                    if name in acked:
                        twice.append(name)
                    acked[name] = hashlib.sha256(data).hexdigest()
                    await consumer.acknowledge(message)
            for thread in producers:
                await asyncio.to_thread(thread.join)
            assert closed is not None and twice == [] and len(acked) == total
            for name, digest in acked.items():
                p, index = (int(x.lstrip("p")) for x in name.split("-"))
                assert hashlib.sha256(payload(p, index, kinds(p)[index])).hexdigest() == digest, name

    asyncio.run(main())
