"""The ordered consumer over the official client's pulsar.Client (OrderedConsumer.over_pulsar_client):
order per key with parallel workers, every message once, acknowledgement of the completed prefix
only (what a restarted consumer gets is exactly what follows it), and pauses that bound what is
in flight. No test asserts a duration: each waits for a condition."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from typing import Any

import pulsar
import pytest
from interop_helpers import create_partitioned_topic, full_name
from wait_helpers import until

from velamq.client import Message, OrderedConsumer
from velamq.testing import BrokerProcess


def produce(client: Any, topic: str, keys: list[str]) -> None:
    """One message per key in keys, batched; the payload is [key, sequence number within the key]."""
    producer = client.create_producer(full_name(topic), batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=5)
    seq: dict[str, int] = defaultdict(int)
    for key in keys:
        producer.send_async(json.dumps([key, seq[key]]).encode(), None, partition_key=key)
        seq[key] += 1
    producer.flush()
    producer.close()


@pytest.mark.parametrize(("ack_mode", "assignment"),
                         [("cumulative", "hash"), ("individual", "hash"), ("cumulative", "free_worker")])
def test_order_per_key_and_prefix_acks_over_the_official_client(broker: BrokerProcess, client: Any,
                                                                 topic: str, ack_mode: str, assignment: str) -> None:
    create_partitioned_topic(broker.admin_url, topic, 2)
    keys = [f"key-{i % 30}" for i in range(600)]
    produce(client, topic, keys)
    done: dict[str, list[int]] = defaultdict(list)
    overlapped = asyncio.Event()
    running = [0]

    async def handle(message: Message) -> None:
        running[0] += 1
        if running[0] >= 2:
            overlapped.set()
        key, seq = json.loads(message.value)
        assert message.key == key
        await overlapped.wait()  # two handlers run at once by construction
        running[0] -= 1
        done[key].append(seq)

    async def main() -> Any:
        consumer = OrderedConsumer.over_pulsar_client(client, topic, "s", handle, partition_parallelism=4,
                                                      max_in_flight=40, initial_position="earliest",
                                                      ack_mode=ack_mode, key_assignment=assignment)
        async with consumer:
            await until(lambda: consumer.metrics().acknowledged == len(keys), "every message acknowledged")
            return consumer.metrics()

    m = asyncio.run(main())
    for key, seqs in done.items():
        assert seqs == sorted(seqs), f"key {key} out of order: {seqs}"
    assert sorted((k, s) for k, seqs in done.items() for s in seqs) == sorted(
        (f"key-{k}", s) for k in range(30) for s in range(20))
    assert m.received == m.completed == len(keys) and len(m.partitions) == 2
    assert all(p.in_flight_max <= 40 and p.error is None for p in m.partitions)
    # Everything was acknowledged: a new consumer of the subscription gets nothing.
    check = client.subscribe([full_name(f"{topic}-partition-{i}") for i in range(2)], "s",
                             consumer_type=pulsar.ConsumerType.Failover)
    try:
        check.receive(500)
        raise AssertionError("a message came again after every message was acknowledged")
    except pulsar.Timeout:
        pass
    check.close()


def test_a_stuck_head_pauses_and_a_restart_resumes_after_the_acknowledged_prefix(
        broker: BrokerProcess, client: Any, topic: str) -> None:
    keys = [f"k{i % 8}" for i in range(200)]
    produce(client, topic, keys)
    first_run: list[tuple[str, int]] = []
    stuck: list[str] = []

    async def stuck_on_k3_5(message: Message) -> None:
        key, seq = json.loads(message.value)
        if (key, seq) == ("k3", 5):
            stuck.append(key)
            await asyncio.Event().wait()  # never finishes: the prefix cannot pass it
        first_run.append((key, seq))

    async def first() -> Any:
        consumer = OrderedConsumer.over_pulsar_client(client, topic, "s", stuck_on_k3_5, partition_parallelism=4,
                                                      max_in_flight=30, initial_position="earliest")
        await consumer.start()
        await until(lambda: consumer.metrics().partitions[0].paused and
                    consumer.metrics().partitions[0].completed_behind_head > 0,
                    "the partition paused, later messages done behind the stuck one")
        m = consumer.metrics().partitions[0]
        await consumer.close(timeout_s=0.5)  # the stuck handler is cancelled: not acknowledged
        return m

    m = asyncio.run(first())
    assert m.in_flight == 30 and m.completed_behind_head >= 1 and stuck == ["k3"]
    acknowledged = m.acknowledged
    second_run: list[tuple[str, int]] = []

    async def record(message: Message) -> None:
        second_run.append(tuple(json.loads(message.value)))  # type: ignore[arg-type]

    async def second() -> None:
        consumer = OrderedConsumer.over_pulsar_client(client, topic, "s", record, partition_parallelism=4,
                                                      initial_position="earliest")
        async with consumer:
            await until(lambda: consumer.metrics().completed == len(keys) - acknowledged, "the rest handled")

    asyncio.run(second())
    produced = []
    seq: dict[str, int] = defaultdict(int)
    for key in keys:
        produced.append((key, seq[key]))
        seq[key] += 1
    # What came again is exactly the suffix after the acknowledged prefix, in partition order per key.
    assert sorted(second_run) == sorted(produced[acknowledged:])
    assert set(produced[:acknowledged]) <= set(first_run)
    for key in {k for k, _ in second_run}:
        seqs = [s for k, s in second_run if k == key]
        assert seqs == sorted(seqs)
