"""A broker of two workers (`velamq standalone --workers 2`, issue 23): bundles spread topics over
worker processes, lookups send clients to the owner, a bundle moves without losing anything, a
dead worker comes back, policies set through any worker reach every worker's topics.

One broker for the module (`workers2`), and its own for the tests that kill or move things.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import pulsar
import pytest
from wait_helpers import wait_until

from velamq._bundles import NamespaceBundles, default_owner
from velamq.client import AdminClient, AsyncClient
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(300)

NAMESPACE = "public/default"



def owner_index(full_topic: str, workers: int = 2) -> int:
    """The worker a topic of public/default belongs to while no bundle moved."""
    bundles = NamespaceBundles.even(4)
    return default_owner(NAMESPACE, bundles.index_of(full_topic), workers)


class Receipts:
    """The indexes of the messages whose send_async succeeded, in the order the receipts came."""

    def __init__(self) -> None:
        self.acked: list[int] = []
        self._lock = threading.Lock()

    def callback_for(self, i: int) -> Any:
        def callback(result: Any, _msg_id: Any) -> None:
            if result == pulsar.Result.Ok:
                with self._lock:
                    self.acked.append(i)
        return callback


def lookup(admin: AdminClient, topic: str) -> dict[str, Any]:
    reply = admin.request("GET", f"/lookup/v2/topic/persistent/{NAMESPACE}/{topic}")
    assert isinstance(reply, dict)
    return reply


def worker_of(line: str) -> int:
    """The id in a worker's start line ("velamq worker K of N ready: ...")."""
    return int(line.split("velamq worker ", 1)[1].split(" ", 1)[0])


def own_urls(broker: BrokerProcess, field: str = "service_url") -> dict[int, str]:
    """Each worker's own URL of that field (service_url, admin_url), from its start line."""
    return {worker_of(line): line.split(f"{field}=", 1)[1].split()[0] for line in broker.worker_lines()}


def test_workers_start_and_say_what_they_own(workers2: BrokerProcess) -> None:
    lines = workers2.worker_lines()
    assert len(lines) == 2, workers2.output
    pids = workers2.worker_pids()
    assert set(pids) == {0, 1} and workers2.pid not in pids.values() and pids[0] != pids[1]
    ranges = NamespaceBundles.even(4).ranges
    for line in lines:  # each names the bundles of public/default it owns, and its own URLs
        worker = worker_of(line)
        mine = [r.name for i, r in enumerate(ranges) if default_owner(NAMESPACE, i, 2) == worker]
        assert f"{NAMESPACE}[{','.join(mine)}]" in line, line
        assert "service_url=pulsar://" in line and "admin_url=http://" in line
    admin = AdminClient(workers2.admin_url)
    brokers = admin.request("GET", "/admin/v2/brokers/standalone")
    assert isinstance(brokers, list) and len(brokers) == 2


def test_partitions_spread_and_official_client_produces_and_consumes(
    workers2: BrokerProcess, topic: str, make_client: Any
) -> None:
    admin = AdminClient(workers2.admin_url)
    admin.request("PUT", f"/admin/v2/persistent/{NAMESPACE}/{topic}/partitions", 8)
    partitions = [f"persistent://{NAMESPACE}/{topic}-partition-{i}" for i in range(8)]
    urls = own_urls(workers2)
    owners = {p: lookup(admin, p.rsplit("/", 1)[1])["brokerUrl"] for p in partitions}
    assert set(owners.values()) == set(urls.values()), owners  # both workers serve some partitions
    for p, url in owners.items():
        assert url == urls[owner_index(p)]

    client = make_client(workers2.service_url)
    consumer = client.subscribe(f"persistent://{NAMESPACE}/{topic}", "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(f"persistent://{NAMESPACE}/{topic}", batching_enabled=False)
    sent = {f"m{i}".encode() for i in range(200)}
    for body in sorted(sent):
        producer.send(body)
    got = set()
    while len(got) < len(sent):
        message = consumer.receive(timeout_millis=20_000)
        got.add(message.data())
        consumer.acknowledge(message)
    assert got == sent
    counts = [admin.request("GET", f"/admin/v2/persistent/{NAMESPACE}/{p.rsplit('/', 1)[1]}/stats")["msgInCounter"]
              for p in partitions]
    assert sum(counts) == 200  # each answered by its owner (307)


def test_velamq_client_follows_the_owner(workers2: BrokerProcess, topic: str) -> None:
    async def main() -> list[bytes]:
        async with AsyncClient(workers2.service_url, operation_timeout_s=15) as client:
            names = [f"persistent://{NAMESPACE}/{topic}-{i}" for i in range(6)]
            got: list[bytes] = []
            for name in names:
                consumer = await client.subscribe(name, "sub")
                producer = await client.create_producer(name)
                await producer.send(name.encode())
                message = await consumer.receive(20_000)
                await consumer.acknowledge(message)
                got.append(message.value)
                await producer.close()
                await consumer.close()
            return got

    got = asyncio.run(main())
    assert got == [f"persistent://{NAMESPACE}/{topic}-{i}".encode() for i in range(6)]


def test_a_policy_set_through_any_worker_applies_on_every_worker(
    workers2: BrokerProcess, topic: str, make_client: Any
) -> None:
    admin = AdminClient(workers2.admin_url)
    namespace = f"public/{topic}"
    admin.request("PUT", f"/admin/v2/namespaces/{namespace}", {})
    client = make_client(workers2.service_url)
    names = [f"persistent://{namespace}/t{i}" for i in range(12)]
    bundles = NamespaceBundles.even(4)
    assert {default_owner(namespace, bundles.index_of(n), 2) for n in names} == {0, 1}
    producers = [client.create_producer(n, batching_enabled=False) for n in names]
    for p in producers:
        p.send(b"small")
    admin.request("POST", f"/admin/v2/namespaces/{namespace}/maxProducersPerTopic", 1)

    def refused_everywhere() -> bool:
        refused = 0
        for n in names:
            try:
                extra = client.create_producer(n)
            except pulsar.ProducerBusy:
                refused += 1
            else:
                extra.close()
        return refused == len(names)

    wait_until(refused_everywhere, "maxProducersPerTopic=1 refused a second producer on every topic")


def test_bundle_unload_moves_it_without_loss_and_in_order(topic: str, make_client: Any) -> None:
    with run_broker(workers=2) as broker:
        admin = AdminClient(broker.admin_url)
        urls = own_urls(broker)
        name = f"persistent://{NAMESPACE}/{topic}"
        bundle = NamespaceBundles.even(4).bundle_of(name)
        before = owner_index(name)
        assert lookup(admin, topic)["brokerUrl"] == urls[before]
        client = make_client(broker.service_url)
        consumer = client.subscribe(name, "sub")
        producer = client.create_producer(
            name, batching_enabled=False, max_pending_messages=500, block_if_queue_full=True
        )
        receipts = Receipts()
        acked, done = receipts.acked, receipts.callback_for
        stop = threading.Event()
        sent = [0]

        def produce() -> None:
            while not stop.is_set() and sent[0] < 20_000:
                producer.send_async(str(sent[0]).encode(), done(sent[0]))
                sent[0] += 1

        thread = threading.Thread(target=produce)
        thread.start()
        wait_until(lambda: len(acked) > 200, "receipts before the unload")
        admin.request("PUT", f"/admin/v2/namespaces/{NAMESPACE}/{bundle.name}/unload")
        wait_until(lambda: lookup(admin, topic)["brokerUrl"] == urls[1 - before], "the bundle's new owner")
        count_at_move = len(acked)
        wait_until(lambda: len(acked) > count_at_move + 200, "receipts from the new owner")
        stop.set()
        thread.join()
        producer.flush()
        expected = sent[0]
        wait_until(lambda: len(acked) == expected, lambda: f"{len(acked)} of {expected} receipts")
        received: list[int] = []
        while len(set(received)) < expected:
            message = consumer.receive(timeout_millis=30_000)
            received.append(int(message.data()))
            consumer.acknowledge(message)
        firsts = list(dict.fromkeys(received))
        assert firsts == list(range(expected))  # nothing lost, order of first deliveries kept
        stats = admin.request("GET", f"/admin/v2/persistent/{NAMESPACE}/{topic}/stats")
        assert stats["msgInCounter"] >= 1  # answered by the new owner


def test_a_killed_worker_is_restarted_and_nothing_acknowledged_is_lost(topic: str, make_client: Any) -> None:
    with run_broker(workers=2) as broker:
        name = f"persistent://{NAMESPACE}/{topic}"
        victim = owner_index(name)
        old_pid = broker.worker_pids()[victim]
        client = make_client(broker.service_url)
        producer = client.create_producer(name, batching_enabled=False, send_timeout_millis=60_000)
        receipts = Receipts()
        acked, callback_for = receipts.acked, receipts.callback_for
        for i in range(300):
            producer.send_async(str(i).encode(), callback_for(i))
        wait_until(lambda: len(acked) >= 100, "receipts before the kill")
        os.kill(old_pid, signal.SIGKILL)
        wait_until(lambda: broker.worker_pids().get(victim, old_pid) != old_pid, "the worker started again")
        for i in range(300, 400):
            producer.send_async(str(i).encode(), callback_for(i))
        producer.flush()
        wait_until(lambda: len(acked) == 400, lambda: f"{len(acked)} of 400 receipts")
        reader = client.create_reader(name, pulsar.MessageId.earliest)
        stored = []
        while reader.has_message_available():
            stored.append(int(reader.read_next(timeout_millis=20_000).data()))
        assert set(acked) <= set(stored)
        assert list(dict.fromkeys(stored)) == sorted(set(stored))


def test_sigterm_stops_every_worker_and_data_survives_a_restart(topic: str, make_client: Any, tmp_path: Any) -> None:
    def stop(broker: BrokerProcess) -> None:
        assert broker.stop() == 0

    stop_and_start_again(tmp_path / "data", topic, make_client, stop, "stopped")


def stop_and_start_again(data: Any, topic: str, make_client: Any, stop: Any, what: str) -> None:
    """One message on each of 8 topics, the broker stopped by `stop` (every worker gone after it),
    started again on the same data: every message is there."""
    with run_broker(data, workers=2) as broker:
        client = make_client(broker.service_url)
        names = [f"persistent://{NAMESPACE}/{topic}-{i}" for i in range(8)]
        for n in names:
            client.create_producer(n, batching_enabled=False).send(n.encode())
        pids = list(broker.worker_pids().values())
        stop(broker)
        for pid in pids:
            wait_until(lambda pid=pid: not _alive(pid), f"worker {pid} {what}")
        broker.start()
        reader_client = make_client(broker.service_url)
        for n in names:
            reader = reader_client.create_reader(n, pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=20_000).data() == n.encode()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_deleting_a_partitioned_topic_deletes_the_partitions_of_every_worker(
    workers2: BrokerProcess, topic: str, make_client: Any
) -> None:
    admin = AdminClient(workers2.admin_url)
    path = f"/admin/v2/persistent/{NAMESPACE}/{topic}"
    admin.request("PUT", f"{path}/partitions", 6)
    partitions = [f"persistent://{NAMESPACE}/{topic}-partition-{i}" for i in range(6)]
    assert {owner_index(p) for p in partitions} == {0, 1}
    client = make_client(workers2.service_url)
    producer = client.create_producer(f"persistent://{NAMESPACE}/{topic}", batching_enabled=False)
    for i in range(60):
        producer.send(str(i).encode())
    producer.close()
    admin.request("DELETE", f"{path}/partitions", query={"force": "true"})
    listed = admin.request("GET", f"/admin/v2/persistent/{NAMESPACE}/partitioned")
    assert f"persistent://{NAMESPACE}/{topic}" not in listed
    # Each partition comes back empty when the topic is made again (its ledger was deleted by its owner).
    admin.request("PUT", f"{path}/partitions", 6)
    for p in partitions:
        reader = client.create_reader(p, pulsar.MessageId.earliest)
        assert not reader.has_message_available()
        reader.close()


def test_a_worker_that_owns_no_partition_deletes_a_partitioned_topic(
    workers2: BrokerProcess, topic: str, make_client: Any
) -> None:
    # A one-partition topic whose partition belongs to worker 0; the delete goes to worker 1's own port.
    name = next(
        n for n in (f"{topic}{k}" for k in range(64)) if owner_index(f"persistent://{NAMESPACE}/{n}-partition-0") == 0
    )
    admin_urls = own_urls(workers2, "admin_url")
    shared = AdminClient(workers2.admin_url)
    shared.request("PUT", f"/admin/v2/persistent/{NAMESPACE}/{name}/partitions", 1)
    client = make_client(workers2.service_url)
    producer = client.create_producer(f"persistent://{NAMESPACE}/{name}", batching_enabled=False)
    producer.send(b"x")
    producer.close()
    AdminClient(admin_urls[1]).request("DELETE", f"/admin/v2/persistent/{NAMESPACE}/{name}/partitions",
                                       query={"force": "true"})
    listed = shared.request("GET", f"/admin/v2/persistent/{NAMESPACE}/partitioned")
    assert f"persistent://{NAMESPACE}/{name}" not in listed


def test_a_data_dir_keeps_the_layout_it_was_made_with(tmp_path: Any) -> None:
    one, several = tmp_path / "one", tmp_path / "several"
    with run_broker(one):
        pass
    with pytest.raises(RuntimeError, match="holds the storage of a one-process broker"), run_broker(one, workers=2):
        pass
    with run_broker(several, workers=2) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        client.create_producer(f"persistent://{NAMESPACE}/layout").send(b"x")
        client.close()
    with pytest.raises(RuntimeError, match="holds the storage of a broker of several workers"), run_broker(several):
        pass


def test_kill_9_of_the_supervisor_takes_the_workers_and_loses_nothing_acknowledged(
    topic: str, make_client: Any, tmp_path: Any
) -> None:
    # SIGKILL: a crash of the whole broker; the workers die with their supervisor.
    stop_and_start_again(tmp_path / "data", topic, make_client, BrokerProcess.kill, "died with its supervisor")
