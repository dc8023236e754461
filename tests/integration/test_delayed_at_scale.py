"""Delayed delivery at scale against a broker process (issue 13, CO-4): 100 000 pending delayed
messages (due in 10 days) on one Shared subscription do not hold back normal messages; a restart
with them pending loads the stored index (the log is not read again) and normal messages still
flow; messages delayed by 2 s arrive no earlier, in order. The million, the RSS per message and
the times are benchmarks/delayed.py's (docs/benchmarks.md).

VELAMQ_DELAYED_COUNT sets the count (default 100 000)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest
from interop_helpers import http
from wait_helpers import wait_until

from velamq.client import AsyncClient
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(600)
COUNT = int(os.environ.get("VELAMQ_DELAYED_COUNT", "100000"))
NORMAL = 10_000
TOPIC = "persistent://public/default/delayed-scale"
TEN_DAYS_MS = 10 * 24 * 3600 * 1000


def subscription_stats(broker: BrokerProcess) -> dict[str, Any]:
    status, body = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/delayed-scale/stats")
    assert status == 200, body
    return dict(json.loads(body)["subscriptions"]["sub"])


def entries_read(broker: BrokerProcess) -> float:
    status, body = http("GET", f"{broker.admin_url}/metrics")
    assert status == 200
    found = re.findall(r"^velamq_storage_read_entries_(?:cache|disk)_total(?:\{[^}]*\})? (\S+)$", body, re.MULTILINE)
    assert found, "no storage read counters on /metrics"
    return sum(float(v) for v in found)


async def publish(url: str, count: int, deliver_after_ms: int | None, prefix: bytes) -> None:
    async with AsyncClient(url, operation_timeout_s=120) as client:
        producer = await client.create_producer(TOPIC, block_if_queue_full=True, max_pending_messages=5000)
        pending = []
        for i in range(count):
            pending.append(await producer.send_async(prefix + b"%d %d" % (i, int(time.time() * 1000)),
                                                     deliver_after=deliver_after_ms))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)


def receive_all(consumer: Any, count: int, timeout_s: float) -> list[tuple[bytes, float]]:
    got: list[tuple[bytes, float]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"received {len(got)} of {count}"
        try:
            message = consumer.receive(1000)
        except pulsar.Timeout:
            continue
        got.append((message.data(), time.time()))
        consumer.acknowledge(message)
    return got


def test_pending_delayed_messages_neither_hold_back_nor_survive_a_restart_by_rescanning(tmp_path: Path) -> None:
    with run_broker(tmp_path / "data") as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        asyncio.run(publish(broker.service_url, COUNT, TEN_DAYS_MS, b"later "))
        wait_until(lambda: subscription_stats(broker)["msgDelayed"] == COUNT, "the delayed index", timeout_s=300)
        asyncio.run(publish(broker.service_url, NORMAL, None, b"now "))
        got = receive_all(consumer, NORMAL, 120)
        assert all(data.startswith(b"now ") for data, _ in got)  # not one delayed message early
        client.close()

        broker.stop()
        broker.start()
        read_before = entries_read(broker)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
        wait_until(lambda: subscription_stats(broker)["msgDelayed"] == COUNT, "the stored index")
        asyncio.run(publish(broker.service_url, 1000, None, b"now "))
        assert all(data.startswith(b"now ") for data, _ in receive_all(consumer, 1000, 60))
        # The stored buckets were loaded: a few records, not the log of COUNT entries.
        assert entries_read(broker) - read_before < COUNT / 10

        sent_at = time.time()
        asyncio.run(publish(broker.service_url, 1000, 2000, b"soon "))
        soon = receive_all(consumer, 1000, 60)
        for data, arrived in soon:
            assert data.startswith(b"soon ")
            sent_ms = int(data.split()[2])
            assert arrived * 1000 >= sent_ms + 2000 - 5  # never early (5 ms: clock granularity)
        order = [int(data.split()[1]) for data, _ in soon]
        assert order == sorted(order)  # in the order they are due
        assert sent_at > 0
        client.close()
