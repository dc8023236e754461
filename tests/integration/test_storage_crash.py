"""ME-6 in CI: SIGKILL the broker at a random moment while the official client produces, several rounds.

Three topics share the broker's one journal: one unbatched with small messages, one batched, one
unbatched with 8 kB messages (so the write cache fills and flushes, and journal segments are trimmed,
while the producers run). Each round a fresh client sends with send_async, in-flight messages bounded
by a semaphore, until the broker is killed with SIGKILL a random time after the first receipts; the
client is then closed, so nothing is resent. The broker restarts on the same data dir and ports.

After every restart, for every topic, the messages of that round that are stored are exactly a prefix
of what was sent (a torn tail is cut, never a hole), in order, with no duplicate, and include every
message whose receipt arrived. At the end the whole topic is read once more from the start: every
round, in order, exactly once. The random seed is printed, so a failure can be replayed.

The namespace keeps everything (retention -1/-1): the topics have no durable subscription, and with
Pulsar's default retention (0) the broker's retention check deletes every closed ledger of such a
topic, at a moment that depends on timing, so the final read from the start would miss whole
rounds (seed 298544707 once read crash-large from round 3 on). The broker checks its policies every
0.2 s instead of 5 s, so that retention, were it to delete anything here, would do it in every run.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar
import pytest
from interop_helpers import close_after_kill

from velamq.client import AdminClient
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(240)

rounds = 4
in_flight = 500
# The kill comes this long (s) after the round's first receipt, chosen at random in between.
kill_after_s = (0.3, 2.0)
policy_check_interval_s = 0.2


@dataclass(frozen=True, slots=True)
class TopicPlan:
    name: str
    batched: bool
    filler_bytes: int


PLANS = [
    TopicPlan("crash-small", batched=False, filler_bytes=40),
    TopicPlan("crash-batched", batched=True, filler_bytes=60),
    TopicPlan("crash-large", batched=False, filler_bytes=8_000),
]


def payload(round_: int, i: int, filler_bytes: int) -> bytes:
    return b"r%02d-%08d-" % (round_, i) + b"x" * filler_bytes


def parse(data: bytes) -> tuple[int, int]:
    head = data.split(b"-", 2)
    return int(head[0][1:]), int(head[1])


@dataclass(slots=True)
class Sender:
    """One producer's round: send_async in a thread, in-flight bounded; records confirmed indexes."""

    producer: Any
    round_: int
    plan: TopicPlan
    confirmed: set[int] = field(default_factory=set)
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    permits: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(in_flight))
    stop: threading.Event = field(default_factory=threading.Event)
    first_receipt: threading.Event = field(default_factory=threading.Event)

    def callback(self, i: int) -> Callable[[Any, Any], None]:
        def cb(result: Any, _msg_id: Any) -> None:
            if result == pulsar.Result.Ok:
                with self.lock:
                    self.confirmed.add(i)
                self.first_receipt.set()
            self.permits.release()

        return cb

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            if not self.permits.acquire(timeout=0.05):
                continue
            try:
                self.producer.send_async(payload(self.round_, i, self.plan.filler_bytes), self.callback(i))
            except pulsar.PulsarException:
                return  # closed under us
            i += 1
            self.sent = i


def read_after(client: Any, topic: str, start: Any) -> list[Any]:
    """Everything after `start` up to the end the broker knows of (not "until a read times out": a
    restarted broker may take longer than any fixed idle time to serve the first read)."""
    reader = client.create_reader(topic, start)
    out: list[Any] = []
    try:
        while reader.has_message_available():
            out.append(reader.read_next(30_000))
        return out
    finally:
        reader.close()


def produce_and_kill(broker: BrokerProcess, round_: int, rng: random.Random) -> list[Sender]:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    senders = []
    for plan in PLANS:
        producer = client.create_producer(
            plan.name,
            batching_enabled=plan.batched,
            batching_max_publish_delay_ms=2,
            max_pending_messages=4 * in_flight,
            block_if_queue_full=False,
            send_timeout_millis=60_000,
        )
        senders.append(Sender(producer, round_, plan))
    threads = [threading.Thread(target=s.run, daemon=True) for s in senders]
    for t in threads:
        t.start()
    for s in senders:
        assert s.first_receipt.wait(30), f"round {round_}: no receipt on {s.plan.name} within 30 s"
    time.sleep(rng.uniform(*kill_after_s))
    broker.kill()
    for s in senders:
        s.stop.set()
    for t in threads:
        t.join(10)
    close_after_kill(client)  # fails what is pending; nothing is resent to the restarted broker
    return senders


def keep_everything(broker: BrokerProcess) -> None:
    """Retention -1/-1 on public/default: no ledger is deleted, consumed or not."""
    admin = AdminClient(broker.admin_url)
    admin.request("POST", AdminClient.namespace_path("public/default", "retention"),
                  {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    assert admin.request("GET", AdminClient.namespace_path("public/default", "retention")) == {
        "retentionTimeInMinutes": -1, "retentionSizeInMB": -1}


def test_acknowledged_messages_survive_sigkill_in_every_round(tmp_path: Path) -> None:
    config = tmp_path / "broker.conf"
    config.write_text(f"policyCheckIntervalSeconds={policy_check_interval_s}\n")
    seed = int(os.environ.get("VELAMQ_CRASH_SEED", random.randrange(1 << 30)))
    print(f"crash test seed {seed} (set VELAMQ_CRASH_SEED to replay)")
    rng = random.Random(seed)
    with run_broker(extra_args=["--config", str(config)]) as broker:
        keep_everything(broker)
        last_ids: dict[str, Any] = {plan.name: pulsar.MessageId.earliest for plan in PLANS}
        history: dict[str, list[tuple[int, int]]] = {plan.name: [] for plan in PLANS}
        for round_ in range(rounds):
            senders = produce_and_kill(broker, round_, rng)
            broker.start()
            client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                                   logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            try:
                for s in senders:
                    name = s.plan.name
                    msgs = read_after(client, name, last_ids[name])
                    stored = [parse(m.data()) for m in msgs]
                    assert all(r == round_ for r, _ in stored), f"{name}: messages of another round after the last"
                    indexes = [i for _, i in stored]
                    assert indexes == list(range(len(indexes))), (
                        f"seed {seed}, round {round_}, {name}: stored messages are not a gap-free prefix "
                        f"of the stream: {indexes[:5]}...{indexes[-5:]}"
                    )
                    missing = sorted(s.confirmed - set(indexes))
                    assert not missing, (
                        f"seed {seed}, round {round_}, {name}: {len(missing)} acknowledged messages lost, "
                        f"first {missing[:10]} (stored {len(indexes)}, confirmed {len(s.confirmed)})"
                    )
                    assert len(indexes) <= s.sent
                    if msgs:
                        last_ids[name] = msgs[-1].message_id()
                    history[name] += stored
                    print(f"round {round_} {name}: sent {s.sent}, confirmed {len(s.confirmed)}, stored {len(indexes)}")
                # The whole log, once more from the start: every round in order, exactly once.
                for plan in PLANS:
                    everything = [parse(m.data()) for m in read_after(client, plan.name, pulsar.MessageId.earliest)]
                    assert everything == history[plan.name], f"seed {seed}: {plan.name} changed across restarts"
            finally:
                client.close()
