"""The admin API of a broker made of several workers (admin/_routing.py), on two real in-process
brokers, each with an admin server given a WorkerRouting over a shared table of owners: the
boundary the workers implement over the shared metadata. Each broker has its own data dir, so a
call served by the wrong one would find nothing there.

- a call about a topic the other worker owns answers 307 to the owner's admin URL with the same
  path and query; velamq's AdminClient and `velamq admin` follow it with method and body;
- a partitioned topic's stats, subscriptions and unload gather or fan out to each partition's owner;
- bundle unload redirects to the bundle's owner; brokers list every worker; lookup names the owner;
- /metrics merges every worker's figures labelled worker="<id>", and says which worker did not answer.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from test_admin_api_metrics import parse_prometheus

from velamq._bundles import NamespaceBundles
from velamq.admin import AdminServer
from velamq.broker import BrokerAdmin
from velamq.client import AdminClient, Client
from velamq.testing import BrokerThread, free_port

pytestmark = pytest.mark.timeout(120)

TOPIC = "persistent://public/default/routed"
PARTITIONED = "persistent://public/default/spread"


@dataclass
class Cluster:
    """What every worker knows: each one's URLs and who owns which topic and bundle (default: 0)."""

    web_urls: dict[int, str] = field(default_factory=dict)
    service_urls: dict[int, str] = field(default_factory=dict)
    topic_owners: dict[str, int] = field(default_factory=dict)
    bundle_owners: dict[tuple[str, str], int] = field(default_factory=dict)


class TableRouting:
    """A WorkerRouting over the Cluster table."""

    def __init__(self, cluster: Cluster, worker_id: int) -> None:
        self.cluster = cluster
        self._id = worker_id

    @property
    def worker_id(self) -> int:
        return self._id

    def _elsewhere(self, owner: int) -> str | None:
        return None if owner == self._id else self.cluster.web_urls[owner]

    async def topic_owner_web_url(self, full_topic: str, tls: bool) -> str | None:
        return self._elsewhere(self.cluster.topic_owners.get(full_topic, 0))

    async def bundle_owner_web_url(self, namespace: str, bundle: str, tls: bool) -> str | None:
        return self._elsewhere(self.cluster.bundle_owners.get((namespace, bundle), 0))

    async def broker_addresses(self) -> list[str]:
        return [urlsplit(url).netloc for url in self.cluster.web_urls.values()]

    async def topic_lookup(self, full_topic: str) -> dict[str, str]:
        owner = self.cluster.topic_owners.get(full_topic, 0)
        service, web = self.cluster.service_urls[owner], self.cluster.web_urls[owner]
        return {"brokerUrl": service, "brokerUrlTls": "", "httpUrl": web, "httpUrlTls": "", "nativeUrl": service}

    async def peer_web_urls(self) -> list[tuple[int, str]]:
        return [(w, url) for w, url in sorted(self.cluster.web_urls.items()) if w != self._id]


@dataclass
class Workers:
    cluster: Cluster
    brokers: list[BrokerThread]
    admins: list[AdminServer]  # each broker's admin API with the routing (the supervisor's part)
    clients: list[Client] = field(default_factory=list)

    def admin(self, worker: int) -> AdminClient:
        return AdminClient(self.cluster.web_urls[worker])

    def client(self, worker: int) -> Client:
        client = Client(self.brokers[worker].service_url)
        self.clients.append(client)
        return client

    def raw(self, worker: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
        """One request without following anything."""
        conn = http.client.HTTPConnection("127.0.0.1", self.admins[worker].port, timeout=10)
        try:
            conn.request(method, path)
            reply = conn.getresponse()
            return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
        finally:
            conn.close()

    def loaded(self, worker: int) -> dict[str, object]:
        broker = self.brokers[worker].server.broker

        async def snapshot() -> dict[str, object]:
            return dict(broker.topics)

        return self.brokers[worker].run(snapshot())


@contextlib.contextmanager
def running_workers(tmp_path: Path) -> Iterator[Workers]:
    """Two in-process brokers, each with an admin server routed over one Cluster table."""
    cluster = Cluster()
    brokers = [BrokerThread(tmp_path / f"w{i}") for i in range(2)]
    admins: list[AdminServer] = []
    try:
        for i, broker in enumerate(brokers):
            broker.start()
            admin = AdminServer(BrokerAdmin(broker.server.broker), "127.0.0.1", 0, routing=TableRouting(cluster, i))
            broker.run(admin.start())
            admins.append(admin)
            cluster.web_urls[i] = admin.web_service_url
            cluster.service_urls[i] = broker.service_url
        ws = Workers(cluster, brokers, admins)
        for i in range(2):  # the same partitioned topic in both metadata stores (shared in a real broker)
            ws.admin(i).request("PUT", AdminClient.topic_path(PARTITIONED, "partitions"), 2)
        yield ws
        for client in ws.clients:
            client.close()
    finally:
        for broker, admin in zip(brokers, admins, strict=False):
            broker.run(admin.close())
        for broker in brokers:
            broker.stop()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    with running_workers(tmp_path) as ws:
        yield ws


def _produce(ws: Workers, worker: int, topic: str, count: int) -> None:
    producer = ws.client(worker).create_producer(topic)
    for i in range(count):
        producer.send(f"m{i}".encode())
    producer.close()


def test_a_topic_call_on_the_wrong_worker_is_redirected_to_its_owner(workers: Workers) -> None:
    workers.cluster.topic_owners[TOPIC] = 1
    _produce(workers, 1, TOPIC, 3)
    path = AdminClient.topic_path(TOPIC, "stats") + "?getPreciseBacklog=true"
    status, headers, _ = workers.raw(0, "GET", path)
    assert status == 307
    assert headers["location"] == workers.cluster.web_urls[1] + path
    assert workers.raw(1, "GET", path)[0] == 200  # the owner serves it
    assert workers.admin(0).request("GET", path)["msgInCounter"] == 3

    # A redirected call keeps its method and body: a subscription made and moved back on the owner.
    sub = AdminClient.topic_path(TOPIC, "subscription", "audit")
    workers.admin(0).request("PUT", sub)
    assert workers.admin(1).request("GET", AdminClient.topic_path(TOPIC, "stats"))["subscriptions"]["audit"][
        "msgBacklog"] == 0
    first = workers.admin(1).request("GET", AdminClient.topic_path(TOPIC, "internalStats"))["ledgers"][0]["ledgerId"]
    workers.admin(0).request("POST", sub + "/resetcursor", {"ledgerId": first, "entryId": 1, "partitionIndex": -1})
    stats = workers.admin(1).request("GET", AdminClient.topic_path(TOPIC, "stats"))
    assert stats["subscriptions"]["audit"]["msgBacklog"] == 2

    # `velamq admin` against the wrong worker follows the redirect too.
    done = subprocess.run([sys.executable, "-m", "velamq", "admin", "--admin-url", workers.cluster.web_urls[0],
                           "topics", "stats", TOPIC, "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["msgInCounter"] == 3


def test_metadata_calls_are_served_where_they_arrive(workers: Workers) -> None:
    workers.cluster.topic_owners[TOPIC] = 1
    admin = workers.admin(0)
    admin.request("PUT", AdminClient.topic_path(TOPIC))  # creating a topic is metadata: served by worker 0
    admin.request("POST", AdminClient.topic_path(TOPIC, "retention"), {"retentionTimeInMinutes": 5,
                                                                      "retentionSizeInMB": 1})
    status, _, body = workers.raw(0, "GET", AdminClient.topic_path(TOPIC, "retention"))
    assert (status, json.loads(body)["retentionTimeInMinutes"]) == (200, 5)
    assert TOPIC in workers.admin(0).request("GET", "/admin/v2/persistent/public/default")
    assert TOPIC not in workers.admin(1).request("GET", "/admin/v2/persistent/public/default")  # not the owner
    assert workers.raw(0, "GET", AdminClient.topic_path(PARTITIONED, "partitions"))[0] == 200


def test_a_partitioned_topic_gathers_and_fans_out_to_each_partitions_owner(workers: Workers) -> None:
    p0, p1 = f"{PARTITIONED}-partition-0", f"{PARTITIONED}-partition-1"
    workers.cluster.topic_owners[p1] = 1
    _produce(workers, 0, p0, 1)
    _produce(workers, 1, p1, 2)
    workers.admin(1).request("PUT", AdminClient.topic_path(p1, "subscription", "only-on-1"))

    stats = workers.admin(0).request("GET", AdminClient.topic_path(PARTITIONED, "partitioned-stats"))
    assert stats["msgInCounter"] == 3
    assert {name: s["msgInCounter"] for name, s in stats["partitions"].items()} == {p0: 1, p1: 2}
    assert "only-on-1" in stats["subscriptions"]
    internal = workers.admin(0).request("GET", AdminClient.topic_path(PARTITIONED, "partitioned-internalStats"))
    assert internal["partitions"][p1]["entriesAddedCounter"] == 2
    assert workers.admin(0).request("GET", AdminClient.topic_path(PARTITIONED, "subscriptions")) == ["only-on-1"]

    # Fanned-out changes land on the owner: a subscription on every partition, an unload of each.
    workers.admin(0).request("PUT", AdminClient.topic_path(PARTITIONED, "subscription", "everywhere"))
    assert "everywhere" in workers.admin(1).request("GET", AdminClient.topic_path(p1, "subscriptions"))
    before = workers.loaded(1)[p1]
    workers.admin(0).request("PUT", AdminClient.topic_path(PARTITIONED, "unload"))
    assert workers.loaded(1).get(p1) is not before


def test_bundle_unload_is_redirected_to_the_bundles_owner(workers: Workers) -> None:
    bundle = NamespaceBundles.even(4).bundle_of(TOPIC).name
    workers.cluster.topic_owners[TOPIC] = 1
    workers.cluster.bundle_owners[("public/default", bundle)] = 1
    _produce(workers, 1, TOPIC, 1)
    assert TOPIC in workers.loaded(1)
    path = AdminClient.namespace_path("public/default", bundle, "unload")
    status, headers, _ = workers.raw(0, "PUT", path)
    assert (status, headers["location"]) == (307, workers.cluster.web_urls[1] + path)
    done = subprocess.run([sys.executable, "-m", "velamq", "admin", "--admin-url", workers.cluster.web_urls[0],
                           "namespaces", "unload", "public/default", "--bundle", bundle],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert TOPIC not in workers.loaded(1)


def test_brokers_list_every_worker_and_lookup_names_the_owner(workers: Workers) -> None:
    ids = sorted(urlsplit(url).netloc for url in workers.cluster.web_urls.values())
    assert workers.admin(0).request("GET", "/admin/v2/brokers/standalone") == ids
    workers.cluster.topic_owners[TOPIC] = 1
    answer = workers.admin(0).request("GET", "/lookup/v2/topic/persistent/public/default/routed")
    assert answer["brokerUrl"] == workers.brokers[1].service_url
    assert answer["httpUrl"] == workers.cluster.web_urls[1]
    # velamq's client given the HTTP service URL of worker 0 produces to worker 1, the owner.
    client = Client(workers.cluster.web_urls[0])
    workers.clients.append(client)
    client.create_producer(TOPIC).send(b"through the lookup")
    assert workers.admin(1).request("GET", AdminClient.topic_path(TOPIC, "stats"))["msgInCounter"] == 1


def _scrape(workers: Workers, worker: int, query: str = "") -> dict[str, Any]:
    status, _, body = workers.raw(worker, "GET", "/metrics" + query)
    assert status == 200
    return parse_prometheus(body.decode())


def test_metrics_cover_every_worker_with_a_worker_label(workers: Workers) -> None:
    workers.cluster.topic_owners[TOPIC] = 1
    _produce(workers, 1, TOPIC, 2)
    families = _scrape(workers, 0)
    connections = families["pulsar_active_connections"].samples
    assert {dict(labels)["worker"] for labels in connections} == {"0", "1"}
    topic_samples = families["pulsar_in_messages_total"].samples
    assert topic_samples[(("worker", "1"), ("cluster", "standalone"), ("namespace", "public/default"),
                          ("topic", TOPIC))] == 2
    up = families["velamq_worker_metrics_up"].samples
    assert up == {(("cluster", "standalone"), ("worker", "0")): 1, (("cluster", "standalone"), ("worker", "1")): 1}
    local = _scrape(workers, 1, "?local=true")  # what a peer hands over: its own figures, unlabelled
    assert all("worker" not in dict(labels) for f in local.values() for labels in f.samples)

    # A worker that does not answer is left out of the page, and the page says so.
    workers.cluster.web_urls[2] = f"http://127.0.0.1:{free_port()}"
    families = _scrape(workers, 0)
    assert families["velamq_worker_metrics_up"].samples[(("cluster", "standalone"), ("worker", "2"))] == 0
    assert {dict(labels)["worker"] for labels in families["pulsar_active_connections"].samples} == {"0", "1"}


def test_namespace_unload_reaches_every_worker(workers: Workers) -> None:
    here = "persistent://public/default/on-worker-0"
    workers.cluster.topic_owners[TOPIC] = 1
    _produce(workers, 0, here, 1)
    _produce(workers, 1, TOPIC, 1)
    assert here in workers.loaded(0) and TOPIC in workers.loaded(1)
    workers.admin(0).request("PUT", AdminClient.namespace_path("public/default", "unload"))
    assert here not in workers.loaded(0)
    assert TOPIC not in workers.loaded(1)


def test_owned_namespaces_are_the_bundles_each_worker_owns(workers: Workers) -> None:
    ranges = [r.name for r in NamespaceBundles.even(4).ranges]
    workers.cluster.bundle_owners[("public/default", ranges[2])] = 1
    ids = {w: urlsplit(url).netloc for w, url in workers.cluster.web_urls.items()}
    owned = {w: workers.admin(0).request("GET", f"/admin/v2/brokers/standalone/{ids[w]}/ownedNamespaces")
             for w in (0, 1)}
    assert set(owned[1]) == {f"public/default/{ranges[2]}"}
    assert set(owned[0]) == {f"public/default/{r}" for r in ranges if r != ranges[2]}
