"""Non-persistent topics write nothing and hold no more memory than the budget allows.

Pulsar's documentation (cookbooks-non-persistent.md, concepts-messaging.md "Non-persistent
topics"): "messages on non-persistent topics are never persisted to disk and live only in memory";
"brokers immediately deliver messages to all connected subscribers without persisting them".
velamq keeps no buffer for them either: what no consumer can take when it is published is dropped
(Pulsar's msgDropRate), so a consumer that stops reading costs only the frames already queued on
its connection, which the network's share of the memory budget bounds.

- 10 000 messages through a non-persistent topic leave the data directory's files (names, sizes)
  and every storage counter (journal, write cache, flushes, entry logs) as they were.
- a consumer that grants a million permits and never reads its socket while 256 MiB are published:
  the broker's outbound bytes stay under their bound, its RSS within the budget plus the same slack
  as the persistent case (test_limits_memory.py), and what could not be sent is counted as dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from limits_helpers import PeakRss, http, metrics, rss_bytes, stalled_consumer

from velamq.testing import run_broker

pytestmark = pytest.mark.timeout(240)

MIB = 1 << 20


def files_of(data_dir: Path) -> dict[str, int]:
    """Every file under the data directory and its size."""
    return {str(p.relative_to(data_dir)): p.stat().st_size for p in sorted(data_dir.rglob("*")) if p.is_file()}


def storage_counters(admin_url: str) -> dict[str, float]:
    """The storage's write-side figures: what a stored entry would move."""
    moved_by_writes = ("journal", "write_cache", "flush", "entry_log", "publish_buffer_bytes", "index")
    return {name: value for name, value in metrics(admin_url).items()
            if name.startswith("velamq_storage_") and any(part in name for part in moved_by_writes)}


def test_ten_thousand_messages_write_nothing(tmp_path: Path, make_client: Any) -> None:
    data_dir = tmp_path / "data"
    with run_broker(data_dir) as broker:
        topic = "non-persistent://public/default/nothing-stored"
        client = make_client(broker.service_url)
        consumer = client.subscribe(topic, "sub", receiver_queue_size=20_000)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        producer.send(b"first")  # the topic's row and everything around it exist from here on
        assert consumer.receive(10_000).data() == b"first"
        files_before, counters_before = files_of(data_dir), storage_counters(broker.admin_url)
        for i in range(10_000):
            producer.send_async(b"message-%d" % i, None)
        producer.flush()
        for i in range(10_000):
            assert consumer.receive(10_000).data() == b"message-%d" % i
        assert storage_counters(broker.admin_url) == counters_before
        assert files_of(data_dir) == files_before
        status, stats = http("GET", f"{broker.admin_url}/admin/v2/non-persistent/public/default/nothing-stored/stats")
        assert status == 200 and stats["msgInCounter"] == 10_001 and stats["storageSize"] == 0


def test_a_consumer_that_never_reads_is_bounded_by_the_budget(tmp_path: Path, make_client: Any) -> None:
    budget_bytes, slack_bytes, message_bytes = 256 * MIB, 150 * MIB, 64 * 1024
    with run_broker(tmp_path / "data", ["--memory", "256M"]) as broker:
        topic = "non-persistent://public/default/never-read"
        slow = stalled_consumer(broker.broker_port, topic)
        client = make_client(broker.service_url)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True,
                                          max_pending_messages=200)
        rss = PeakRss(broker.pid or 0)
        payload = b"x" * message_bytes
        count = 256 * MIB // message_bytes
        for _ in range(count):
            producer.send_async(payload, None)
        producer.flush()
        peak = rss.stop()
        figures = metrics(broker.admin_url)
        outbound_peak, outbound_max = (figures[f"velamq_broker_network_outbound_bytes_{k}"] for k in ("peak", "max"))
        assert outbound_peak <= outbound_max
        assert peak < budget_bytes + slack_bytes, f"peak RSS {peak / MIB:.0f} MiB"
        status, stats = http("GET", f"{broker.admin_url}/admin/v2/non-persistent/public/default/never-read/stats")
        assert status == 200, stats
        sent = stats["subscriptions"]["slow"]["msgOutCounter"]
        assert 0 < sent < count, json.dumps(stats)[:500]  # the rest was dropped, not kept
        assert rss_bytes(broker.pid or 0) < budget_bytes + slack_bytes
        slow.close()
