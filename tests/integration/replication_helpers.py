"""Several real brokers, each its own cluster, replicating a namespace to each other (RP-*).

    with clusters("east", "west") as (east, west):
        link(east, west)                       # every cluster registers the others, public/geo
                                               # replicates to all of them, deduplication on
        ...produce on east.broker.service_url...
        wait_quiet([east, west], topic)         # every replicator connected with no backlog
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wait_helpers import wait_until

from velamq.client import AdminClient, AdminError
from velamq.testing import BrokerProcess

NAMESPACE = "public/geo"


@dataclass
class Cluster:
    name: str
    broker: BrokerProcess

    @property
    def admin(self) -> AdminClient:
        return AdminClient(self.broker.admin_url)

    def stats(self, topic: str) -> dict[str, Any]:
        result: dict[str, Any] = self.admin.request("GET", AdminClient.topic_path(topic, "stats"))
        return result

    def replication(self, topic: str) -> dict[str, Any]:
        return dict(self.stats(topic)["replication"])


@contextlib.contextmanager
def clusters(*names: str, extra_args: list[str] | None = None) -> Iterator[list[Cluster]]:
    """One broker process per name, its clusterName that name; stopped and removed on exit."""
    root = Path(tempfile.mkdtemp(prefix="velamq-repl-"))
    started: list[Cluster] = []
    try:
        for name in names:
            broker = BrokerProcess(root / name, ["--cluster-name", name, *(extra_args or [])])
            broker.start()
            started.append(Cluster(name, broker))
        yield started
    finally:
        for cluster in started:
            cluster.broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def register(cluster: Cluster, others: list[Cluster]) -> None:
    for other in others:
        cluster.admin.request("PUT", AdminClient.path("clusters", other.name), {
            "serviceUrl": other.broker.admin_url, "brokerServiceUrl": other.broker.service_url,
        })


def link(*members: Cluster, namespace: str = NAMESPACE, deduplication: bool = True) -> None:
    """Full mesh: each cluster knows the others, and `namespace` replicates to all of them."""
    names = [c.name for c in members]
    tenant, _ = namespace.split("/")
    for cluster in members:
        register(cluster, [o for o in members if o is not cluster])
        cluster.admin.request("POST", AdminClient.path("tenants", tenant), {"adminRoles": [], "allowedClusters": names})
        cluster.admin.request("PUT", AdminClient.namespace_path(namespace), {})
        if deduplication:
            cluster.admin.request("POST", AdminClient.namespace_path(namespace, "deduplication"), True)
        cluster.admin.request("POST", AdminClient.namespace_path(namespace, "replication"), names)


def wait_quiet(members: list[Cluster], topic: str, timeout_s: float = 60.0) -> None:
    """Every replicator of `topic` on every cluster connected, with nothing left to send."""

    def quiet() -> bool:
        for cluster in members:
            try:
                replication = cluster.replication(topic)
            except AdminError:  # not created there yet
                return False
            if sorted(replication) != sorted(c.name for c in members if c is not cluster):
                return False
            if any(not r["connected"] or r["replicationBacklog"] for r in replication.values()):
                return False
        return True

    wait_until(quiet, timeout_s=timeout_s, what=f"replication of {topic} caught up")


def messages_in(cluster: Cluster, topic: str) -> int:
    """Messages the topic took in since it loaded there (0 while it does not exist there)."""
    try:
        return int(cluster.stats(topic)["msgInCounter"])
    except AdminError:
        return 0
