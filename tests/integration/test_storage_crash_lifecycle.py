"""ME-6 with issue 10's moving parts: SIGKILL the broker while idle topics unload and load again, and while
the garbage collector rewrites entry logs; after every restart, every acknowledged message is there.

Unload/reload: many topics, each written by short-lived producers (create, send a few messages and wait for
each receipt, close), so with brokerTopicIdleUnloadSeconds=0.1 topics keep unloading (their cursors
persisted, their managed ledgers closed and flushed) and loading again while others are written. Each
topic also has a durable subscription. The kill comes at a random moment once unloads are under way.

Garbage collection: small entry logs (64 KiB), collector passes every 100 ms with compaction thresholds
that make it copy, and a churn of topics that are filled and deleted, so that logs holding the kept
topics' entries are rewritten all the time. Deletions that returned stay done.

After each restart, per topic: what is stored of the round is a gap-free prefix of what was sent, in
order, holding every message whose receipt arrived; and the whole topic, read from the start, is every
round in order. The random seed is printed (VELAMQ_CRASH_SEED replays it).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar
import pytest
from wait_helpers import wait_until

from velamq.client import AdminClient
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(300)

rounds = 3


def payload(round_: int, i: int) -> bytes:
    return b"r%02d-%08d-" % (round_, i) + b"y" * 200


def parse(data: bytes) -> tuple[int, int]:
    head = data.split(b"-", 2)
    return int(head[0][1:]), int(head[1])


def metric(broker: BrokerProcess, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_for_metric(broker: BrokerProcess, name: str, at_least: float) -> None:
    wait_until(lambda: metric(broker, name) >= at_least, f"{name} >= {at_least}")


@dataclass(slots=True)
class TopicLog:
    """What one round sent to a topic and which sends were acknowledged. After a failed send the
    topic is not written again in the round, so what is stored can only be a prefix of it."""

    name: str
    sent: int = 0
    confirmed: set[int] = field(default_factory=set)
    failed: bool = False


def client_for(broker: BrokerProcess) -> Any:
    return pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


class Writers:
    """Threads that write topics with short-lived producers until stopped (or the broker dies)."""

    def __init__(self, client: Any, logs: list[TopicLog], round_: int, threads: int, burst: int,
                 rng: random.Random) -> None:
        self._client = client
        self._round = round_
        self._burst = burst
        self._stop = threading.Event()
        self._groups = [logs[k::threads] for k in range(threads)]
        self._seeds = [rng.randrange(1 << 30) for _ in range(threads)]
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(threads)]

    def __enter__(self) -> Writers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _run(self, k: int) -> None:
        rng = random.Random(self._seeds[k])
        group = self._groups[k]
        while not self._stop.is_set():
            log = rng.choice(group)
            if log.failed:
                if all(other.failed for other in group):
                    return
                continue
            try:
                producer = self._client.create_producer(log.name, batching_enabled=False, send_timeout_millis=10_000)
            except pulsar.PulsarException:
                if self._stop.wait(0.05):
                    return
                continue
            try:
                for _ in range(self._burst):
                    i = log.sent
                    log.sent += 1  # sent before the attempt: an unconfirmed send may still be stored
                    producer.send(payload(self._round, i))
                    log.confirmed.add(i)
            except pulsar.PulsarException:
                log.failed = True
                if self._stop.wait(0.05):
                    return
            finally:
                try:
                    producer.close()
                except pulsar.PulsarException:
                    pass


class Churn:
    """A thread that fills topics and deletes them: garbage in the entry logs the kept topics share."""

    def __init__(self, client: Any, admin: AdminClient, round_: int) -> None:
        self._client = client
        self._admin = admin
        self._round = round_
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.deleted: list[str] = []  # deletions that returned

    def __enter__(self) -> Churn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        k = 0
        while not self._stop.is_set():
            local = f"churn-{self._round}-{k}"
            k += 1
            try:
                producer = self._client.create_producer(f"persistent://public/default/{local}",
                                                        batching_enabled=False)
                for i in range(40):
                    producer.send(payload(self._round, i))
                producer.close()
                self._admin.request("DELETE", AdminClient.path("persistent", "public", "default", local),
                                    query={"force": "true"})
                self.deleted.append(f"persistent://public/default/{local}")
            except Exception:
                if self._stop.wait(0.05):
                    return


def read_from(client: Any, topic: str, start: Any) -> list[Any]:
    """Everything from `start` to the end the broker knows of (not "until a read times out": the
    restarted broker may take longer than any fixed idle time to serve the first read)."""
    reader = client.create_reader(topic, start)
    out: list[Any] = []
    try:
        while reader.has_message_available():
            out.append(reader.read_next(30_000))
        return out
    finally:
        reader.close()


def check_round(client: Any, logs: list[TopicLog], round_: int, seed: int,
                history: dict[str, list[tuple[int, int]]]) -> None:
    """Each topic read once from the start: the earlier rounds as they were, then this round's."""
    for log in logs:
        everything = [parse(m.data()) for m in read_from(client, log.name, pulsar.MessageId.earliest)]
        before = everything[:len(history[log.name])]
        assert before == history[log.name], f"seed {seed}: {log.name} changed across restarts"
        stored = everything[len(before):]
        assert all(r == round_ for r, _ in stored), f"seed {seed}: {log.name} has messages of another round"
        indexes = [i for _, i in stored]
        assert indexes == list(range(len(indexes))), (
            f"seed {seed}, round {round_}, {log.name}: not a gap-free prefix: {indexes[:5]}...{indexes[-5:]}")
        missing = sorted(log.confirmed - set(indexes))
        assert not missing, (
            f"seed {seed}, round {round_}, {log.name}: {len(missing)} acknowledged messages lost: {missing[:10]}")
        assert len(indexes) <= log.sent
        history[log.name] += stored


def close_quietly(client: Any) -> None:
    """Close a client whose broker was just killed: the C++ client may already count itself closed
    (a writer's producer close raced with it) and say AlreadyClosed, which is what was wanted."""
    try:
        client.close()
    except pulsar.PulsarException:
        pass


def keep_everything(broker: BrokerProcess, namespace: str = "public/default") -> None:
    admin = AdminClient(broker.admin_url)
    admin.request("POST", AdminClient.namespace_path(namespace, "retention"),
                  {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})


@pytest.fixture
def seeded() -> Iterator[tuple[int, random.Random]]:
    seed = int(os.environ.get("VELAMQ_CRASH_SEED", random.randrange(1 << 30)))
    print(f"crash test seed {seed} (set VELAMQ_CRASH_SEED to replay)")
    yield seed, random.Random(seed)


def broker_with(tmp_path: Path, settings: str) -> Any:
    config = tmp_path / "broker.conf"
    config.write_text(settings)
    return run_broker(extra_args=["--config", str(config)])


def test_acknowledged_messages_survive_sigkill_while_topics_unload_and_reload(
    tmp_path: Path, seeded: tuple[int, random.Random]
) -> None:
    seed, rng = seeded
    names = [f"persistent://public/default/lifecycle-{i:02d}" for i in range(32)]
    settings = "brokerTopicIdleUnloadSeconds=0.1\npolicyCheckIntervalSeconds=0.2\n"
    with broker_with(tmp_path, settings) as broker:
        keep_everything(broker)
        setup = client_for(broker)
        for name in names:  # a durable subscription each: its cursor is persisted at every unload
            setup.subscribe(name, "keep", consumer_type=pulsar.ConsumerType.Shared).close()
        setup.close()
        history: dict[str, list[tuple[int, int]]] = {n: [] for n in names}
        for round_ in range(rounds):
            logs = [TopicLog(n) for n in names]
            client = client_for(broker)
            unloaded = metric(broker, "velamq_topics_unloaded_total")
            with Writers(client, logs, round_, threads=4, burst=3, rng=rng):
                wait_for_metric(broker, "velamq_topics_unloaded_total", unloaded + 10)
                time.sleep(rng.uniform(0.0, 1.0))
                broker.kill()
                close_quietly(client)  # fails what the writers wait for: they stop at once
            broker.start()
            client = client_for(broker)
            try:
                check_round(client, logs, round_, seed, history)
            finally:
                client.close()
            print(f"round {round_}: sent {sum(t.sent for t in logs)}, "
                  f"confirmed {sum(len(t.confirmed) for t in logs)}")


def test_acknowledged_messages_survive_sigkill_during_garbage_collection(
    tmp_path: Path, seeded: tuple[int, random.Random]
) -> None:
    seed, rng = seeded
    names = [f"persistent://public/default/kept-{i}" for i in range(6)]
    settings = (
        "logSizeLimit=65536\ngcWaitTime=100\nminorCompactionInterval=0.2\nmajorCompactionInterval=0.3\n"
        "minorCompactionThreshold=0.5\nmajorCompactionThreshold=0.95\ncompactionRateByBytes=0\n"
        "flushInterval=50\n"
    )
    with broker_with(tmp_path, settings) as broker:
        keep_everything(broker)
        admin = AdminClient(broker.admin_url)
        history: dict[str, list[tuple[int, int]]] = {n: [] for n in names}
        deleted: list[str] = []
        for round_ in range(rounds):
            logs = [TopicLog(n) for n in names]
            client = client_for(broker)
            compacted = metric(broker, "velamq_storage_gc_logs_compacted_total")
            with Churn(client, AdminClient(broker.admin_url), round_) as churn, \
                    Writers(client, logs, round_, threads=3, burst=20, rng=rng):
                wait_for_metric(broker, "velamq_storage_gc_logs_compacted_total", compacted + 3)
                time.sleep(rng.uniform(0.0, 1.0))
                broker.kill()
                close_quietly(client)  # fails what the writers wait for: they stop at once
            deleted += churn.deleted
            broker.start()
            client = client_for(broker)
            try:
                check_round(client, logs, round_, seed, history)
                topics = set(admin.request("GET", AdminClient.path("persistent", "public", "default")))
                back = [name for name in deleted if name in topics]  # a deletion that returned stays done
                assert not back, f"seed {seed}: deleted topics came back: {back[:5]}"
            finally:
                client.close()
            print(f"round {round_}: sent {sum(t.sent for t in logs)}, deleted {len(deleted)} churn topics, "
                  f"logs compacted {metric(broker, 'velamq_storage_gc_logs_compacted_total'):.0f}")
