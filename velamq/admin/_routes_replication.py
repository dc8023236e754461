"""Clusters and replication policies, as Pulsar's admin API has them (RP-1, WC-4).

    POST   /admin/v2/clusters/{cluster}                    ClusterData: 204; 404 unknown cluster
    DELETE /admin/v2/clusters/{cluster}                    204; 404; 412 the local cluster, or one a
                                                           tenant still allows
    GET    /admin/v2/namespaces/{t}/{ns}/replication       ["a", "b"]: the namespace's replication_clusters
    POST   /admin/v2/namespaces/{t}/{ns}/replication       body ["a", "b"]: 204; 412 empty list, "global",
                                                           unknown cluster; 403 a cluster the tenant
                                                           does not allow
    GET|POST|DELETE /admin/v2/persistent/{t}/{ns}/{topic}/replication
                                                           the topic's own list (replicationClusters);
                                                           GET ?applied=true falls back to the namespace's

PUT and GET of a cluster are _routes_tenants.py's. ClusterData is stored as given; the replicator
reads brokerServiceUrl[Tls] and the TLS and authentication fields (velamq.replication._clusters).
A change to a cluster or a replication list reaches the replicators at once: through the broker's
policies_changed for the lists, through the server's ReplicationControl for clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from velamq.admin._http import HttpError, Response
from velamq.admin._params import (
    bool_param,
    json_body,
    namespace_of,
    notify_policies_changed,
    object_body,
    require_topic,
    topic_of,
)
from velamq.admin._replication_control import ReplicatorFigures
from velamq.admin._router import Call, Router
from velamq.metadata import _policies as P

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"


def replication_json(figures: Mapping[str, ReplicatorFigures]) -> dict[str, Any]:
    """TopicStats.replication: Pulsar's ReplicatorStats per remote cluster."""
    return {
        remote: {
            "msgRateIn": 0.0,
            "msgThroughputIn": 0.0,
            "msgRateOut": f.msg_rate_out,
            "msgThroughputOut": f.msg_throughput_out,
            "msgRateExpired": 0.0,
            "replicationBacklog": f.replication_backlog,
            "connected": f.connected,
            "replicationDelayInSeconds": round(f.replication_delay_s),
            "inboundConnection": "",
            "inboundConnectedSince": "",
            "outboundConnection": f.outbound_connection,
            "outboundConnectedSince": "",
            "msgOutCount": f.msg_out_total,
            "bytesOutCount": f.bytes_out_total,
            "producerName": f.producer_name,
        }
        for remote, f in sorted(figures.items())
    }


def add_replication(call: Call, topic: str, stats: dict[str, Any]) -> dict[str, Any]:
    """Fill a TopicStats' replication map from the server's replicators."""
    if call.replication is not None:
        stats["replication"] = replication_json(call.replication.topic_stats(topic))
    return stats


# (metric, type, help, figure): Pulsar's replication metrics, one sample per namespace and remote cluster
_METRICS: tuple[tuple[str, str, str, Callable[[ReplicatorFigures], float]], ...] = (
    ("pulsar_replication_rate_out", "gauge", "messages/s sent to the remote cluster",
     lambda f: f.msg_rate_out),
    ("pulsar_replication_throughput_out", "gauge", "bytes/s sent to the remote cluster",
     lambda f: f.msg_throughput_out),
    ("pulsar_replication_backlog", "gauge", "entries not yet replicated to the remote cluster",
     lambda f: f.replication_backlog),
    ("pulsar_replication_connected_count", "gauge", "replicators connected to the remote cluster",
     lambda f: int(f.connected)),
    ("pulsar_replication_delay_in_seconds", "gauge", "age of the oldest message not yet replicated",
     lambda f: f.replication_delay_s),
)


def replication_metrics(call: Call) -> str:
    """Prometheus lines of the replicators, summed per namespace and remote cluster ("" without)."""
    if call.replication is None:
        return ""
    sums: dict[tuple[str, str], list[float]] = {}
    for topic, remote, figures in call.replication.all_stats():
        namespace = topic.split("://", 1)[-1].rsplit("/", 1)[0]
        row = sums.setdefault((namespace, remote), [0.0] * len(_METRICS))
        for i, (_, _, _, figure) in enumerate(_METRICS):
            value = float(figure(figures))
            row[i] = max(row[i], value) if i == len(_METRICS) - 1 else row[i] + value
    if not sums:
        return ""
    cluster = call.backend.cluster_name
    lines = []
    for i, (name, kind, help_text, _) in enumerate(_METRICS):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for (namespace, remote), row in sorted(sums.items()):
            lines.append(f'{name}{{cluster="{cluster}",namespace="{namespace}",remote_cluster="{remote}"}} {row[i]:g}')
    return "\n".join(lines) + "\n"


async def _clusters_changed(call: Call, cluster: str) -> None:
    if call.replication is not None:
        await call.replication.clusters_changed(cluster)


# ---------------------------------------------------------------------------- clusters


async def update_cluster(call: Call) -> Response:
    name = call.params["cluster"]
    await call.backend.metadata.update_cluster(name, object_body(call) or {})
    await _clusters_changed(call, name)
    return Response.no_content()


async def delete_cluster(call: Call) -> Response:
    name = call.params["cluster"]
    metadata = call.backend.metadata
    await metadata.get_cluster(name)  # 404 first
    if name == call.backend.cluster_name:
        raise HttpError(412, f"Cannot delete the local cluster {name}")
    for tenant in await metadata.list_tenants():
        if name in (await metadata.get_tenant(tenant)).get("allowedClusters", []):
            raise HttpError(412, f"Cluster {name} is still allowed for tenant {tenant}")
    await metadata.delete_cluster(name)
    await _clusters_changed(call, name)
    return Response.no_content()


# ---------------------------------------------------------------------------- replication clusters


async def _checked_clusters(call: Call, tenant: str) -> list[str]:
    """The body as a replication list, checked as Pulsar's setNamespaceReplicationClusters does."""
    value = json_body(call)
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise HttpError(400, "The body must be a JSON list of cluster names")
    clusters = list(dict.fromkeys(c.strip() for c in value))
    if not clusters:
        raise HttpError(412, "ClusterIds should not be null or empty")
    if "global" in clusters:
        raise HttpError(412, "Cannot specify global in the list of replication clusters")
    known = set(await call.backend.metadata.list_clusters())
    allowed = (await call.backend.metadata.get_tenant(tenant)).get("allowedClusters", [])
    for cluster in clusters:
        if cluster not in known:
            raise HttpError(412, f"Invalid cluster id: {cluster}")
        if cluster not in allowed:
            raise HttpError(403, f"Cluster {cluster} is not in the list of allowed clusters list for tenant "
                                 f"[{tenant}]")
    return clusters


def _local(call: Call) -> list[str]:
    return [call.backend.cluster_name]


async def get_namespace_replication(call: Call) -> Response:
    stored = (await call.backend.metadata.get_policies(namespace_of(call))).get(P.NS_REPLICATION_CLUSTERS)
    return Response.json(stored if isinstance(stored, list) else _local(call))


async def set_namespace_replication(call: Call) -> Response:
    ns = namespace_of(call)
    await call.backend.metadata.get_policies(ns)  # 404 before any other check
    clusters = await _checked_clusters(call, call.params["tenant"])
    await call.backend.metadata.set_policy(ns, P.NS_REPLICATION_CLUSTERS, clusters)
    await notify_policies_changed(call, ns, None)
    return Response.no_content()


async def get_topic_replication(call: Call) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    stored = (await call.backend.metadata.get_topic_policies(str(topic.partitioned_parent))).get(
        P.TOPIC_REPLICATION_CLUSTERS
    )
    if stored is None and bool_param(call, "applied"):
        stored = (await call.backend.metadata.get_policies(topic.namespace)).get(P.NS_REPLICATION_CLUSTERS)
        stored = stored if isinstance(stored, list) else _local(call)
    return Response.no_content() if stored is None else Response.json(stored)


async def set_topic_replication(call: Call) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    clusters = await _checked_clusters(call, topic.tenant)
    parent = str(topic.partitioned_parent)
    await call.backend.metadata.set_topic_policy(parent, P.TOPIC_REPLICATION_CLUSTERS, clusters)
    await notify_policies_changed(call, topic.namespace, parent)
    return Response.no_content()


async def remove_topic_replication(call: Call) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    parent = str(topic.partitioned_parent)
    await call.backend.metadata.set_topic_policy(parent, P.TOPIC_REPLICATION_CLUSTERS, None)
    await notify_policies_changed(call, topic.namespace, parent)
    return Response.no_content()


def register(router: Router) -> None:
    router.add("POST", "/admin/v2/clusters/{cluster}", update_cluster)
    router.add("DELETE", "/admin/v2/clusters/{cluster}", delete_cluster)
    router.add("GET", NAMESPACE + "/replication", get_namespace_replication)
    router.add("POST", NAMESPACE + "/replication", set_namespace_replication)
    router.add("GET", TOPIC + "/replication", get_topic_replication)
    router.add("POST", TOPIC + "/replication", set_topic_replication)
    router.add("DELETE", TOPIC + "/replication", remove_topic_replication)

