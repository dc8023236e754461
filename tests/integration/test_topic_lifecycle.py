"""Topic lifecycle: deleting a topic leaves no metadata rows and no files behind (BR-8), and
Key_Shared keeps per-key order when a consumer joins (issue 5, item 1)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest
from interop_helpers import datas, http, read_to_end
from wait_helpers import wait_until

from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(120)


def metadata_rows_mentioning(data_dir: Path, needle: str) -> int:
    """Rows in any table of the metadata database with a column that contains `needle`."""
    db = sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        count = 0
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                count += any(isinstance(v, str) and needle in v for v in row)
        return count
    finally:
        db.close()


def managed_ledgers_of(data_dir: Path, topic: str) -> list[str]:
    """Storage's managed ledgers of the topic (its log and its compacted store), as storage.db has
    them (a flush, every second, brings creations and deletions there)."""
    db = sqlite3.connect(f"file:{data_dir / 'storage.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT name FROM managed_ledgers WHERE substr(name, 1, ?) = ?", (len(topic), topic))
        return [r[0] for r in rows]
    finally:
        db.close()


def test_deleting_a_topic_removes_its_metadata_and_ledgers(broker: BrokerProcess, make_client: Any) -> None:
    local = f"to-delete-{int(time.time() * 1000)}"
    full = f"persistent://public/default/{local}"
    client = make_client(broker.service_url)
    producer = client.create_producer(full, batching_enabled=False)
    consumer = client.subscribe(full, "sub", initial_position=pulsar.InitialPosition.Earliest)
    for i in range(30):
        producer.send(f"m{i}".encode(), partition_key=f"k{i % 3}")
    consumer.acknowledge(consumer.receive(5000))
    base = f"{broker.admin_url}/admin/v2/persistent/public/default/{local}"
    assert http("POST", f"{base}/messageTTL", "3600")[0] == 204
    assert http("PUT", f"{base}/compaction", "")[0] in (200, 204)
    wait_until(lambda: "SUCCESS" in http("GET", f"{base}/compaction")[1], "the compaction to succeed")
    producer.close()
    consumer.close()

    assert metadata_rows_mentioning(broker.data_dir, full) >= 2  # the topic and its policies
    # Its log and its compacted store.
    wait_until(lambda: len(managed_ledgers_of(broker.data_dir, full)) == 2, "the log and the compacted store")

    status, body = http("DELETE", f"{base}?force=true")
    assert status == 204, body
    assert metadata_rows_mentioning(broker.data_dir, full) == 0
    wait_until(lambda: managed_ledgers_of(broker.data_dir, full) == [], "the topic's managed ledgers removed")
    status, _ = http("GET", f"{base}/stats")
    assert status == 404

    # The name again: a new, empty topic (its row created by this load, so no compacted store is
    # looked for); a compacted reader gets its one message, nothing of the deleted topic's.
    producer = client.create_producer(full, batching_enabled=False)
    producer.send(b"new", partition_key="k1")
    reader = client.create_reader(full, pulsar.MessageId.earliest, is_read_compacted=True)
    assert datas(read_to_end(reader)) == [b"new"]
    reader.close()
    producer.close()


def test_key_shared_new_consumer_waits_until_earlier_messages_of_its_keys_are_acked(
    broker: BrokerProcess, make_client: Any
) -> None:
    topic = f"persistent://public/default/ks-join-{int(time.time() * 1000)}"
    client = make_client(broker.service_url)
    first = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="a")
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(20)]
    for i in range(100):
        producer.send(f"{i}".encode(), partition_key=keys[i % 20])
    held = [first.receive(5000) for _ in range(100)]  # received, not acknowledged

    second = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="b")
    for i in range(100, 200):
        producer.send(f"{i}".encode(), partition_key=keys[i % 20])
    # Some keys moved to the second consumer; their earlier messages are still unacked at the first.
    with pytest.raises(pulsar.Timeout):
        second.receive(1500)

    seen: dict[str, list[int]] = {}
    for msg in held:
        seen.setdefault(msg.partition_key(), []).append(int(msg.data()))
        first.acknowledge(msg)
    got_second = 0
    deadline = time.monotonic() + 60  # only an upper bound
    total = 100
    while total < 200 and time.monotonic() < deadline:
        for consumer in (first, second):
            try:
                msg = consumer.receive(200)
            except pulsar.Timeout:
                continue
            seen.setdefault(msg.partition_key(), []).append(int(msg.data()))
            consumer.acknowledge(msg)
            total += 1
            got_second += consumer is second
    assert total == 200
    assert got_second > 0
    for key, values in seen.items():
        assert values == sorted(values), f"{key} out of order: {values}"
    stats = json.loads(
        http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/stats")[1]
    )
    assert stats["subscriptions"]["ks"]["type"] == "Key_Shared"
