"""The store's operations as plain functions of a SQLite connection, run in the store's thread.

Each function is one logical operation; `_worker.py` wraps it in a SAVEPOINT, so raising after a
partial write undoes that write. Names arrive already validated and normalised by `_store.py`
(full topic names, "tenant/ns" namespaces). Error messages follow the reasons Pulsar's admin API
gives, because the admin layer passes them on to HTTP clients as they are.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from velamq._errors import AlreadyExistsError, NotFoundError, PreconditionFailedError
from velamq._topic_name import DOMAINS, PARTITION_SUFFIX, PartitionRole, TopicName, partition_role
from velamq.metadata import _schema_registry
from velamq.metadata._ownership_ops import BUNDLES_KEY, bundles_policy
from velamq.metadata._schema import DEFAULT_CLUSTER, DEFAULT_NAMESPACE, DEFAULT_TENANT
from velamq.metadata._schema_info import schema_id

Json = dict[str, Any]


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def loads(text: str) -> Json:
    """A stored JSON object (anything else reads as {})."""
    value = json.loads(text)
    return value if isinstance(value, dict) else {}



def _exists(conn: sqlite3.Connection, table: str, name: str) -> bool:
    # `table` is one of our constant table names, never user input.
    return conn.execute(f"SELECT 1 FROM {table} WHERE name = ?", (name,)).fetchone() is not None


def _names(conn: sqlite3.Connection, sql: str, *args: Any) -> list[str]:
    return [str(row[0]) for row in conn.execute(sql, args)]


# ---------------------------------------------------------------------------- defaults


def ensure_defaults(conn: sqlite3.Connection, cluster: str = DEFAULT_CLUSTER, bundles: int = 4) -> None:
    """The local cluster (clusterName, "standalone" by default), tenant "public" and namespace
    "public/default" (WC-2), and the `bundles` policy (`bundles` equal ones) of every namespace
    that lacks it.

    Like Pulsar standalone, this runs at every start and only adds what is missing.
    """
    conn.execute("INSERT OR IGNORE INTO clusters(name, data) VALUES (?, ?)", (cluster, "{}"))
    conn.execute(
        "INSERT OR IGNORE INTO tenants(name, info) VALUES (?, ?)",
        (DEFAULT_TENANT, _dumps({"adminRoles": [], "allowedClusters": [cluster]})),
    )
    conn.execute(
        "INSERT OR IGNORE INTO namespaces(name, tenant, policies) VALUES (?, ?, ?)",
        (DEFAULT_NAMESPACE, DEFAULT_TENANT, "{}"),
    )
    _pin_bundles(conn, bundles)


def _pin_bundles(conn: sqlite3.Connection, count: int) -> None:
    """Namespaces made before bundles were recorded (or by a start that just added them) get the
    default now, so that their bundles no longer follow the configured default: a bundle names the
    storage its topics live in, and must not change under them."""
    rows = conn.execute(
        "SELECT name, policies FROM namespaces WHERE json_extract(policies, '$.bundles') IS NULL"
    ).fetchall()
    for name, text in rows:
        policies = loads(text)
        policies[BUNDLES_KEY] = bundles_policy(None, count)
        conn.execute("UPDATE namespaces SET policies = ? WHERE name = ?", (_dumps(policies), name))


# ---------------------------------------------------------------------------- clusters


def list_clusters(conn: sqlite3.Connection) -> list[str]:
    return _names(conn, "SELECT name FROM clusters ORDER BY name")


def get_cluster(conn: sqlite3.Connection, name: str) -> Json:
    row = conn.execute("SELECT data FROM clusters WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise NotFoundError("Cluster does not exist")
    return loads(row[0])


def create_cluster(conn: sqlite3.Connection, name: str, data: Json) -> None:
    if _exists(conn, "clusters", name):
        raise AlreadyExistsError("Cluster already exists")
    conn.execute("INSERT INTO clusters(name, data) VALUES (?, ?)", (name, _dumps(data)))


def update_cluster(conn: sqlite3.Connection, name: str, data: Json) -> None:
    if not _exists(conn, "clusters", name):
        raise NotFoundError("Cluster does not exist")
    conn.execute("UPDATE clusters SET data = ? WHERE name = ?", (_dumps(data), name))


def delete_cluster(conn: sqlite3.Connection, name: str) -> None:
    if not _exists(conn, "clusters", name):
        raise NotFoundError("Cluster does not exist")
    conn.execute("DELETE FROM clusters WHERE name = ?", (name,))


# ---------------------------------------------------------------------------- tenants


def _check_clusters(conn: sqlite3.Connection, info: Json) -> None:
    known = set(list_clusters(conn))
    missing = [c for c in info.get("allowedClusters", []) if c not in known]
    if missing:
        raise PreconditionFailedError(f"Clusters do not exist: {missing}")


def create_tenant(conn: sqlite3.Connection, name: str, info: Json) -> None:
    if _exists(conn, "tenants", name):
        raise AlreadyExistsError("Tenant already exists")
    _check_clusters(conn, info)
    conn.execute("INSERT INTO tenants(name, info) VALUES (?, ?)", (name, _dumps(info)))


def get_tenant(conn: sqlite3.Connection, name: str) -> Json:
    row = conn.execute("SELECT info FROM tenants WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise NotFoundError("Tenant does not exist")
    return loads(row[0])


def update_tenant(conn: sqlite3.Connection, name: str, info: Json) -> None:
    if not _exists(conn, "tenants", name):
        raise NotFoundError("Tenant does not exist")
    _check_clusters(conn, info)
    conn.execute("UPDATE tenants SET info = ? WHERE name = ?", (_dumps(info), name))


def list_tenants(conn: sqlite3.Connection) -> list[str]:
    return _names(conn, "SELECT name FROM tenants ORDER BY name")


def delete_tenant(conn: sqlite3.Connection, name: str) -> None:
    if not _exists(conn, "tenants", name):
        raise NotFoundError("Tenant does not exist")
    if conn.execute("SELECT 1 FROM namespaces WHERE tenant = ? LIMIT 1", (name,)).fetchone():
        raise PreconditionFailedError("The tenant still has active namespaces")
    conn.execute("DELETE FROM tenants WHERE name = ?", (name,))


# ---------------------------------------------------------------------------- namespaces


def create_namespace(conn: sqlite3.Connection, ns: str, tenant: str, policies: Json) -> None:
    if not _exists(conn, "tenants", tenant):
        raise NotFoundError("Tenant does not exist")
    if _exists(conn, "namespaces", ns):
        raise AlreadyExistsError("Namespace already exists")
    conn.execute("INSERT INTO namespaces(name, tenant, policies) VALUES (?, ?, ?)", (ns, tenant, _dumps(policies)))


def namespace_exists(conn: sqlite3.Connection, ns: str) -> bool:
    return _exists(conn, "namespaces", ns)


def list_namespaces(conn: sqlite3.Connection, tenant: str) -> list[str]:
    if not _exists(conn, "tenants", tenant):
        raise NotFoundError("Tenant does not exist")
    return _names(conn, "SELECT name FROM namespaces WHERE tenant = ? ORDER BY name", tenant)


def delete_namespace(conn: sqlite3.Connection, ns: str) -> None:
    if not _exists(conn, "namespaces", ns):
        raise NotFoundError("Namespace does not exist")
    for table in ("topics", "partitioned_topics"):
        if conn.execute(f"SELECT 1 FROM {table} WHERE namespace = ? LIMIT 1", (ns,)).fetchone():
            raise PreconditionFailedError("Cannot delete non empty namespace")
    # With no topics left, any topic policies and schemas still here are orphans (BR-8): they go too.
    conn.execute("DELETE FROM topic_policies WHERE namespace = ?", (ns,))
    conn.execute("DELETE FROM bundle_owners WHERE namespace = ?", (ns,))
    _schema_registry.delete_namespace(conn, ns)
    conn.execute("DELETE FROM namespaces WHERE name = ?", (ns,))


def get_policies(conn: sqlite3.Connection, ns: str) -> Json:
    row = conn.execute("SELECT policies FROM namespaces WHERE name = ?", (ns,)).fetchone()
    if row is None:
        raise NotFoundError("Namespace does not exist")
    return loads(row[0])


class StoredPolicies:
    """A namespace's policies as stored (the store caches this): the text, for fresh copies, and
    one read-only view of it parsed, for readers that only look (the same object until the
    policies change)."""

    __slots__ = ("text", "view")

    def __init__(self, text: str) -> None:
        self.text = text
        self.view: Mapping[str, Any] = MappingProxyType(loads(text))


def get_policies_stored(conn: sqlite3.Connection, ns: str) -> StoredPolicies:
    row = conn.execute("SELECT policies FROM namespaces WHERE name = ?", (ns,)).fetchone()
    if row is None:
        raise NotFoundError("Namespace does not exist")
    return StoredPolicies(str(row[0]))


def set_policy(conn: sqlite3.Connection, ns: str, key: str, value: Any) -> None:
    update_policy(conn, ns, key, lambda _: value)


def update_policy(conn: sqlite3.Connection, ns: str, key: str, change: Callable[[Any], Any]) -> Any:
    """Store `change(current value or None)` as the policy (None removes it) and return it: one
    read-modify-write under the write lock (_worker.py), so concurrent changes of one policy by
    several processes all apply."""
    policies = get_policies(conn, ns)
    value = change(policies.get(key))  # a fresh object: change may modify it
    if value is None:
        policies.pop(key, None)
    else:
        policies[key] = value
    conn.execute("UPDATE namespaces SET policies = ? WHERE name = ?", (_dumps(policies), ns))
    return value


def _require_namespace(conn: sqlite3.Connection, ns: str) -> None:
    if not _exists(conn, "namespaces", ns):
        raise NotFoundError("Namespace does not exist")


# ---------------------------------------------------------------------------- topics


def create_partitioned_topic(conn: sqlite3.Connection, topic: str, ns: str, partitions: int) -> None:
    _require_namespace(conn, ns)
    if _exists(conn, "partitioned_topics", topic):
        raise AlreadyExistsError("Partitioned topic already exists")
    if _exists(conn, "topics", topic):
        raise AlreadyExistsError("This topic already exists")
    conn.execute(
        "INSERT INTO partitioned_topics(name, namespace, partitions) VALUES (?, ?, ?)", (topic, ns, partitions)
    )


def get_partitions(conn: sqlite3.Connection, topic: str) -> int:
    row = conn.execute("SELECT partitions FROM partitioned_topics WHERE name = ?", (topic,)).fetchone()
    return int(row[0]) if row else 0


def update_partitions(conn: sqlite3.Connection, topic: str, partitions: int) -> None:
    current = get_partitions(conn, topic)
    if current == 0:
        raise NotFoundError("Partitioned topic does not exist")
    if partitions < current:
        raise PreconditionFailedError(
            f"Expect partitions {partitions} can't less than current partitions {current}."
        )
    conn.execute("UPDATE partitioned_topics SET partitions = ? WHERE name = ?", (partitions, topic))


def delete_partitioned_topic(conn: sqlite3.Connection, topic: str) -> None:
    if not _exists(conn, "partitioned_topics", topic):
        raise NotFoundError("Partitioned topic does not exist")
    conn.execute("DELETE FROM partitioned_topics WHERE name = ?", (topic,))
    # Its partitions go with it, whichever of them were ever created; a row left behind would keep
    # the namespace from being deleted and show up in topic lists.
    for name in _partition_rows(conn, topic):
        conn.execute("DELETE FROM topics WHERE name = ?", (name,))
    _drop_orphan_topic_policies(conn, topic)
    _drop_orphan_schemas(conn, topic)


def _partition_rows(conn: sqlite3.Connection, topic: str) -> list[str]:
    """Rows of `topics` named "<topic>-partition-<digits>"."""
    prefix = topic + PARTITION_SUFFIX
    # A range on the primary key ('0' <= first digit < ':'), not LIKE: LIKE ignores ASCII case and
    # "X-partition-0" is not a partition of "x"; the range also uses the index.
    candidates = _names(conn, "SELECT name FROM topics WHERE name >= ? AND name < ?", prefix + "0", prefix + ":")
    return [n for n in candidates if n[len(prefix):].isascii() and n[len(prefix):].isdigit()]


def list_partitioned_topics(conn: sqlite3.Connection, ns: str) -> list[str]:
    _require_namespace(conn, ns)
    return _names(conn, "SELECT name FROM partitioned_topics WHERE namespace = ? ORDER BY name", ns)


# Whether a topic's namespace, a partitioned topic of its name and the topic itself exist, in one
# statement: the checks before a topic is created or loaded (each statement is a cost of its own,
# and topics are created one request at a time).
_TOPIC_CHECKS = (
    "SELECT EXISTS (SELECT 1 FROM namespaces WHERE name = ?), "
    "EXISTS (SELECT 1 FROM partitioned_topics WHERE name = ?), EXISTS (SELECT 1 FROM topics WHERE name = ?)"
)


def _topic_checks(conn: sqlite3.Connection, topic: str, ns: str) -> tuple[bool, bool, bool]:
    """(namespace exists, a partitioned topic of this name exists, the topic exists)."""
    namespace_exists, partitioned, exists = conn.execute(_TOPIC_CHECKS, (ns, topic, topic)).fetchone()
    return bool(namespace_exists), bool(partitioned), bool(exists)


def create_topic(conn: sqlite3.Connection, topic: str, ns: str, exist_ok: bool) -> bool:
    """Returns True if the topic was created, False if it existed already (and exist_ok)."""
    namespace_exists, partitioned, exists = _topic_checks(conn, topic, ns)
    if not namespace_exists:
        raise NotFoundError("Namespace does not exist")
    if partitioned:
        raise AlreadyExistsError("This topic already exists (as a partitioned topic)")
    if exists:
        if exist_ok:
            return False
        raise AlreadyExistsError("This topic already exists")
    conn.execute(
        "INSERT INTO topics(name, namespace, created_ms) VALUES (?, ?, ?)", (topic, ns, time.time_ns() // 1_000_000)
    )
    return True


def topic_exists(conn: sqlite3.Connection, topic: str) -> bool:
    return _exists(conn, "topics", topic)


# What open_topic found or did.
TOPIC_EXISTS = "exists"
TOPIC_CREATED = "created"
TOPIC_NO_NAMESPACE = "no-namespace"
TOPIC_IS_PARTITIONED = "partitioned"
TOPIC_NOT_FOUND = "not-found"
TOPIC_OUT_OF_RANGE = "out-of-range"


def open_topic(conn: sqlite3.Connection, topic: str, ns: str, parent: str, create: bool) -> str:
    """The broker's whole check before it loads a topic, in one operation (one trip to the store's
    thread per topic load instead of four): the row exists; or it is created, as a partition of an
    existing partitioned topic or, if `create`, as a new non-partitioned topic; or why not."""
    namespace_exists, partitioned, exists = _topic_checks(conn, topic, ns)
    if exists:
        return TOPIC_EXISTS
    if not namespace_exists:
        return TOPIC_NO_NAMESPACE
    # The one rule for -partition-N names (velamq._topic_name.partition_role): a partition of a
    # partitioned parent if in range, refused if not; an ordinary topic without such a parent.
    role = partition_role(TopicName.parse(topic), get_partitions(conn, parent) if parent != topic else 0)
    if role is PartitionRole.OUT_OF_RANGE:
        return TOPIC_OUT_OF_RANGE
    if role is PartitionRole.ORDINARY:
        if partitioned:
            return TOPIC_IS_PARTITIONED
        if not create:
            return TOPIC_NOT_FOUND
    conn.execute(
        "INSERT INTO topics(name, namespace, created_ms) VALUES (?, ?, ?)", (topic, ns, time.time_ns() // 1_000_000)
    )
    return TOPIC_CREATED


def delete_topic(conn: sqlite3.Connection, topic: str, policy_key: str) -> None:
    if conn.execute("DELETE FROM topics WHERE name = ?", (topic,)).rowcount == 0:
        raise NotFoundError("Topic not found")
    _drop_orphan_topic_policies(conn, policy_key)
    _drop_orphan_schemas(conn, policy_key)


def list_topics(conn: sqlite3.Connection, ns: str) -> list[str]:
    _require_namespace(conn, ns)
    return _names(conn, "SELECT name FROM topics WHERE namespace = ? ORDER BY name", ns)


def _prefix_end(prefix: str) -> str:
    """The smallest string greater than every string that starts with `prefix`."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def list_topics_page(conn: sqlite3.Connection, prefix: str, after: str, limit: int) -> list[str]:
    """Rows of `topics` whose name starts with `prefix` ("persistent://tenant/ns/": one domain of
    one namespace), in name order, the first `limit` after `after`: a range scan of the primary
    key, so a page costs the same at the millionth topic as at the first."""
    low = max(prefix, after)
    op = ">" if after >= prefix else ">="
    return _names(
        conn, f"SELECT name FROM topics WHERE name {op} ? AND name < ? ORDER BY name LIMIT ?",
        low, _prefix_end(prefix), limit,
    )


def count_topics(conn: sqlite3.Connection, ns: str) -> int:
    return int(conn.execute("SELECT count(*) FROM topics WHERE namespace = ?", (ns,)).fetchone()[0])


def partitioned_of_namespace(conn: sqlite3.Connection, ns: str, rows_max: int) -> dict[str, int] | None:
    """Partitioned topics of a namespace with their partition counts; None if there are more than
    rows_max (the caller then asks per topic)."""
    rows = conn.execute(
        "SELECT name, partitions FROM partitioned_topics WHERE namespace = ? LIMIT ?", (ns, rows_max + 1)
    ).fetchall()
    return None if len(rows) > rows_max else {str(name): int(n) for name, n in rows}


# ---------------------------------------------------------------------------- topic policies
# Keyed by the name policies are kept under (`policy_key`): the topic itself, or for a partition
# its partitioned topic (see _policies.py). The key "belongs to" a live topic while a non-partitioned
# topic, a partitioned topic or a partition row carries that name.


def _policy_owner_exists(conn: sqlite3.Connection, policy_key: str) -> bool:
    return (
        _exists(conn, "topics", policy_key)
        or _exists(conn, "partitioned_topics", policy_key)
        or bool(_partition_rows(conn, policy_key))
    )


def _drop_orphan_topic_policies(conn: sqlite3.Connection, policy_key: str) -> None:
    """After a topic is deleted: its policies go once nothing carries their name any more (BR-8)."""
    if not _policy_owner_exists(conn, policy_key):
        conn.execute("DELETE FROM topic_policies WHERE name = ?", (policy_key,))


def _drop_orphan_schemas(conn: sqlite3.Connection, policy_key: str) -> None:
    """After a topic is deleted: its schema history goes once no topic of its schema id is left.
    The id ("tenant/ns/name") is shared by both domains and by every partition, so the history stays
    while "persistent://tenant/ns/name", "non-persistent://tenant/ns/name" or a partition of either
    is still there (Pulsar would delete it with the first of them, under the others' feet)."""
    sid = schema_id(policy_key)
    if not _schema_owner_exists(conn, sid):
        _schema_registry.hard_delete(conn, sid)


def _schema_owner_exists(conn: sqlite3.Connection, sid: str) -> bool:
    """Does a topic, partitioned topic or partition of either domain carry schema id `sid`?"""
    return any(_policy_owner_exists(conn, f"{domain}://{sid}") for domain in DOMAINS)


def get_topic_policies(conn: sqlite3.Connection, policy_key: str) -> Json:
    row = conn.execute("SELECT policies FROM topic_policies WHERE name = ?", (policy_key,)).fetchone()
    return loads(row[0]) if row else {}


def set_topic_policy(conn: sqlite3.Connection, policy_key: str, ns: str, key: str, value: Any) -> None:
    update_topic_policy(conn, policy_key, ns, key, lambda _: value)


def update_topic_policy(
    conn: sqlite3.Connection, policy_key: str, ns: str, key: str, change: Callable[[Any], Any]
) -> Any:
    """As update_policy, for a topic policy (see set_topic_policy)."""
    _require_namespace(conn, ns)
    if not _policy_owner_exists(conn, policy_key):
        raise NotFoundError("Topic not found")
    policies = get_topic_policies(conn, policy_key)
    value = change(policies.get(key))  # a fresh object: change may modify it
    if value is None:
        policies.pop(key, None)
    else:
        policies[key] = value
    if policies:
        conn.execute(
            "INSERT INTO topic_policies(name, namespace, policies) VALUES (?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET policies = excluded.policies",
            (policy_key, ns, _dumps(policies)),
        )
    else:
        # Nothing left set: no row, so "no policies" has one representation.
        conn.execute("DELETE FROM topic_policies WHERE name = ?", (policy_key,))
    return value


def topic_policy_names(conn: sqlite3.Connection, ns: str, rows_max: int) -> frozenset[str] | None:
    """Names that carry topic policies in a namespace; None if there are more than rows_max."""
    names = _names(conn, "SELECT name FROM topic_policies WHERE namespace = ? LIMIT ?", ns, rows_max + 1)
    return None if len(names) > rows_max else frozenset(names)


def list_topic_policies(conn: sqlite3.Connection, ns: str) -> list[str]:
    """Names that have topic policies in a namespace (for checkers and tests)."""
    return _names(conn, "SELECT name FROM topic_policies WHERE namespace = ? ORDER BY name", ns)


# ---------------------------------------------------------------------------- topic deletions
# A delete is marked first and finished last, so a crash in between leaves a mark that the next
# start finishes (velamq/broker/service/_topic_deletion.py): a topic is never listed with part of its data.


def mark_deleting(conn: sqlite3.Connection, topics: list[str], partitioned: list[str], now_ms: int) -> None:
    rows = [(name, 0, now_ms) for name in topics] + [(name, 1, now_ms) for name in partitioned]
    conn.executemany(
        "INSERT INTO topic_deletions(name, partitioned, started_ms) VALUES (?, ?, ?) "
        "ON CONFLICT(name) DO NOTHING",
        rows,
    )


def list_deleting(conn: sqlite3.Connection) -> list[tuple[str, bool]]:
    rows = conn.execute("SELECT name, partitioned FROM topic_deletions ORDER BY partitioned, name")
    return [(str(name), bool(partitioned)) for name, partitioned in rows]


def finish_deletion(conn: sqlite3.Connection, name: str, partitioned: bool, policy_key: str) -> None:
    """Remove whatever rows of the topic are left, and its mark (whether or not any were)."""
    if partitioned:
        conn.execute("DELETE FROM partitioned_topics WHERE name = ?", (name,))
        for partition in _partition_rows(conn, name):
            conn.execute("DELETE FROM topics WHERE name = ?", (partition,))
    else:
        conn.execute("DELETE FROM topics WHERE name = ?", (name,))
    _drop_orphan_topic_policies(conn, policy_key)
    _drop_orphan_schemas(conn, policy_key)
    conn.execute("DELETE FROM topic_deletions WHERE name = ?", (name,))
