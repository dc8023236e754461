"""`velamq admin …`: pulsar-admin's common verbs over the admin REST API (OP-2).

    velamq admin [--admin-url http://localhost:8080] [--json] [AUTH/TLS FLAGS] GROUP VERB [ARGS]

Authentication and TLS (_security_args.py): --auth-plugin/--auth-params as pulsar-admin, --token,
--tls-trust-certs-file-path, --tls-allow-insecure, --tls-enable-hostname-verification, and a
client.conf (--client-conf or $PULSAR_CLIENT_CONF) whose webServiceUrl is the default admin URL.

    clusters    list | get | create | update | delete           (_admin_replication.py)
    tenants     list | get | create | update | delete
    namespaces  list | topics (destinations) | create [--bundles N] | delete | policies | unload | clear-backlog |
                unsubscribe | set-/get-/remove-auto-topic-creation | set-clusters | get-clusters |
                <property verbs> | <permission verbs> | <policy verbs>
    topics      list | list-partitioned-topics | create | delete | create-partitioned-topic |
                update-partitioned-topic | delete-partitioned-topic | create-missed-partitions |
                get-partitioned-topic-metadata | lookup | partitioned-lookup | stats |
                partitioned-stats | internal-stats (stats-internal) | partitioned-stats-internal |
                unload | compact | compaction-status | trim-topic | terminate | partitioned-terminate |
                last-message-id | subscriptions |
                create-subscription | unsubscribe | skip | skip-all | clear-backlog | expire-messages |
                expire-messages-all-subscriptions | reset-cursor | offload | offload-status |
                <message verbs> |
                <property verbs> | <permission verbs> | <policy verbs>
    schemas     get | upload | delete | extract | compatibility      (_admin_schemas.py)
    storage     check [--data-dir D] [--delete] [--config BROKER_CONF]

Policy verbs (set-X, get-X, remove-X) are in _admin_policies.py, the verbs that read messages
(peek-messages, get-message-by-id, examine-messages, get-message-id) in _admin_messages.py,
the tiered storage verbs (offload, offload-status) in _admin_offload.py, property verbs in
_admin_properties.py, the grants (permissions, grant-permission, ...) in
_admin_permissions.py, the schema verbs and settings in _admin_schemas.py;
docs/admin.md has the table against pulsar-admin's verbs.
Times take pulsar-admin's units (s, m, h, d, w, y; a bare number is seconds), sizes K, M, G, T.
Output is a table (a list one item a line, an object as KEY VALUE rows); --json prints the
server's JSON. A server error prints its reason and exits 1; bad arguments exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from velamq._errors import InvalidTopicNameError
from velamq._topic_name import TopicName
from velamq.cli import _admin_policies, _admin_schemas
from velamq.cli._admin_auto_creation import add_auto_topic_creation_verbs
from velamq.cli._admin_messages import add_message_verbs
from velamq.cli._admin_offload import add_namespace_offload_verbs, add_offload_verbs
from velamq.cli._admin_output import parse_time_s, render, render_json
from velamq.cli._admin_permissions import add_namespace_permission_verbs, add_topic_permission_verbs
from velamq.cli._admin_policies import namespace_path, topic_path, verb
from velamq.cli._admin_properties import add_namespace_property_verbs, add_topic_property_verbs
from velamq.cli._admin_replication import (
    add_cluster_verbs,
    add_namespace_replication_verbs,
    add_topic_replication_verbs,
)
from velamq.cli._security_args import add_security_arguments, read_client_conf, security_from_args
from velamq.client import AdminClient, AdminError, CredentialsError

admin_url_default = "http://localhost:8080"


def _parse_message_id(text: str) -> dict[str, int] | None:
    """"latest" -> None (the server's default), "earliest" -> (-1, -1), "ledger:entry[:...]"."""
    if text == "latest":
        return None
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
    parts = text.split(":")
    try:
        return {"ledgerId": int(parts[0]), "entryId": int(parts[1]), "partitionIndex": -1}
    except (IndexError, ValueError):
        raise ValueError(f"bad message id {text!r}: use latest, earliest or ledgerId:entryId") from None


# ---------------------------------------------------------------------------- clusters, tenants


def _clusters(groups: Any) -> None:
    group = groups.add_parser("clusters", help="this cluster and the remote ones it replicates to").add_subparsers(
        dest="verb", required=True, metavar="VERB"
    )
    verb(group, "list", "list clusters", lambda c, a: c.request("GET", "/admin/v2/clusters"))
    verb(group, "get", "show a cluster", lambda c, a: c.request("GET", AdminClient.path("clusters", a.cluster)),
         lambda p: p.add_argument("cluster"))
    add_cluster_verbs(group)


def _split(text: str | None) -> list[str]:
    return [x for x in (text or "").split(",") if x]


def _tenant_body(a: argparse.Namespace) -> dict[str, Any]:
    return {"adminRoles": _split(a.admin_roles), "allowedClusters": _split(a.allowed_clusters)}


def _update_tenant(c: AdminClient, a: argparse.Namespace) -> Any:
    """As pulsar-admin: roles or clusters left out keep their current value."""
    current = c.request("GET", AdminClient.path("tenants", a.tenant)) or {}
    body = {
        "adminRoles": current.get("adminRoles", []) if a.admin_roles is None else _split(a.admin_roles),
        "allowedClusters": current.get("allowedClusters", []) if a.allowed_clusters is None
        else _split(a.allowed_clusters),
    }
    return c.request("POST", AdminClient.path("tenants", a.tenant), body)


def _tenants(groups: Any) -> None:
    group = groups.add_parser("tenants", help="tenants").add_subparsers(dest="verb", required=True, metavar="VERB")

    def tenant_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("tenant")
        p.add_argument("--admin-roles", "-r", help="comma-separated roles")
        p.add_argument("--allowed-clusters", "-c", help="comma-separated clusters (default: all)")

    verb(group, "list", "list tenants", lambda c, a: c.request("GET", "/admin/v2/tenants"))
    verb(group, "get", "show a tenant", lambda c, a: c.request("GET", AdminClient.path("tenants", a.tenant)),
         lambda p: p.add_argument("tenant"))
    verb(group, "create", "create a tenant",
         lambda c, a: c.request("PUT", AdminClient.path("tenants", a.tenant), _tenant_body(a)), tenant_args)
    verb(group, "update", "change a tenant's roles or clusters (those not given are kept)", _update_tenant,
         tenant_args)
    verb(group, "delete", "delete a tenant (it must have no namespaces)",
         lambda c, a: c.request("DELETE", AdminClient.path("tenants", a.tenant)), lambda p: p.add_argument("tenant"))


# ---------------------------------------------------------------------------- namespaces


def _namespaces(groups: Any) -> None:
    group = groups.add_parser("namespaces", help="namespaces and their policies").add_subparsers(
        dest="verb", required=True, metavar="VERB"
    )
    ns_arg = lambda p: p.add_argument("namespace", help="tenant/namespace")  # noqa: E731
    verb(group, "list", "list the namespaces of a tenant",
         lambda c, a: c.request("GET", AdminClient.path("namespaces", a.tenant)), lambda p: p.add_argument("tenant"))
    verb(group, "topics", "list the topics of a namespace (partitions included)",
         lambda c, a: c.request("GET", namespace_path(a.namespace, "topics")), ns_arg, aliases=["destinations"])

    def create_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("namespace", help="tenant/namespace")
        p.add_argument("--bundles", "-b", type=int, help="number of bundles (default: the broker's)")

    def create(c: AdminClient, a: argparse.Namespace) -> Any:
        body = {} if a.bundles is None else {"bundles": {"numBundles": a.bundles}}
        return c.request("PUT", namespace_path(a.namespace), body)

    verb(group, "create", "create a namespace", create, create_args)
    verb(group, "delete", "delete a namespace (it must have no topics)",
         lambda c, a: c.request("DELETE", namespace_path(a.namespace)), ns_arg)
    verb(group, "policies", "show every policy of a namespace",
         lambda c, a: c.request("GET", namespace_path(a.namespace)), ns_arg)
    def unload_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("namespace", help="tenant/namespace")
        p.add_argument("--bundle", "-b", help="only this bundle, e.g. 0x00000000_0x40000000")
        p.add_argument("--destinationBroker", "--destination-broker", "-d", dest="destination",
                       help="with --bundle: the broker (host:port of its admin port) to move it to")

    def unload(c: AdminClient, a: argparse.Namespace) -> Any:
        if a.bundle is None:
            if a.destination is not None:
                raise ValueError("--destinationBroker needs --bundle")
            return c.request("PUT", namespace_path(a.namespace, "unload"))
        return c.request("PUT", namespace_path(a.namespace, a.bundle, "unload"),
                         query={"destinationBroker": a.destination})

    verb(group, "unload", "unload every loaded topic of a namespace, or of one bundle (clients reconnect)",
         unload, unload_args)

    def clear_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("namespace", help="tenant/namespace")
        p.add_argument("--sub", "-s", dest="subscription", help="only this subscription")
        p.add_argument("--force", "-force", action="store_true", help="accepted for pulsar-admin; never asks")

    def clear_backlog(c: AdminClient, a: argparse.Namespace) -> Any:
        parts = ("clearBacklog", a.subscription) if a.subscription else ("clearBacklog",)
        return c.request("POST", namespace_path(a.namespace, *parts))

    verb(group, "clear-backlog", "skip the whole backlog of the loaded topics' subscriptions", clear_backlog,
         clear_args)

    def unsubscribe_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("namespace", help="tenant/namespace")
        p.add_argument("--sub", "-s", dest="subscription", required=True, help="subscription name")

    verb(group, "unsubscribe", "delete a subscription from every loaded topic of a namespace",
         lambda c, a: c.request("POST", namespace_path(a.namespace, "unsubscribe", a.subscription)), unsubscribe_args)
    add_namespace_property_verbs(group)
    add_namespace_replication_verbs(group)
    add_namespace_permission_verbs(group)
    add_auto_topic_creation_verbs(group)
    add_namespace_offload_verbs(group)
    _admin_policies.add_policy_verbs(group, topic_level=False)
    _admin_schemas.add_namespace_schema_verbs(group)


# ---------------------------------------------------------------------------- topics


def _partitions_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic")
    p.add_argument("--partitions", "-p", type=int, required=True, help="number of partitions")


def _sub_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic")
    p.add_argument("--subscription", "-s", required=True, help="subscription name")


def _force_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic")
    p.add_argument("--force", "-f", action="store_true", help="close producers and consumers first")


def _reset_cursor(c: AdminClient, a: argparse.Namespace) -> Any:
    path = topic_path(a.topic, "subscription", a.subscription, "resetcursor")
    if (a.time is None) == (a.message_id is None):
        raise ValueError("give exactly one of --time and --messageId")
    if a.time is not None:
        timestamp_ms = int(time.time() * 1000) - parse_time_s(a.time) * 1000
        return c.request("POST", f"{path}/{max(0, timestamp_ms)}")
    body = _parse_message_id(a.message_id)
    big = 2**63 - 1
    return c.request("POST", path, body or {"ledgerId": big, "entryId": big, "partitionIndex": -1})


def _topics(groups: Any) -> None:
    group = groups.add_parser("topics", help="topics, subscriptions and topic policies").add_subparsers(
        dest="verb", required=True, metavar="VERB"
    )
    topic_arg = lambda p: p.add_argument("topic")  # noqa: E731
    ns_arg = lambda p: p.add_argument("namespace", help="tenant/namespace")  # noqa: E731

    def domains(c: AdminClient, ns: str, suffix: str = "") -> list[str]:
        tenant_ns = namespace_path(ns).removeprefix("/admin/v2/namespaces/")
        names: list[str] = []
        for domain in ("persistent", "non-persistent"):
            names += c.request("GET", f"/admin/v2/{domain}/{tenant_ns}{suffix}") or []
        return sorted(set(names))

    verb(group, "list", "list the topics of a namespace", lambda c, a: domains(c, a.namespace), ns_arg)
    verb(group, "list-partitioned-topics", "list the partitioned topics of a namespace",
         lambda c, a: domains(c, a.namespace, "/partitioned"), ns_arg)
    verb(group, "create", "create a non-partitioned topic", lambda c, a: c.request("PUT", topic_path(a.topic), {}),
         topic_arg)
    verb(group, "delete", "delete a topic",
         lambda c, a: c.request("DELETE", topic_path(a.topic), query={"force": a.force}), _force_arg)
    verb(group, "create-partitioned-topic", "create a partitioned topic",
         lambda c, a: c.request("PUT", topic_path(a.topic, "partitions"), a.partitions), _partitions_arg)
    verb(group, "update-partitioned-topic", "add partitions to a partitioned topic",
         lambda c, a: c.request("POST", topic_path(a.topic, "partitions"), a.partitions), _partitions_arg)
    verb(group, "delete-partitioned-topic", "delete a partitioned topic and its partitions",
         lambda c, a: c.request("DELETE", topic_path(a.topic, "partitions"), query={"force": a.force}), _force_arg)
    verb(group, "create-missed-partitions", "create the partitions of a partitioned topic not created yet",
         lambda c, a: c.request("POST", topic_path(a.topic, "createMissedPartitions")), topic_arg)
    verb(group, "get-partitioned-topic-metadata", "number of partitions (0: not partitioned)",
         lambda c, a: c.request("GET", topic_path(a.topic, "partitions")), topic_arg)
    verb(group, "lookup", "the broker URL serving a topic", _lookup, topic_arg)
    verb(group, "partitioned-lookup", "the broker URL serving each partition", _partitioned_lookup, topic_arg)
    verb(group, "stats", "a topic's stats", lambda c, a: c.request("GET", topic_path(a.topic, "stats")), topic_arg)

    def per_partition(p: argparse.ArgumentParser) -> None:
        p.add_argument("topic")
        p.add_argument("--per-partition", action="store_true", help="include each partition's stats")

    verb(group, "partitioned-stats", "a partitioned topic's stats",
         lambda c, a: c.request("GET", topic_path(a.topic, "partitioned-stats"),
                                query={"perPartition": a.per_partition}),
         per_partition)
    verb(group, "internal-stats", "ledgers and cursors of a topic",
         lambda c, a: c.request("GET", topic_path(a.topic, "internalStats")), topic_arg, aliases=["stats-internal"])
    verb(group, "partitioned-stats-internal", "internal stats of every partition",
         lambda c, a: c.request("GET", topic_path(a.topic, "partitioned-internalStats")), topic_arg)
    verb(group, "unload", "unload a topic (clients reconnect)",
         lambda c, a: c.request("PUT", topic_path(a.topic, "unload")), topic_arg)
    verb(group, "compact", "start compaction", lambda c, a: c.request("PUT", topic_path(a.topic, "compaction")),
         topic_arg)
    verb(group, "compaction-status", "state of the last compaction",
         lambda c, a: c.request("GET", topic_path(a.topic, "compaction")), topic_arg)
    verb(group, "trim-topic", "apply retention now (delete consumed ledgers it no longer keeps)",
         lambda c, a: c.request("POST", topic_path(a.topic, "trim")), topic_arg)
    verb(group, "terminate", "terminate a topic: no more messages; prints the last message id",
         lambda c, a: c.request("POST", topic_path(a.topic, "terminate")), topic_arg)
    verb(group, "partitioned-terminate", "terminate every partition of a partitioned topic",
         lambda c, a: c.request("POST", topic_path(a.topic, "terminate", "partitions")), topic_arg)
    verb(group, "last-message-id", "id of the last message",
         lambda c, a: c.request("GET", topic_path(a.topic, "lastMessageId")), topic_arg)
    verb(group, "subscriptions", "list subscriptions",
         lambda c, a: c.request("GET", topic_path(a.topic, "subscriptions")), topic_arg)

    def create_sub(p: argparse.ArgumentParser) -> None:
        _sub_arg(p)
        p.add_argument("--messageId", "-m", dest="message_id", default="latest",
                       help="latest (default), earliest or ledgerId:entryId")

    def create_subscription(c: AdminClient, a: argparse.Namespace) -> Any:
        body = _parse_message_id(a.message_id)
        path = topic_path(a.topic, "subscription", a.subscription)
        return c.request("PUT", path) if body is None else c.request("PUT", path, body)

    verb(group, "create-subscription", "create a subscription", create_subscription, create_sub)

    def unsubscribe_args(p: argparse.ArgumentParser) -> None:
        _sub_arg(p)
        p.add_argument("--force", "-f", action="store_true", help="disconnect its consumers first")

    verb(group, "unsubscribe", "delete a subscription",
         lambda c, a: c.request("DELETE", topic_path(a.topic, "subscription", a.subscription),
                             query={"force": a.force}), unsubscribe_args)

    def skip_args(p: argparse.ArgumentParser) -> None:
        _sub_arg(p)
        p.add_argument("--count", "-n", type=int, required=True, help="messages to skip")

    verb(group, "skip", "skip messages of a subscription",
         lambda c, a: c.request("POST", topic_path(a.topic, "subscription", a.subscription, "skip", str(a.count))),
         skip_args)
    for name in ("skip-all", "clear-backlog"):  # clear-backlog is pulsar-admin's name
        verb(group, name, "skip the whole backlog of a subscription",
             lambda c, a: c.request("POST", topic_path(a.topic, "subscription", a.subscription, "skip_all")),
             _sub_arg)

    def expire_args(p: argparse.ArgumentParser, sub: bool = True) -> None:
        _sub_arg(p) if sub else p.add_argument("topic")
        p.add_argument("--expireTime", "-t", dest="expire_time", required=True,
                       help="expire messages older than this (e.g. 1h)")

    verb(group, "expire-messages", "expire (acknowledge) old messages of a subscription",
         lambda c, a: c.request("POST", topic_path(a.topic, "subscription", a.subscription, "expireMessages",
                                                str(parse_time_s(a.expire_time)))), expire_args)
    verb(group, "expire-messages-all-subscriptions", "expire old messages of every subscription",
         lambda c, a: c.request("POST", topic_path(a.topic, "all_subscription", "expireMessages",
                                                str(parse_time_s(a.expire_time)))),
         lambda p: expire_args(p, sub=False))

    def reset_args(p: argparse.ArgumentParser) -> None:
        _sub_arg(p)
        p.add_argument("--time", "-t", help="move back to this long ago (e.g. 10m)")
        p.add_argument("--messageId", "-m", dest="message_id", help="ledgerId:entryId, earliest or latest")

    verb(group, "reset-cursor", "move a subscription to a time or a message id", _reset_cursor, reset_args)

    add_message_verbs(group)
    add_offload_verbs(group)
    add_topic_property_verbs(group)
    add_topic_replication_verbs(group)
    add_topic_permission_verbs(group)
    _admin_policies.add_policy_verbs(group, topic_level=True)
    _admin_schemas.add_topic_schema_verbs(group)


def _lookup(c: AdminClient, a: argparse.Namespace) -> Any:
    name = TopicName.parse(a.topic)
    path = "/lookup/v2/topic/" + topic_path(name).removeprefix("/admin/v2/")
    return c.request("GET", path)["brokerUrl"]


def _partitioned_lookup(c: AdminClient, a: argparse.Namespace) -> Any:
    partitions = int(c.request("GET", topic_path(a.topic, "partitions"))["partitions"])
    name = TopicName.parse(a.topic)
    names = [name.partition(i) for i in range(partitions)] if partitions else [name]
    return {str(n): _lookup(c, argparse.Namespace(topic=str(n))) for n in names}


# ---------------------------------------------------------------------------- storage


def _storage(groups: Any) -> None:
    group = groups.add_parser("storage", help="checks of the data directory").add_subparsers(
        dest="verb", required=True, metavar="VERB"
    )
    check = group.add_parser("check", help="report (and with --delete remove) orphaned ledgers and metadata")
    check.add_argument("--data-dir", help="the broker's data directory (default ./data)")
    check.add_argument("--delete", action="store_true", help="remove what is orphaned")
    check.add_argument("--config", help="the broker's config file (where ledgers are offloaded)")
    check.set_defaults(local=_check_storage)


def _check_storage(a: argparse.Namespace) -> int:
    # Imported here: it loads the storage and metadata code, which no other admin verb needs.
    from velamq.cli import _storage_check

    argv = (["--data-dir", a.data_dir] if a.data_dir else []) + (["--delete"] if a.delete else [])
    argv += ["--config", a.config] if a.config else []
    return int(_storage_check.main(argv))


# ---------------------------------------------------------------------------- entry points


def add_admin_parser(commands: Any) -> None:
    """Register `velamq admin` on the top-level subparsers."""
    admin = commands.add_parser(
        "admin", help="administer a broker over its REST API (like pulsar-admin)",
        description="pulsar-admin's common verbs against a velamq (or Pulsar) broker's admin REST API.",
    )
    admin.add_argument("--admin-url", "--admin-service-url", dest="admin_url", default=None,
                       help="admin REST URL, http:// or https:// (default $VELAMQ_ADMIN_URL, the client.conf's "
                            f"webServiceUrl, or {admin_url_default})")
    admin.add_argument("--json", action="store_true", help="print the server's JSON instead of a table")
    add_security_arguments(admin)
    groups = admin.add_subparsers(dest="group", required=True, metavar="GROUP")
    for add in (_clusters, _tenants, _namespaces, _topics, _admin_schemas.add_schemas_group, _storage):
        add(groups)


def _admin_client(args: argparse.Namespace) -> AdminClient:
    """The admin URL and security from the flags, else the client.conf, else the defaults."""
    conf = read_client_conf(args.client_conf)
    url = args.admin_url or os.environ.get("VELAMQ_ADMIN_URL") or conf.web_service_url or admin_url_default
    return AdminClient(url, security=security_from_args(args, conf))


# What to do about a refusal: the broker's reason says what was refused, not how to get through.
_STATUS_HINTS = {
    401: "hint: the broker wants credentials: --token, --auth-plugin/--auth-params, or --client-conf",
    403: "hint: the role of these credentials may not do this; a superuser or one of the tenant's "
         "admin roles may (velamq admin tenants update TENANT --admin-roles ...)",
}


def run_admin(args: argparse.Namespace) -> int:
    if getattr(args, "local", None) is not None:
        return int(args.local(args))
    try:
        client = _admin_client(args)
        result = args.handler(client, args)
    except AdminError as exc:
        print(f"error: {exc.reason} (HTTP {exc.status})" if exc.status else f"error: {exc.reason}", file=sys.stderr)
        if exc.status in _STATUS_HINTS:
            print(_STATUS_HINTS[exc.status], file=sys.stderr)
        return 1
    except CredentialsError as exc:
        print(f"velamq admin: {exc}", file=sys.stderr)
        return 1
    except (ValueError, InvalidTopicNameError) as exc:  # SecurityArgumentError too
        print(f"velamq admin: {exc}", file=sys.stderr)
        return 2
    if result is None and not args.prints_null:
        return 0  # a set or delete that went well: nothing to show, as pulsar-admin
    renderer = getattr(args, "renderer", None)
    if renderer is not None and not args.json:
        print(renderer(result))
    else:
        print(render_json(result) if args.json else render(result))
    return 0
