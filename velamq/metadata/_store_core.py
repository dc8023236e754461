"""What every MetadataStore call shares: the SQLite thread, the loop-side caches, and (for a file
shared by several processes) the watcher that drops those caches when another process commits.

    StoreCore         constructor, _open/close, _run (a write) / _read, _cached, _per_namespace,
                      _write (a write that invalidates cache entries), on_external_change
    ClusterMetadata   (_store_cluster.py) workers, namespace bundles, bundle owners
    MetadataStore     (_store.py) clusters, tenants, namespaces, policies, topics

A one-process broker passes shared=False (the default) and runs no watcher: its caches are only
ever changed by its own writes. With shared=True every write through `_write` (each one that
changes something a cache holds) also bumps the file's cache version, and every cache is dropped
by the watcher (_watcher.py) within about `watch_interval_s` of another process's such write.
Writes of tenants and clusters, which nothing caches but other workers react to (their
authorization model, replication), announce themselves the same way (`_announce`); writes that
concern no other worker (topic rows, schemas, deletion marks) use `_run`.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Final, TypeVar

from velamq._bundles import NamespaceBundles, bundles_max, default_bundles
from velamq._clock import Clock, system_clock
from velamq.metadata import _ops
from velamq.metadata._caches import NamespaceCache, ReadCache, namespace_rows_max_default
from velamq.metadata._ownership_ops import WorkerInfo
from velamq.metadata._schema import DEFAULT_CLUSTER, connect
from velamq.metadata._schema_registry import SchemaRegistry
from velamq.metadata._watcher import (
    ChangeCallback,
    ChangeWatcher,
    FileVersion,
    bump_cache_version,
    watch_interval_s_default,
)
from velamq.metadata._worker import SqliteWorker, ops_in_flight_max_default

T = TypeVar("T")

# Entries each read cache keeps at most (one per namespace).
cache_entries_max_default: Final = 100_000
# The one key of single-answer caches (the list of workers).
WHOLE: Final = ""


class StoreCore:
    """The shared machinery of MetadataStore (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        ops_in_flight_max: int = ops_in_flight_max_default,
        cache_entries_max: int = cache_entries_max_default,
        clock: Clock = system_clock,
        namespace_rows_max: int = namespace_rows_max_default,
        cluster_name: str = DEFAULT_CLUSTER,
        default_bundles_count: int = default_bundles,
        shared: bool = False,
        watch_interval_s: float = watch_interval_s_default,
    ) -> None:
        """cluster_name: the local cluster (clusterName), made at start if missing.
        default_bundles_count: bundles of a namespace created without any
        (defaultNumberOfNamespaceBundles). shared: other processes write the same file; watch for
        their commits every watch_interval_s seconds."""
        if not 1 <= default_bundles_count <= bundles_max:
            raise ValueError(f"defaultNumberOfNamespaceBundles must be between 1 and {bundles_max}")
        self.path = Path(path)
        self.cluster_name = cluster_name
        self.default_bundles_count = default_bundles_count
        self.shared = shared
        self._worker = SqliteWorker(functools.partial(connect, self.path), ops_in_flight_max=ops_in_flight_max)
        # Topic schemas, in the same file and thread; deleting a topic deletes its history in the
        # same transaction once no topic of its schema id is left.
        self.schemas = SchemaRegistry(self._worker.run, clock, read=self._worker.read)
        self._namespaces: ReadCache[bool] = ReadCache(cache_entries_max)
        # namespace -> its policies as stored (JSON text: every get_policies gets a fresh dict of
        # it; and parsed once, read-only, for namespace_policies)
        self._policies: ReadCache[_ops.StoredPolicies] = ReadCache(cache_entries_max)
        # namespace -> {partitioned topic: partitions}
        self._partitions: NamespaceCache[dict[str, int]] = NamespaceCache(cache_entries_max, namespace_rows_max)
        # namespace -> names that carry topic policies
        self._topic_policies: NamespaceCache[frozenset[str]] = NamespaceCache(
            cache_entries_max, namespace_rows_max
        )
        # namespace -> its bundles (parsed from its policies); namespace -> {bundle: worker}
        self._bundles: ReadCache[NamespaceBundles] = ReadCache(cache_entries_max)
        self._owners: ReadCache[dict[str, int]] = ReadCache(cache_entries_max)
        # WHOLE -> every worker's row
        self._workers: ReadCache[tuple[WorkerInfo, ...]] = ReadCache(1)
        self._file_version = FileVersion()
        self._watcher = ChangeWatcher(self._poll_file_version, self._drop_caches, watch_interval_s)

    async def _open(self, cluster: str) -> None:
        await self._worker.start()
        defaults = functools.partial(_ops.ensure_defaults, cluster=cluster, bundles=self.default_bundles_count)
        await self._worker.run(self._announced(defaults))
        if self.shared:
            await self._watcher.start()

    async def close(self) -> None:
        """Finish the queued operations, then close. Later calls raise MetadataError."""
        await self._watcher.stop()
        await self._worker.close()
        self._drop_caches()

    def on_external_change(self, callback: ChangeCallback) -> None:
        """Await `callback()` after another process committed to the file (a shared store only;
        its caches are dropped first, so the callback reads fresh answers)."""
        self._watcher.add(callback)

    def remove_external_change(self, callback: ChangeCallback) -> None:
        self._watcher.remove(callback)

    @property
    def external_changes_seen(self) -> int:
        """How many times the watcher found that another process changed something cached."""
        return self._watcher.changes_seen

    @property
    def external_commits_seen(self) -> int:
        """How many polls found commits of other processes (of anything, topic rows included)."""
        return self._file_version.commits_seen

    @property
    def _caches(self) -> tuple[ReadCache[Any], ...]:
        """Every cache keyed by namespace."""
        return (self._namespaces, self._policies, self._partitions, self._topic_policies, self._bundles, self._owners)

    def _drop_caches(self) -> None:
        for cache in (*self._caches, self._workers):
            cache.clear()

    async def _poll_file_version(self) -> int:
        return await self._worker.read(self._file_version.read)

    def _announced(self, fn: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]:
        """`fn`, and for a shared store a bump of the file's cache version in the same savepoint:
        the other processes' watchers then drop their caches (_watcher.py)."""
        if not self.shared:
            return fn

        def run(conn: sqlite3.Connection) -> T:
            result = fn(conn)
            bump_cache_version(conn)
            return result

        return run

    async def _run(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run an operation that may write (its batch takes the write lock first)."""
        return await self._worker.run(functools.partial(fn, **kwargs))

    async def _announce(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run a write that no cache here holds but other processes react to (tenants' roles,
        clusters): a shared store announces it (their watchers call their callbacks)."""
        return await self._worker.run(self._announced(functools.partial(fn, **kwargs)))

    async def _read(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run an operation that only reads."""
        return await self._worker.read(functools.partial(fn, **kwargs))

    async def _cached(self, cache: ReadCache[T], key: str, fn: Callable[..., T], /, **kwargs: Any) -> T:
        hit = cache.get(key)
        if hit is not None:
            return hit
        generation = cache.generation
        value = await self._read(fn, **kwargs)
        cache.put_if_current(key, value, generation)
        return value

    async def _per_namespace(self, cache: NamespaceCache[T], ns: str, fn: Callable[..., T | None]) -> T | None:
        """The namespace's whole answer (None: too large to cache, ask per topic)."""
        cached, value = cache.lookup(ns)
        if cached:
            return value
        generation = cache.generation
        value = await self._read(fn, ns=ns, rows_max=cache.rows_max)
        cache.put_if_current(ns, value, generation)
        return value

    async def _write(
        self, caches: Collection[ReadCache[Any]], key: str, fn: Callable[..., T], /, **kwargs: Any
    ) -> T:
        for cache in caches:
            cache.begin_write()
        try:
            return await self._worker.run(self._announced(functools.partial(fn, **kwargs)))
        finally:
            for cache in caches:
                cache.invalidate(key)
