"""The ordered key-parallel consumer against a real broker (OC-1..OC-4): order per key with
parallel workers, acknowledgement of the contiguous prefix only (a killed consumer loses nothing
and gets back only what follows that prefix), pauses that bound what is in flight, failures
retried in place or dead-lettered, and the metrics. No test asserts a duration: parallelism is
shown by the number of handlers seen running at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from wait_helpers import until, wait_until

from velamq.client import (
    AsyncClient,
    BlockingOrderedConsumer,
    Client,
    Message,
    MessageId,
    OperationTimeoutError,
    OrderedConsumer,
)
from velamq.testing import BrokerProcess

R = TypeVar("R")


def run(broker: BrokerProcess, body: Callable[[AsyncClient], Awaitable[R]]) -> R:
    async def main() -> R:
        async with AsyncClient(broker.service_url, operation_timeout_s=15) as client:
            return await asyncio.wait_for(body(client), 120)

    return asyncio.run(main())


def create_partitioned_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/partitions"
    req = urllib.request.Request(url, data=json.dumps(partitions).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 204)


async def produce(client: AsyncClient, topic: str, keys: list[str], batching: bool = True) -> list[MessageId]:
    """One message per entry of keys; the payload is [key, sequence number within the key]."""
    producer = await client.create_producer(topic, batching_enabled=batching, batching_max_messages=10,
                                            block_if_queue_full=True)
    seq: dict[str, int] = defaultdict(int)
    futures = []
    for key in keys:
        futures.append(await producer.send_async(json.dumps([key, seq[key]]).encode(), key=key))
        seq[key] += 1
    ids = list(await asyncio.gather(*futures))
    await producer.close()
    return ids


def backlog(broker: BrokerProcess, topic: str, partitions: int) -> int:
    """The subscription "s"'s backlog over every partition, from the broker's stats."""
    total = 0
    for p in range(partitions):
        url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}-partition-{p}/stats"
        with urllib.request.urlopen(url, timeout=10) as resp:
            total += int(json.loads(resp.read())["subscriptions"]["s"]["msgBacklog"])
    return total


def assert_in_order(done: dict[str, list[int]]) -> None:
    for key, seqs in done.items():
        assert seqs == sorted(seqs), f"key {key} out of order: {seqs}"


def test_keys_stay_in_order_while_workers_run_in_parallel(broker: BrokerProcess, topic: str) -> None:
    create_partitioned_topic(broker, topic, 4)
    keys = [f"key-{i % 40}" for i in range(1200)]

    async def body(client: AsyncClient) -> None:
        await produce(client, topic, keys)
        done: dict[str, list[int]] = defaultdict(list)
        running = [0, 0]  # now, most at once

        async def handle(message: Message) -> None:
            running[0] += 1
            running[1] = max(running[1], running[0])
            key, seq = json.loads(message.value)
            await asyncio.sleep((seq * 7 % 4) / 1000)  # uneven work: completion order differs from arrival
            running[0] -= 1
            done[key].append(seq)

        async with OrderedConsumer(client, topic, "s", handle, partition_parallelism=4, max_in_flight=100,
                                   initial_position="earliest") as consumer:
            await until(lambda: consumer.metrics().acknowledged == len(keys), "every message acknowledged")
            m = consumer.metrics()
        assert_in_order(done)
        assert sum(len(s) for s in done.values()) == len(keys)  # each exactly once
        assert running[1] >= 2
        assert len(m.partitions) == 4 and m.received == m.completed == len(keys)
        busiest = max(m.partitions, key=lambda p: p.max_busy_workers)
        assert busiest.max_busy_workers >= 2 and busiest.effective_parallelism > 1.0
        assert all(p.max_busy_workers <= 4 and p.in_flight_max <= 100 and p.error is None for p in m.partitions)
        # The acknowledgements reached the broker: the subscription has nothing left.
        check = await client.subscribe(topic, "s", subscription_type="failover")
        with pytest.raises(OperationTimeoutError):
            await check.receive(500)
        await check.close()

    run(broker, body)


def test_thread_pool_handler_through_the_blocking_client(broker: BrokerProcess, topic: str) -> None:
    keys = [f"k{i % 20}" for i in range(300)]
    run(broker, lambda client: produce(client, topic, keys, batching=False))
    done: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()
    running = [0, 0]
    threads: set[str] = set()

    def handle(message: Message) -> None:  # a plain function: runs in the consumer's thread pool
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
            threads.add(threading.current_thread().name)
        time.sleep(0.002)
        key, seq = json.loads(message.value)
        with lock:
            running[0] -= 1
            done[key].append(seq)

    with Client(broker.service_url) as client:
        consumer = BlockingOrderedConsumer(client, topic, "s", handle, partition_parallelism=4,
                                           initial_position="earliest")
        consumer.start()
        wait_until(lambda: consumer.metrics().acknowledged >= len(keys), "every message acknowledged")
        m = consumer.metrics()
        consumer.stop()
    assert m.acknowledged == len(keys)
    assert_in_order(done)
    assert running[1] >= 2 and len(threads) >= 2
    assert all(name.startswith("velamq-ordered") for name in threads)


def test_fetching_pauses_when_max_in_flight_is_reached(broker: BrokerProcess, topic: str) -> None:
    keys = [f"k{i % 16}" for i in range(300)]

    async def body(client: AsyncClient) -> None:
        await produce(client, topic, keys, batching=False)
        samples: list[tuple[int, int]] = []

        async def handle(message: Message) -> None:
            await asyncio.sleep(0.003)

        consumer = OrderedConsumer(client, topic, "s", handle, partition_parallelism=4, max_in_flight=8,
                                   receiver_queue_size=4, initial_position="earliest")
        await consumer.start()
        queue = consumer.consumers[0].queue
        while consumer.metrics().acknowledged < len(keys):
            samples.append((consumer.metrics().in_flight, len(queue)))
            await asyncio.sleep(0.001)
        m = consumer.metrics().partitions[0]
        await consumer.close()
        assert max(s[0] for s in samples) <= 8 and m.in_flight_max == 8
        assert max(s[1] for s in samples) <= 4  # the broker stopped: only the receiver queue's worth waits
        assert m.pauses >= 1 and m.paused_seconds > 0 and m.acknowledged == len(keys)

    run(broker, body)


def test_handler_failures_are_retried_in_place_or_dead_lettered(broker: BrokerProcess, topic: str) -> None:
    keys = [f"k{i % 3}" for i in range(60)]
    dlq = f"{topic}-dlq"

    async def body(client: AsyncClient) -> None:
        await produce(client, topic, keys)
        dead = await client.subscribe(dlq, "check", initial_position="earliest")
        done: dict[str, list[int]] = defaultdict(list)
        attempts: dict[tuple[str, int], int] = defaultdict(int)

        async def handle(message: Message) -> None:
            key, seq = json.loads(message.value)
            attempts[key, seq] += 1
            if (key, seq) == ("k0", 5) and attempts[key, seq] <= 2:
                raise RuntimeError("transient")
            if (key, seq) == ("k1", 7):
                raise ValueError("poison")
            done[key].append(seq)

        async with OrderedConsumer(client, topic, "s", handle, partition_parallelism=3, initial_position="earliest",
                                   max_attempts=3, retry_initial_backoff_ms=10, dead_letter_topic=dlq) as consumer:
            await until(lambda: consumer.metrics().acknowledged == len(keys), "every message acknowledged")
            m = consumer.metrics().partitions[0]
        assert_in_order(done)
        assert done["k0"] == list(range(20)) and done["k2"] == list(range(20))
        assert done["k1"] == [s for s in range(20) if s != 7]
        assert attempts["k0", 5] == 3 and attempts["k1", 7] == 3
        assert (m.handler_failures, m.retries, m.dead_lettered) == (5, 4, 1)
        poison = await dead.receive(10_000)
        assert json.loads(poison.value) == ["k1", 7] and poison.key == "k1"
        assert poison.properties["REAL_TOPIC"].endswith(topic)
        await dead.close()

    run(broker, body)


def test_one_dominant_key_reports_parallelism_one(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        await produce(client, topic, ["hot"] * 100)

        async def handle(message: Message) -> None:
            await asyncio.sleep(0.001)

        async with OrderedConsumer(client, topic, "s", handle, partition_parallelism=8,
                                   initial_position="earliest") as consumer:
            await until(lambda: consumer.metrics().acknowledged == 100, "every message acknowledged")
            m = consumer.metrics().partitions[0]
        # Eight workers, one key: only ever one of them busy, and the metrics say so (OC-4).
        assert m.max_busy_workers == 1 and m.effective_parallelism == pytest.approx(1.0)
        assert (m.hottest_key, m.hottest_key_share, m.busiest_worker_share) == ("hot", 1.0, 1.0)
        assert m.parallelism_bound == 1.0 and m.parallelism == 8

    run(broker, body)


# The first consumer runs in its own process so that it can be killed (SIGKILL) mid-way.
_CHILD = textwrap.dedent("""
    import asyncio, json, random, sys
    from velamq.client import AsyncClient, ConsumerConfig, OrderedConsumer

    url, topic, out_path = sys.argv[1:4]
    out = open(out_path, "a", buffering=1)
    rng = random.Random(7)

    async def handle(message):
        await asyncio.sleep(rng.random() * 0.01)  # completion order differs from arrival order
        mid = message.message_id
        key, seq = json.loads(message.value)
        out.write(f"{mid.partition} {mid.ledger_id} {mid.entry_id} {mid.batch_index} {key} {seq}\\n")

    async def main():
        async with AsyncClient(url) as client:
            # Acks leave every 10 ms, so some have reached the broker when the process is killed.
            consumer = OrderedConsumer(client, topic, "s", handle, partition_parallelism=4, max_in_flight=40,
                                       initial_position="earliest",
                                       consumer_config=ConsumerConfig(ack_grouping_time_ms=10))
            await consumer.start()
            await asyncio.sleep(3600)

    asyncio.run(main())
""")

Row = tuple[int, int, int, int]  # partition, ledger, entry, batch index


def _read_rows(path: Path) -> list[tuple[Row, str, int]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 6:
            p, ledger, entry, index, key, seq = parts
            rows.append(((int(p), int(ledger), int(entry), int(index)), key, int(seq)))
    return rows


def test_a_killed_consumer_loses_nothing_and_redelivers_only_after_the_acked_prefix(
        broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    create_partitioned_topic(broker, topic, 2)
    keys = [f"key-{i % 30}" for i in range(600)]
    ids = run(broker, lambda client: produce(client, topic, keys))
    per_partition: dict[int, list[Row]] = defaultdict(list)
    for mid in sorted(ids, key=lambda m: (m.partition, m.ledger_id, m.entry_id, m.batch_index)):
        per_partition[mid.partition].append((mid.partition, mid.ledger_id, mid.entry_id, mid.batch_index))

    first = tmp_path / "first.txt"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, broker.service_url, topic, str(first)],
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_until(lambda: len(_read_rows(first)) >= 250 or child.poll() is not None,
                   "250 messages handled by the first consumer")
        assert child.poll() is None, "the first consumer died"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    run1 = _read_rows(first)
    ids_all = [r for rows in per_partition.values() for r in rows]

    async def second(client: AsyncClient) -> list[tuple[Row, str, int]]:
        rows: list[tuple[Row, str, int]] = []

        async def handle(message: Message) -> None:
            mid = message.message_id
            key, seq = json.loads(message.value)
            rows.append(((mid.partition, mid.ledger_id, mid.entry_id, mid.batch_index), key, seq))

        async with OrderedConsumer(client, topic, "s", handle, partition_parallelism=4,
                                   initial_position="earliest") as consumer:
            done1 = {r for r, _, _ in run1}
            await until(lambda: done1 | {r for r, _, _ in rows} >= set(ids_all), "every message processed")
            # Nothing else can arrive once the broker's backlog is empty (every message acknowledged):
            # before that, a message the first consumer handled but did not get to acknowledge may
            # still be on its way here again (a duplicate would be among the rows).
            await until(lambda: backlog(broker, topic, 2) == 0, "an empty backlog on the broker")
            await until(lambda: consumer.metrics().received == consumer.metrics().acknowledged == len(rows),
                        "everything received handled and acknowledged")
        return rows

    run2 = run(broker, second)
    done1 = {r for r, _, _ in run1}
    done2 = [r for r, _, _ in run2]
    assert done1 | set(done2) == set(ids_all)  # nothing lost
    assert len(done2) == len(set(done2))  # the second consumer saw each message once
    for partition, order in per_partition.items():
        again = {r for r in done2 if r[0] == partition}
        start = min((order.index(r) for r in again), default=len(order))
        # What came again is exactly everything after one point: the acknowledged prefix ended there.
        assert again == set(order[start:]), f"partition {partition}: redelivered ids are not a suffix"
        assert set(order[:start]) <= done1, f"partition {partition}: acknowledged before being processed"
    assert len(done2) < len(ids_all)  # the first consumer's acknowledgements took effect
    for rows in (run1, run2):
        by_key: dict[str, list[int]] = defaultdict(list)
        for _, key, seq in rows:
            by_key[key].append(seq)
        assert_in_order(by_key)


def test_a_broker_restart_redelivers_in_flight_messages_which_are_not_run_twice(fresh_broker: BrokerProcess,
                                                                                topic: str) -> None:
    keys = [f"k{i % 10}" for i in range(400)]

    async def body(client: AsyncClient) -> None:
        await produce(client, topic, keys)
        done: dict[str, list[int]] = defaultdict(list)
        gate = asyncio.Event()
        gate.set()

        async def handle(message: Message) -> None:
            await gate.wait()  # closed across the restart, so the window is full when the broker returns
            await asyncio.sleep(0.002)
            key, seq = json.loads(message.value)
            done[key].append(seq)

        async with OrderedConsumer(client, topic, "s", handle, partition_parallelism=4, max_in_flight=50,
                                   initial_position="earliest") as consumer:
            await until(lambda: consumer.metrics().completed >= 100, "100 messages")
            gate.clear()
            await until(lambda: consumer.metrics().in_flight == 50, "a full window")
            await asyncio.to_thread(fresh_broker.stop)
            await asyncio.to_thread(fresh_broker.start)
            await until(lambda: consumer.consumers[0].is_connected(), "the consumer reconnected")
            gate.set()
            await until(lambda: consumer.metrics().acknowledged == len(keys), "every message acknowledged")
            m = consumer.metrics().partitions[0]
        assert_in_order(done)
        # Every message ran exactly once: the broker sent the window's messages again after the
        # restart, and they were skipped.
        assert sorted((k, s) for k, seqs in done.items() for s in seqs) == sorted(
            (f"k{k}", s) for k in range(10) for s in range(40))
        assert m.redeliveries_skipped > 0 and m.error is None

    run(fresh_broker, body)
