"""Geo-replication verbs of `velamq admin` (RP-1), with pulsar-admin's names and flags:

    clusters create|update NAME --url http://h:8080 --broker-url pulsar://h:6650
                                [--url-secure https://h:8443] [--broker-url-secure pulsar+ssl://h:6651]
                                [--tls-enable] [--tls-allow-insecure] [--tls-enable-hostname-verification]
                                [--tls-trust-certs-filepath ca.pem] [--tls-cert-filepath c.pem]
                                [--tls-key-filepath k.pem] [--auth-plugin token] [--auth-parameters ...]
    clusters delete NAME
    namespaces set-clusters TENANT/NS --clusters a,b      namespaces get-clusters TENANT/NS
    topics set-replication-clusters TOPIC --clusters a,b  topics get-replication-clusters TOPIC [--applied]
    topics remove-replication-clusters TOPIC
"""

from __future__ import annotations

import argparse
from typing import Any

from velamq.cli._admin_policies import Group, namespace_path, topic_path, verb
from velamq.client import AdminClient

# flag -> ClusterData field (pulsar-admin's CmdClusters)
_CLUSTER_TEXT_FLAGS = {
    "url": "serviceUrl",
    "url_secure": "serviceUrlTls",
    "broker_url": "brokerServiceUrl",
    "broker_url_secure": "brokerServiceUrlTls",
    "tls_trust_certs_filepath": "brokerClientTrustCertsFilePath",
    "tls_cert_filepath": "brokerClientCertificateFilePath",
    "tls_key_filepath": "brokerClientKeyFilePath",
    "auth_plugin": "authenticationPlugin",
    "auth_parameters": "authenticationParameters",
}
_CLUSTER_FLAG_FLAGS = {
    "tls_enable": "brokerClientTlsEnabled",
    "tls_allow_insecure": "tlsAllowInsecureConnection",
    "tls_enable_hostname_verification": "tlsHostnameVerificationEnable",
}


def _dest(flag: str) -> str:
    # Not the flag's own name: `velamq admin --auth-plugin` is the admin client's credentials.
    return "cluster_" + flag


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("cluster")
    for flag in _CLUSTER_TEXT_FLAGS:
        p.add_argument("--" + flag.replace("_", "-"), dest=_dest(flag))
    for flag in _CLUSTER_FLAG_FLAGS:
        p.add_argument("--" + flag.replace("_", "-"), dest=_dest(flag), action="store_true", default=None)


def cluster_body(a: argparse.Namespace) -> dict[str, Any]:
    """ClusterData from the flags given (flags left out are left out of the body)."""
    body: dict[str, Any] = {}
    for flag, key in _CLUSTER_TEXT_FLAGS.items():
        if getattr(a, _dest(flag), None) is not None:
            body[key] = getattr(a, _dest(flag))
    for flag, key in _CLUSTER_FLAG_FLAGS.items():
        if getattr(a, _dest(flag), None):
            body[key] = True
    return body


def _update_cluster(c: AdminClient, a: argparse.Namespace) -> Any:
    """As pulsar-admin update: fields not given keep their current value."""
    current = c.request("GET", AdminClient.path("clusters", a.cluster)) or {}
    return c.request("POST", AdminClient.path("clusters", a.cluster), {**current, **cluster_body(a)})


def add_cluster_verbs(group: Group) -> None:
    verb(group, "create", "register a cluster (a remote one: the replicator connects to --broker-url)",
         lambda c, a: c.request("PUT", AdminClient.path("clusters", a.cluster), cluster_body(a)), _cluster_args)
    verb(group, "update", "change a cluster's URLs or credentials (those not given are kept)", _update_cluster,
         _cluster_args)
    verb(group, "delete", "forget a cluster (no tenant may still allow it)",
         lambda c, a: c.request("DELETE", AdminClient.path("clusters", a.cluster)),
         lambda p: p.add_argument("cluster"))


def _clusters_list(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def add_namespace_replication_verbs(group: Group) -> None:
    def set_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("namespace")
        p.add_argument("--clusters", "-c", required=True, help="comma-separated cluster names")

    verb(group, "set-clusters", "set the clusters a namespace replicates to",
         lambda c, a: c.request("POST", namespace_path(a.namespace, "replication"), _clusters_list(a.clusters)),
         set_args)
    verb(group, "get-clusters", "the clusters a namespace replicates to",
         lambda c, a: c.request("GET", namespace_path(a.namespace, "replication")),
         lambda p: p.add_argument("namespace"))


def add_topic_replication_verbs(group: Group) -> None:
    def set_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--clusters", "-c", required=True, help="comma-separated cluster names")

    def get_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--applied", action="store_true", help="the list in force (the namespace's if unset)")

    def get(c: AdminClient, a: argparse.Namespace) -> Any:
        path = topic_path(a.topic, "replication") + ("?applied=true" if a.applied else "")
        return c.request("GET", path)

    verb(group, "set-replication-clusters", "set the clusters a topic replicates to",
         lambda c, a: c.request("POST", topic_path(a.topic, "replication"), _clusters_list(a.clusters)), set_args)
    verb(group, "get-replication-clusters", "the clusters a topic replicates to", get, get_args)
    verb(group, "remove-replication-clusters", "drop the topic's own list (the namespace's applies)",
         lambda c, a: c.request("DELETE", topic_path(a.topic, "replication")), lambda p: p.add_argument("topic"))
