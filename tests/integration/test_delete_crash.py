"""kill -9 at random moments of a topic delete, 20 rounds: after the restart the topic is either
fully there (listed, its subscription there, every message readable) or fully gone (not listed,
stats 404, no metadata row left, and a topic created again under the name is empty). Before
the delete was made crash-safe, a topic came back listed with ledgers missing and its
subscription gone.

The rounds alternate a topic and a partitioned topic of 8 partitions (all of them must be there,
or none). One broker, killed and started again each round. A delete takes milliseconds, so the
moments are aimed: a quarter of the rounds kill within a millisecond of sending the request (the
delete may not have begun), the others a random 0-4 ms after the delete's mark shows in the
metadata store (read by the test, as a backup tool would), which lands in its middle or just
after its end. Either outcome is right in every round; the mix is what the rounds are for.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pulsar
import pytest
from limits_helpers import http

from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(240)

rounds = 20
messages = 400
partitions = 8
kill_after_mark_ms_max = 4.0
NS_URL = "/admin/v2/persistent/public/default"


def metadata_rows(data_dir: Path, topic: str) -> int:
    """Rows naming the topic, or one of its partitions, in any table that holds topic names."""
    db = sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True)
    try:
        return sum(
            db.execute(f"SELECT COUNT(*) FROM {table} WHERE name = ? OR name LIKE ?", (topic, topic + "-partition-%"))
            .fetchone()[0]
            for table in ("topics", "partitioned_topics", "topic_policies", "topic_deletions")
        )
    finally:
        db.close()


def marked(data_dir: Path, topic: str) -> bool:
    db = sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT 1 FROM topic_deletions WHERE name = ?", (topic,)).fetchone() is not None
    finally:
        db.close()


def delete_quietly(url: str) -> None:
    try:
        http("DELETE", url)
    except OSError:
        pass  # the broker was killed under the request


def received(client: Any, topic: str, count: int) -> set[bytes]:
    """What a new subscription from the earliest position gets, waiting for `count` at most."""
    consumer = client.subscribe(topic, f"check-{time.monotonic_ns()}",
                                initial_position=pulsar.InitialPosition.Earliest)
    got: set[bytes] = set()
    try:
        while len(got) < count:
            got.add(consumer.receive(timeout_millis=30_000).data())  # only an upper bound
    except pulsar.Timeout:
        pass
    consumer.unsubscribe()
    return got


def empty(client: Any, topic: str) -> bool:
    """A reader from the start finds nothing (the name is a new, empty topic)."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        return not reader.has_message_available()
    finally:
        reader.close()


def fill(client: Any, topic: str, base: str) -> None:
    client.subscribe(topic, "keep").close()
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    for i in range(messages):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    assert http("POST", f"{base}/messageTTL", 3600)[0] == 204  # a policy row, too


def test_a_topic_delete_cut_by_kill_9_leaves_it_whole_or_gone(tmp_path: Path, make_client: Any) -> None:
    config = tmp_path / "broker.conf"
    config.write_text("managedLedgerMaxEntriesPerLedger=40\n")
    broker = BrokerProcess(tmp_path / "data", ["--config", str(config)])
    broker.start()
    chance = random.Random(16)
    outcomes = {"there": 0, "gone": 0}
    everything = {b"%d" % i for i in range(messages)}
    try:
        for round_ in range(rounds):
            partitioned = round_ % 2 == 1
            local = f"doomed-{round_}"
            topic = f"persistent://public/default/{local}"
            base = f"{broker.admin_url}{NS_URL}/{local}"
            if partitioned:
                assert http("PUT", f"{base}/partitions", partitions)[0] == 204
            client = make_client(broker.service_url)
            fill(client, topic, base)
            client.close()  # no producer left to re-create the topic after the delete

            target = f"{base}/partitions?force=true" if partitioned else f"{base}?force=true"
            threading.Thread(target=delete_quietly, args=(target,), daemon=True).start()
            if chance.random() < 0.25:
                time.sleep(chance.uniform(0, 1) / 1000)
            else:
                deadline = time.monotonic() + 10
                while not marked(broker.data_dir, topic) and time.monotonic() < deadline:
                    pass
                time.sleep(chance.uniform(0, kill_after_mark_ms_max) / 1000)
            broker.kill()
            broker.start()

            lister = f"{broker.admin_url}{NS_URL}/partitioned" if partitioned else f"{broker.admin_url}{NS_URL}"
            status, listed = http("GET", lister)
            assert status == 200
            stats_status, stats = http("GET", f"{base}/partitioned-stats" if partitioned else f"{base}/stats")
            client = make_client(broker.service_url)
            if topic in listed:
                outcomes["there"] += 1
                assert stats_status == 200 and "keep" in stats["subscriptions"], (round_, stats)
                assert stats["subscriptions"]["keep"]["msgBacklog"] == messages, (round_, stats)
                assert received(client, topic, messages) == everything, round_
                assert http("DELETE", target)[0] == 204  # and it deletes cleanly now
            else:
                outcomes["gone"] += 1
                assert stats_status == 404, (round_, stats)
                assert metadata_rows(broker.data_dir, topic) == 0, round_
                assert empty(client, topic), round_  # created anew: empty, nothing came back
            client.close()
    finally:
        broker.stop()
    finished = broker.output.count("cut short by a crash")
    print(f"after {rounds} kills during a delete: {outcomes}, {finished} finished at start")
    assert sum(outcomes.values()) == rounds
