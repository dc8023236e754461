"""kill -9 at random moments of a topic delete, 20 rounds: after the restart the topic is either
fully there (listed, its subscription there, every message readable) or fully gone (not listed,
stats 404, no metadata row left, and a topic created again under the name is empty). Before
the delete was made crash-safe, a topic came back listed with ledgers missing and its
subscription gone.

The rounds use one broker (killed and started again each time) with small ledgers, so each topic
spans many ledgers and its delete takes long enough to be cut in the middle. The moments are
random (seeded): either outcome is right, a mix of both is what the rounds are for.
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
messages = 600
kill_after_ms_max = 10.0


def metadata_rows(data_dir: Path, topic: str) -> int:
    db = sqlite3.connect(f"file:{data_dir / 'metadata.db'}?mode=ro", uri=True)
    try:
        return sum(
            db.execute(f"SELECT COUNT(*) FROM {table} WHERE name = ?", (topic,)).fetchone()[0]
            for table in ("topics", "topic_policies", "topic_deletions")
        )
    finally:
        db.close()


def delete_quietly(url: str) -> None:
    try:
        http("DELETE", url)
    except OSError:
        pass  # the broker was killed under the request


def read_all(client: Any, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=10_000).data())
    reader.close()
    return out


def test_a_topic_delete_cut_by_kill_9_leaves_it_whole_or_gone(tmp_path: Path, make_client: Any) -> None:
    config = tmp_path / "broker.conf"
    config.write_text("managedLedgerMaxEntriesPerLedger=40\n")  # 15 ledgers per topic
    broker = BrokerProcess(tmp_path / "data", ["--config", str(config)])
    broker.start()
    chance = random.Random(16)
    outcomes = {"there": 0, "gone": 0}
    try:
        for round_ in range(rounds):
            local = f"doomed-{round_}"
            topic = f"persistent://public/default/{local}"
            base = f"{broker.admin_url}/admin/v2/persistent/public/default/{local}"
            client = make_client(broker.service_url)
            client.subscribe(topic, "keep").close()
            producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
            for i in range(messages):
                producer.send_async(b"%d" % i, None)
            producer.flush()
            assert http("POST", f"{base}/messageTTL", 3600)[0] == 204  # a policy row, too
            client.close()  # no producer left to re-create the topic after the delete

            threading.Thread(target=delete_quietly, args=(f"{base}?force=true",), daemon=True).start()
            time.sleep(chance.uniform(0, kill_after_ms_max) / 1000)
            broker.kill()
            broker.start()

            status, listed = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default")
            assert status == 200
            stats_status, stats = http("GET", f"{base}/stats")
            client = make_client(broker.service_url)
            if topic in listed:
                outcomes["there"] += 1
                assert stats_status == 200 and "keep" in stats["subscriptions"], (round_, stats)
                assert stats["subscriptions"]["keep"]["msgBacklog"] == messages, (round_, stats)
                assert read_all(client, topic) == [b"%d" % i for i in range(messages)], round_
                assert http("DELETE", f"{base}?force=true")[0] == 204  # and it deletes cleanly now
            else:
                outcomes["gone"] += 1
                assert stats_status == 404, (round_, stats)
                assert metadata_rows(broker.data_dir, topic) == 0, round_
                assert read_all(client, topic) == [], round_  # created anew: empty, nothing came back
            client.close()
    finally:
        broker.stop()
    finished = broker.output.count("cut short by a crash")
    print(f"after {rounds} kills during a delete: {outcomes}, {finished} finished at start")
    assert sum(outcomes.values()) == rounds
