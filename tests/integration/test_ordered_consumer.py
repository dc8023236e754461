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
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from client_helpers import run_with_client as run
from wait_helpers import until, wait_until

from velamq.client import (
    AsyncClient,
    BlockingOrderedConsumer,
    Client,
    ConsumerConfig,
    Message,
    MessageId,
    OperationTimeoutError,
    OrderedConsumer,
    StringSchema,
)
from velamq.testing import BrokerProcess


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


@pytest.mark.parametrize("assignment", ["hash", "free_worker"])
def test_keys_stay_in_order_while_workers_run_in_parallel(broker: BrokerProcess, topic: str, assignment: str) -> None:
    create_partitioned_topic(broker, topic, 4)
    keys = [f"key-{i % 40}" for i in range(1200)]

    async def body(client: AsyncClient) -> None:
        await produce(client, topic, keys)
        done: dict[str, list[int]] = defaultdict(list)
        running: dict[int, int] = defaultdict(int)  # per partition: handlers running now
        most = [0]
        # Per partition, handlers wait until two of them run at once: two workers of one partition
        # overlap by construction, not because a handler happens to be slow.
        overlapped = defaultdict(asyncio.Event)

        async def handle(message: Message) -> None:
            p = message.message_id.partition
            running[p] += 1
            most[0] = max(most[0], running[p])
            if running[p] >= 2:
                overlapped[p].set()
            key, seq = json.loads(message.value)
            for _ in range(seq * 7 % 4):  # uneven work: completion order differs from arrival
                await asyncio.sleep(0)
            await overlapped[p].wait()
            running[p] -= 1
            done[key].append(seq)

        async with OrderedConsumer(client, topic, "s", handle, partition_parallelism=4, max_in_flight=100,
                                   initial_position="earliest", key_assignment=assignment) as consumer:
            await until(lambda: consumer.metrics().acknowledged == len(keys), "every message acknowledged")
            m = consumer.metrics()
        assert_in_order(done)
        assert sum(len(s) for s in done.values()) == len(keys)  # each exactly once
        assert most[0] >= 2 and all(e.is_set() for e in overlapped.values())
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
    overlapped = threading.Event()  # set once two handlers run at once

    def handle(message: Message) -> None:  # a plain function: runs in the consumer's thread pool
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
            threads.add(threading.current_thread().name)
            if running[0] >= 2:
                overlapped.set()
        assert overlapped.wait(60), "no second handler ran alongside this one"
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
    assert m.acknowledged == len(keys) and m.handler_failures == 0
    assert_in_order(done)
    assert sum(len(s) for s in done.values()) == len(keys)
    assert running[1] >= 2 and len(threads) >= 2
    assert all(name.startswith("velamq-ordered") for name in threads)


def test_fetching_pauses_when_max_in_flight_is_reached(broker: BrokerProcess, topic: str) -> None:
    keys = [f"k{i % 16}" for i in range(300)]

    async def body(client: AsyncClient) -> None:
        await produce(client, topic, keys, batching=False)
        gate = asyncio.Event()
        first: list[MessageId] = []

        async def handle(message: Message) -> None:
            if not first:
                first.append(message.message_id)
            if message.message_id == first[0]:
                await gate.wait()  # the head of the partition is stuck until the test lets it go

        consumer = OrderedConsumer(client, topic, "s", handle, partition_parallelism=4, max_in_flight=8,
                                   receiver_queue_size=4, initial_position="earliest")
        await consumer.start()
        queue = consumer.consumers[0].queue
        await until(lambda: consumer.metrics().partitions[0].paused, "the partition paused")
        m = consumer.metrics().partitions[0]
        # The head holds the prefix: the window is full and the broker stopped after the receiver
        # queue's worth.
        assert m.in_flight == 8 and m.acknowledged == 0 and m.pauses >= 1
        assert len(queue) <= 4
        gate.set()
        await until(lambda: consumer.metrics().acknowledged == len(keys), "every message acknowledged")
        m = consumer.metrics().partitions[0]
        await consumer.close()
        assert m.in_flight_max == 8 and m.paused_seconds > 0 and not m.paused

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

    url, topic, out_path, mode = sys.argv[1:5]
    out = open(out_path, "a", buffering=1)
    rng = random.Random(7)
    options = {}
    if mode == "process":
        sys.path.insert(0, out_path.rsplit("/", 1)[0])
        from kill_handler import handle  # importable by the handler processes too
        options = {"handler_mode": "process", "processes": 2}
    elif mode == "free_worker":
        options = {"key_assignment": "free_worker"}

    async def handle_async(message):
        await asyncio.sleep(rng.random() * 0.01)  # completion order differs from arrival order
        mid = message.message_id
        key, seq = json.loads(message.value)
        out.write(f"{mid.partition} {mid.ledger_id} {mid.entry_id} {mid.batch_index} {key} {seq}\\n")

    async def main():
        async with AsyncClient(url) as client:
            # Acks leave every 10 ms, so some have reached the broker when the process is killed.
            consumer = OrderedConsumer(client, topic, "s", handle if mode == "process" else handle_async,
                                       partition_parallelism=4, max_in_flight=40, initial_position="earliest",
                                       consumer_config=ConsumerConfig(ack_grouping_time_ms=10), **options)
            await consumer.start()
            await asyncio.sleep(3600)

    asyncio.run(main())
""")

# The process mode's handler, as a module the handler processes can import: the same lines, each
# written whole with O_APPEND by whichever process ran the message.
_KILL_HANDLER = textwrap.dedent("""
    import json, os, sys, zlib

    def handle(message):
        mid = message.message_id
        key, seq = json.loads(message.value)
        for _ in range(zlib.crc32(message.value) % 20_000):  # uneven work: completions interleave
            pass
        line = f"{mid.partition} {mid.ledger_id} {mid.entry_id} {mid.batch_index} {key} {seq}\\n"
        fd = os.open(os.environ["VELAMQ_TEST_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, line.encode())
        os.close(fd)
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


@pytest.mark.parametrize("mode", ["async", "free_worker", "process"])
def test_a_killed_consumer_loses_nothing_and_redelivers_only_after_the_acked_prefix(
        broker: BrokerProcess, topic: str, tmp_path: Path, mode: str) -> None:
    create_partitioned_topic(broker, topic, 2)
    keys = [f"key-{i % 30}" for i in range(600)]
    ids = run(broker, lambda client: produce(client, topic, keys))
    per_partition: dict[int, list[Row]] = defaultdict(list)
    for mid in sorted(ids, key=lambda m: (m.partition, m.ledger_id, m.entry_id, m.batch_index)):
        per_partition[mid.partition].append((mid.partition, mid.ledger_id, mid.entry_id, mid.batch_index))

    first = tmp_path / "first.txt"
    (tmp_path / "kill_handler.py").write_text(_KILL_HANDLER)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, broker.service_url, topic, str(first), mode],
                             env={**os.environ, "PYTHONUNBUFFERED": "1", "VELAMQ_TEST_OUT": str(first)},
                             start_new_session=True)
    try:
        wait_until(lambda: len(_read_rows(first)) >= 250 or child.poll() is not None,
                   "250 messages handled by the first consumer")
        assert child.poll() is None, "the first consumer died"
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the consumer and its handler processes, as a host crash
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
            await gate.wait()  # closed across the restart, so the window holds messages when the broker returns
            await asyncio.sleep(0.002)
            key, seq = json.loads(message.value)
            done[key].append(seq)

        async with OrderedConsumer(client, topic, "s", handle, partition_parallelism=4, max_in_flight=50,
                                   initial_position="earliest") as consumer:
            await until(lambda: consumer.metrics().completed >= 100, "100 messages")
            gate.clear()
            # The handlers wait behind the gate, so the window fills until fetching pauses.
            await until(lambda: consumer.metrics().partitions[0].paused, "fetching paused")
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


# ---- the process mode: handlers in other processes ---------------------------------------------
# Handler processes import this module to find the handler; they learn where to write from the
# environment, which they inherit.

def record_in_process(message: Message) -> None:
    """A process handler: one line "key seq pid" per handled message, in a file per process. The
    message named by VELAMQ_TEST_CRASH_AT ("key seq") kills its process the first time it runs."""
    out_dir = Path(os.environ["VELAMQ_TEST_RECORDS"])
    key, seq = json.loads(message.value)
    crash = os.environ.get("VELAMQ_TEST_CRASH_AT")
    if crash == f"{key} {seq}":
        marker = out_dir / "crashed"
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(3)  # no result, no clean-up: as a segfault would
    with open(out_dir / f"{os.getpid()}.txt", "a") as f:
        f.write(f"{key} {seq} {os.getpid()}\n")


def process_records(out_dir: Path) -> list[tuple[str, int, int]]:
    rows = []
    for path in sorted(out_dir.glob("*.txt")):
        for line in path.read_text().splitlines():
            key, seq, pid = line.split()
            rows.append((key, int(seq), int(pid)))
    return rows


@pytest.mark.parametrize("crash", [False, True], ids=["steady", "a-process-crashes-mid-stream"])
def test_process_handlers_keep_order_per_key_and_handle_each_message_once(
        broker: BrokerProcess, topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: bool) -> None:
    create_partitioned_topic(broker, topic, 2)
    keys = [f"key-{i % 24}" for i in range(480)]
    monkeypatch.setenv("VELAMQ_TEST_RECORDS", str(tmp_path))
    if crash:
        monkeypatch.setenv("VELAMQ_TEST_CRASH_AT", "key-5 7")

    async def body(client: AsyncClient) -> None:
        await produce(client, topic, keys)
        async with OrderedConsumer(client, topic, "s", record_in_process, handler_mode="process", processes=2,
                                   partition_parallelism=4, max_in_flight=50, initial_position="earliest",
                                   retry_initial_backoff_ms=1) as consumer:
            await until(lambda: consumer.metrics().acknowledged == len(keys), "every message acknowledged")
            m = consumer.metrics()
        assert m.received == m.completed == len(keys)
        if crash:
            # The crash counts as one failed attempt of the message it interrupted, which ran again.
            assert m.handler_failures == 1 and sum(p.retries for p in m.partitions) == 1
        else:
            assert m.handler_failures == 0

    run(broker, body)
    rows = process_records(tmp_path)
    by_key: dict[str, list[int]] = defaultdict(list)
    pids: dict[str, set[int]] = defaultdict(set)
    for key, seq, pid in rows:
        by_key[key].append(seq)
        pids[key].add(pid)
    assert_in_order(by_key)
    assert sorted((k, s) for k, s, _ in rows) == sorted(
        (f"key-{k}", s) for k in range(24) for s in range(20))  # every message exactly once
    assert len({pid for _, _, pid in rows}) >= 2  # two processes did the work
    if crash:
        crashed = int((tmp_path / "crashed").read_text())
        # What the dead process had not reported ran in its successor, after what it had.
        assert next(pid for k, s, pid in rows if (k, s) == ("key-5", 7)) != crashed
    else:
        assert all(len(p) == 1 for p in pids.values())  # a key stays in one process


def test_process_handlers_that_fail_are_retried_in_place_then_dead_lettered(
        broker: BrokerProcess, topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VELAMQ_TEST_RECORDS", str(tmp_path))
    m, poison, by_key = run_poison(broker, topic, tmp_path, fail_on_k1_4, keys=3, processes=1, max_attempts=2)
    assert (m.handler_failures, m.retries, m.dead_lettered) == (2, 1, 1)
    assert poison == ["k1", 4]
    assert by_key["k0"] == by_key["k2"] == list(range(10))
    assert by_key["k1"] == [s for s in range(10) if s != 4]


def run_poison(broker: BrokerProcess, topic: str, tmp_path: Path, handler: Callable[[Message], None], *,
               keys: int, processes: int, max_attempts: int) -> tuple[Any, Any, dict[str, list[int]]]:
    """Ten messages per key through a process handler with a dead-letter topic: the first
    partition's metrics, the one dead-lettered message's value and what each key ran, in order."""
    sent = [f"k{i % keys}" for i in range(10 * keys)]
    dlq = f"{topic}-dlq"
    result: list[Any] = []

    async def body(client: AsyncClient) -> None:
        await produce(client, topic, sent)
        dead = await client.subscribe(dlq, "check", initial_position="earliest")
        async with OrderedConsumer(client, topic, "s", handler, handler_mode="process", processes=processes,
                                   partition_parallelism=keys, initial_position="earliest",
                                   max_attempts=max_attempts, retry_initial_backoff_ms=1,
                                   dead_letter_topic=dlq) as consumer:
            await until(lambda: consumer.metrics().acknowledged == len(sent), "every message acknowledged")
            result.append(consumer.metrics().partitions[0])
        result.append(json.loads((await dead.receive(10_000)).value))
        await dead.close()

    run(broker, body)
    by_key: dict[str, list[int]] = defaultdict(list)
    for key, seq, _ in process_records(tmp_path):
        by_key[key].append(seq)
    return result[0], result[1], by_key


def fail_on_k1_4(message: Message) -> None:
    """A process handler for which message ["k1", 4] always fails."""
    if json.loads(message.value) == ["k1", 4]:
        raise ValueError("poison")
    record_in_process(message)


def crash_on_k2_3(message: Message) -> None:
    """A process handler that kills its process every time it gets message ["k2", 3]."""
    if json.loads(message.value) == ["k2", 3]:
        os._exit(5)
    record_in_process(message)


def test_a_message_that_kills_its_process_every_time_is_dead_lettered_after_max_attempts(
        broker: BrokerProcess, topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VELAMQ_TEST_RECORDS", str(tmp_path))
    m, poison, by_key = run_poison(broker, topic, tmp_path, crash_on_k2_3, keys=4, processes=2, max_attempts=3)
    # Three crashes, the first two followed by a new attempt, the third by the dead-letter topic.
    assert (m.handler_failures, m.retries, m.dead_lettered) == (3, 2, 1)
    assert poison == ["k2", 3]
    assert by_key["k0"] == by_key["k1"] == by_key["k3"] == list(range(10))
    assert by_key["k2"] == [s for s in range(10) if s != 3]  # the rest of k2, once each, in order


def test_handlers_get_values_decoded_by_the_consumers_schema(broker: BrokerProcess, topic: str) -> None:
    keys = [f"k{i % 5}" for i in range(50)]

    async def body(client: AsyncClient) -> None:
        done: dict[str, list[int]] = defaultdict(list)

        async def handle(message: Message) -> None:
            key, number = message.value.split(":")  # a str: decoded, whichever way it was fetched
            done[key].append(int(number))

        # The consumer starts on an empty topic: its first messages come one by one (receive()),
        # later ones in bulk; every one reaches the handler decoded.
        producer = await client.create_producer(topic, schema=StringSchema())
        async with OrderedConsumer(client, topic, "s", handle, partition_parallelism=3, initial_position="earliest",
                                   consumer_config=ConsumerConfig(schema=StringSchema())) as consumer:
            seq: dict[str, int] = defaultdict(int)
            for key in keys:
                await producer.send(f"{key}:{seq[key]}", key=key)
                seq[key] += 1
            await until(lambda: consumer.metrics().acknowledged == len(keys), "every message acknowledged")
            assert consumer.metrics().handler_failures == 0
        await producer.close()
        assert done == {f"k{k}": list(range(10)) for k in range(5)}

    run(broker, body)
