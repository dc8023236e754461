"""Policies across the workers of one broker (issue 23): a policy set through the admin port
reaches the loaded topics of both workers, for a partitioned topic's topic policy (its partitions
on both workers) and for a namespace policy over many topics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from wait_helpers import wait_until

from velamq._bundles import NamespaceBundles, default_owner
from velamq.client import AdminClient
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(300)

NAMESPACE = "public/default"
PARTITIONS = 8


@pytest.fixture(scope="module")
def workers2() -> Iterator[BrokerProcess]:
    with run_broker(workers=2) as broker:
        yield broker


def refused(client: Any, names: list[str]) -> int:
    """How many of the topics refuse a second producer (ProducerBusy)."""
    count = 0
    for name in names:
        try:
            extra = client.create_producer(name)
        except pulsar.ProducerBusy:
            count += 1
        else:
            extra.close()
    return count


def spread_over_both_workers(base: str) -> tuple[str, list[str]]:
    """A partitioned topic name (from `base`) whose partitions live on both workers."""
    bundles = NamespaceBundles.even(4)
    for k in range(100):
        topic = f"{base}x{k}"
        partitions = [f"persistent://{NAMESPACE}/{topic}-partition-{i}" for i in range(PARTITIONS)]
        if {default_owner(NAMESPACE, bundles.index_of(p), 2) for p in partitions} == {0, 1}:
            return topic, partitions
    raise AssertionError(f"no name from {base} spreads {PARTITIONS} partitions over two workers")


def test_a_topic_policy_of_a_partitioned_topic_reaches_partitions_on_every_worker(
    workers2: BrokerProcess, topic: str, make_client: Any
) -> None:
    admin = AdminClient(workers2.admin_url)
    topic, partitions = spread_over_both_workers(topic)
    admin.request("PUT", f"/admin/v2/persistent/{NAMESPACE}/{topic}/partitions", PARTITIONS)
    client = make_client(workers2.service_url)
    producers = [client.create_producer(p, batching_enabled=False) for p in partitions]
    for p in producers:
        p.send(b"loaded")
    assert refused(client, partitions) == 0

    admin.request("POST", f"/admin/v2/persistent/{NAMESPACE}/{topic}/maxProducers", 1)
    wait_until(lambda: refused(client, partitions) == PARTITIONS,
               "maxProducers=1 on the partitioned topic refused a second producer on every partition")

    admin.request("DELETE", f"/admin/v2/persistent/{NAMESPACE}/{topic}/maxProducers")
    wait_until(lambda: refused(client, partitions) == 0, "the removed topic policy no longer refuses anyone")


def test_a_namespace_policy_reaches_topics_loaded_on_the_other_worker_among_many(
    workers2: BrokerProcess, topic: str, make_client: Any
) -> None:
    """Many topics loaded on both workers, then a namespace policy set through one admin call:
    every topic, on either worker, runs under it."""
    admin = AdminClient(workers2.admin_url)
    namespace = f"public/{topic}"
    admin.request("PUT", f"/admin/v2/namespaces/{namespace}", {})
    names = [f"persistent://{namespace}/t{i}" for i in range(40)]
    bundles = NamespaceBundles.even(4)
    assert {default_owner(namespace, bundles.index_of(n), 2) for n in names} == {0, 1}
    client = make_client(workers2.service_url)
    producers = [client.create_producer(name, batching_enabled=False) for name in names]
    for p in producers:
        p.send(b"loaded")
    admin.request("POST", f"/admin/v2/namespaces/{namespace}/maxProducersPerTopic", 1)
    wait_until(lambda: refused(client, names) == len(names),
               "maxProducersPerTopic=1 refused a second producer on every topic")
