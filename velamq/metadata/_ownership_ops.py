"""Worker processes and bundle owners: the rows that say which worker serves what (docs/workers.md).

Plain functions of a SQLite connection, run in the store's thread like those of `_ops.py`:

    workers        one row per worker process of the broker: its id (0..N-1), its own URLs, its
                   pid and when it started; a worker replaces its row each time it starts
    bundle_owners  the explicit owner of a namespace bundle, written when a bundle moves (an
                   unload); a bundle without a row has its default owner (velamq._bundles)

Namespace bundles themselves live in the namespace's policies (`bundles`, Pulsar's BundlesData);
`bundles_policy` checks and normalises that value wherever it is written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from velamq._bundles import BundleError, NamespaceBundles
from velamq._errors import NotFoundError, PreconditionFailedError

# Pulsar's Policies field that holds a namespace's BundlesData.
BUNDLES_KEY = "bundles"


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker process: where clients (binary protocol) and admin calls (HTTP) reach it."""

    id: int
    broker_url: str  # pulsar://host:port, this worker's own port
    broker_url_tls: str | None  # pulsar+ssl://host:port, or None without a TLS port
    web_url: str  # http://host:port, this worker's own admin port
    web_url_tls: str | None
    pid: int
    started_ms: int  # wall clock, ms since the epoch


def bundles_policy(value: Any, default_count: int) -> dict[str, Any]:
    """A namespace's `bundles` as stored: Pulsar's BundlesData with boundaries as 0x%08x strings.

    As Pulsar's createNamespace: {"numBundles": n} gives n equal bundles, "boundaries" are taken
    as given (checked), and no value (or numBundles 0 without boundaries) gives the default count.
    PreconditionFailedError if the value is malformed."""
    if value is None:
        return NamespaceBundles.even(default_count).to_policy()
    if not isinstance(value, Mapping):
        raise PreconditionFailedError("bundles must be a JSON object (BundlesData)")
    if not value.get("boundaries") and value.get("numBundles") in (None, 0):
        return NamespaceBundles.even(default_count).to_policy()
    try:
        return NamespaceBundles.from_policy(value, default_count).to_policy()
    except BundleError as exc:
        raise PreconditionFailedError(f"Invalid bundles: {exc}") from None


def with_bundles(policies: dict[str, Any], default_count: int) -> dict[str, Any]:
    """A new namespace's policies with their `bundles` checked, or set from the default count."""
    return {**policies, BUNDLES_KEY: bundles_policy(policies.get(BUNDLES_KEY), default_count)}


# ---------------------------------------------------------------------------- workers


def register_worker(conn: sqlite3.Connection, info: WorkerInfo) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO workers(id, broker_url, broker_url_tls, web_url, web_url_tls, pid, started_ms) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (info.id, info.broker_url, info.broker_url_tls, info.web_url, info.web_url_tls, info.pid, info.started_ms),
    )


def list_workers(conn: sqlite3.Connection) -> tuple[WorkerInfo, ...]:
    rows = conn.execute(
        "SELECT id, broker_url, broker_url_tls, web_url, web_url_tls, pid, started_ms FROM workers ORDER BY id"
    )
    return tuple(
        WorkerInfo(int(i), str(url), _text(url_tls), str(web), _text(web_tls), int(pid), int(started))
        for i, url, url_tls, web, web_tls, pid, started in rows
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def forget_workers_from(conn: sqlite3.Connection, first: int) -> int:
    """Remove the rows of workers `first` and above (the broker now runs fewer); how many went."""
    return conn.execute("DELETE FROM workers WHERE id >= ?", (first,)).rowcount


# ---------------------------------------------------------------------------- bundle owners


def set_bundle_owner(conn: sqlite3.Connection, ns: str, bundle: str, worker: int) -> None:
    if conn.execute("SELECT 1 FROM namespaces WHERE name = ?", (ns,)).fetchone() is None:
        raise NotFoundError("Namespace does not exist")
    conn.execute(
        "INSERT INTO bundle_owners(namespace, bundle, worker) VALUES (?, ?, ?) "
        "ON CONFLICT(namespace, bundle) DO UPDATE SET worker = excluded.worker",
        (ns, bundle, worker),
    )


def get_bundle_owners(conn: sqlite3.Connection, ns: str) -> dict[str, int]:
    rows = conn.execute("SELECT bundle, worker FROM bundle_owners WHERE namespace = ?", (ns,))
    return {str(bundle): int(worker) for bundle, worker in rows}


def clear_bundle_owners(conn: sqlite3.Connection, ns: str) -> int:
    return conn.execute("DELETE FROM bundle_owners WHERE namespace = ?", (ns,)).rowcount
