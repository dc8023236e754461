"""The SQLite schema of the metadata store and how a connection to it is opened.

Tables (every JSON column holds a JSON object, written with sorted keys):

    meta               key TEXT PK, value TEXT             schema_version
    clusters           name TEXT PK, data JSON             Pulsar ClusterData as given by PUT
    tenants            name TEXT PK, info JSON             Pulsar TenantInfo {adminRoles, allowedClusters}
    namespaces         name TEXT PK, tenant TEXT, policies JSON
                       "tenant/ns" (or "tenant/cluster/ns" for V1 names); policies keep Pulsar's
                       Policies field names (deduplicationEnabled, schema_compatibility_strategy, ...)
    partitioned_topics name TEXT PK, namespace TEXT, partitions INTEGER
                       full names "persistent://t/ns/x" of partitioned topics
    topics             name TEXT PK, namespace TEXT, created_ms INTEGER
                       non-partitioned topics and the partitions ("x-partition-3") that exist
    topic_policies     name TEXT PK, namespace TEXT, policies JSON              (schema version 2)
                       policies set on a topic, Pulsar's TopicPolicies field names (see
                       _policies.py); a partitioned topic's are under its own name, never a
                       partition's; the row goes when the last topic it belongs to does (BR-8)
    topic_deletions    name TEXT PK, partitioned INTEGER, started_ms INTEGER    (schema version 4)
                       topics being deleted: written (one transaction for a partitioned topic and
                       its partitions) before anything of them is removed, removed with their last
                       row; a broker that starts finds the deletes a crash cut short here and
                       finishes them before it serves (velamq/broker/service/_topic_deletion.py)
    workers            id INTEGER PK, broker_url, broker_url_tls, web_url, web_url_tls TEXT,
                       pid INTEGER, started_ms INTEGER                          (schema version 5)
                       the worker processes of a broker and their own URLs (docs/workers.md); each
                       worker replaces its row at start
    bundle_owners      namespace TEXT, bundle TEXT, worker INTEGER, PK (namespace, bundle)
                       (schema version 5) explicit owners of namespace bundles ("0x..._0x...")
                       written when a bundle moves; a bundle without a row has its default owner
                       (velamq._bundles.default_owner)

Every namespace's policies carry its `bundles` (Pulsar's BundlesData), written at creation from
the default count; a start writes them into namespaces made before they were (_ops.ensure_defaults),
so a namespace's bundles never change with the configured default.

Referential rules (a tenant with namespaces, a namespace with topics cannot be deleted) are checked
by the operations in `_ops.py`, which give Pulsar's error for each case; the foreign keys below are a
second line of defence.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from velamq._errors import MetadataError

# 2 added topic_policies, 3 schemas, 4 topic_deletions, 5 workers and bundle_owners. Opening an
# older file adds the tables and records the new version, so an older velamq (which would ignore
# them) refuses the file afterwards.
SCHEMA_VERSION = 5

# SQLite waits this long for a lock held by another process (another worker of the broker, a backup
# tool) before failing. Workers hold the write lock for one batch (milliseconds); a process that
# dies holding it loses it with its file descriptors, so a long wait only ever means a stuck writer.
busy_timeout_ms = 60_000

DEFAULT_CLUSTER = "standalone"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "public/default"

_DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS clusters (
    name TEXT PRIMARY KEY,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY,
    info TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS namespaces (
    name     TEXT PRIMARY KEY,
    tenant   TEXT NOT NULL REFERENCES tenants(name),
    policies TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS namespaces_by_tenant ON namespaces(tenant);
CREATE TABLE IF NOT EXISTS partitioned_topics (
    name       TEXT PRIMARY KEY,
    namespace  TEXT NOT NULL REFERENCES namespaces(name),
    partitions INTEGER NOT NULL CHECK (partitions > 0)
);
CREATE INDEX IF NOT EXISTS partitioned_topics_by_namespace ON partitioned_topics(namespace);
CREATE TABLE IF NOT EXISTS topics (
    name       TEXT PRIMARY KEY,
    namespace  TEXT NOT NULL REFERENCES namespaces(name),
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS topics_by_namespace ON topics(namespace);
CREATE TABLE IF NOT EXISTS topic_policies (
    name      TEXT PRIMARY KEY,
    namespace TEXT NOT NULL REFERENCES namespaces(name),
    policies  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS topic_policies_by_namespace ON topic_policies(namespace);
CREATE TABLE IF NOT EXISTS schemas (
    schema_id    TEXT NOT NULL,
    version      INTEGER NOT NULL CHECK (version >= 0),
    namespace    TEXT NOT NULL,
    type         TEXT NOT NULL,
    data         BLOB NOT NULL,
    properties   TEXT NOT NULL,
    hash         BLOB NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    deleted      INTEGER NOT NULL CHECK (deleted IN (0, 1)),
    PRIMARY KEY (schema_id, version)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS schemas_by_namespace ON schemas(namespace);
CREATE TABLE IF NOT EXISTS topic_deletions (
    name        TEXT PRIMARY KEY,
    partitioned INTEGER NOT NULL CHECK (partitioned IN (0, 1)),
    started_ms  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    id             INTEGER PRIMARY KEY CHECK (id >= 0),
    broker_url     TEXT NOT NULL,
    broker_url_tls TEXT,
    web_url        TEXT NOT NULL,
    web_url_tls    TEXT,
    pid            INTEGER NOT NULL,
    started_ms     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS bundle_owners (
    namespace TEXT NOT NULL REFERENCES namespaces(name),
    bundle    TEXT NOT NULL,
    worker    INTEGER NOT NULL CHECK (worker >= 0),
    PRIMARY KEY (namespace, bundle)
) WITHOUT ROWID;
"""


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) the store at `path`. Runs in the store's own thread.

    WAL lets readers of the file (backups, a second process) proceed during our writes, and
    synchronous=FULL fsyncs the WAL at each commit: an acknowledged admin change survives power loss.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: we issue BEGIN/COMMIT ourselves so that one transaction can carry a
    # whole batch of operations (group commit, see _worker.py).
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=True)
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise MetadataError(f"could not switch {path} to WAL mode (got {mode!r})")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        _create_schema(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _create_schema(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _DDL.split(";"):
            if statement.strip():
                conn.execute(statement)
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise MetadataError(
                f"metadata schema version {row[0]} is newer than this velamq understands ({SCHEMA_VERSION})"
            )
        elif int(row[0]) < SCHEMA_VERSION:
            # Every change so far only added tables, which the DDL above has just created.
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
