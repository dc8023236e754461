"""The admin port of a broker of two workers (`velamq standalone --workers 2`), as an operator uses
it: one address for the whole broker, whichever worker accepts the connection.

- /metrics has every worker's figures, each sample labelled worker="0" or worker="1", one HELP and
  one TYPE per family, and velamq_worker_metrics_up says both answered;
- a partitioned topic whose partitions live on both workers: partitioned-stats sums them all;
- a topic's stats through `velamq admin` on the shared port, whichever worker answers (307 to the
  owner is followed), and the brokers list names both workers.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
import uuid
from collections import Counter

import pulsar
import pytest

from velamq._bundles import NamespaceBundles, default_owner
from velamq.client import AdminClient
from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(300)



_SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples_of(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by family name; asserts one HELP and one TYPE per family."""
    heads = Counter(tuple(line.split(" ", 3)[1:3]) for line in text.split("\n") if line.startswith("# "))
    assert all(count == 1 for count in heads.values()), [h for h, c in heads.items() if c > 1]
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.split("\n"):
        match = _SAMPLE.fullmatch(line)
        if match is not None:
            labels = dict(_LABEL.findall(match.group(2)))
            found.setdefault(match.group(1), []).append((labels, float(match.group(3))))
    return found


def _owner(full_topic: str) -> int:
    return default_owner("public/default", NamespaceBundles.even(4).index_of(full_topic), 2)


def test_metrics_cover_both_workers(workers2: BrokerProcess) -> None:
    topic = f"persistent://public/default/m-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(workers2.service_url)
    try:
        producer = client.create_producer(topic)
        for _ in range(3):
            producer.send(b"x")
        for _ in range(3):  # each scrape is answered by whichever worker accepts it
            with urllib.request.urlopen(workers2.admin_url + "/metrics", timeout=30) as reply:
                text = reply.read().decode()
            families = samples_of(text)
            assert {labels["worker"]: value for labels, value in families["velamq_worker_metrics_up"]} == {
                "0": 1, "1": 1}
            assert {labels["worker"] for labels, _ in families["pulsar_active_connections"]} == {"0", "1"}
            ours = {labels["worker"]: value for labels, value in families["pulsar_in_messages_total"]
                    if labels.get("topic") == topic}
            assert ours == {str(_owner(topic)): 3}
    finally:
        client.close()


def test_partitioned_stats_sum_partitions_of_both_workers(workers2: BrokerProcess) -> None:
    topic = f"persistent://public/default/spread-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(workers2.admin_url)
    partitions = 8
    admin.request("PUT", AdminClient.topic_path(topic, "partitions"), partitions)
    owners = {_owner(f"{topic}-partition-{i}") for i in range(partitions)}
    assert owners == {0, 1}, "the partitions must live on both workers for this test"
    client = pulsar.Client(workers2.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False,
                                          message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
        for i in range(4 * partitions):
            producer.send(f"m{i}".encode())
    finally:
        client.close()
    for _ in range(3):  # whichever worker answers, it gathers every partition from its owner
        stats = admin.request("GET", AdminClient.topic_path(topic, "partitioned-stats"))
        assert stats["msgInCounter"] == 4 * partitions
        assert len(stats["partitions"]) == partitions


def test_topic_stats_and_brokers_through_the_cli(workers2: BrokerProcess) -> None:
    topic = f"persistent://public/default/cli-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(workers2.service_url)
    try:
        client.create_producer(topic).send(b"one")
    finally:
        client.close()
    for _ in range(3):
        done = subprocess.run([sys.executable, "-m", "velamq", "admin", "--admin-url", workers2.admin_url,
                               "topics", "stats", topic, "--json"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["msgInCounter"] == 1
    brokers = AdminClient(workers2.admin_url).request("GET", "/admin/v2/brokers/standalone")
    assert len(brokers) == 2 and workers2.admin_url.split("://")[1] not in brokers  # each worker's own port
