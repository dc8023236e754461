"""MetadataStore: tenants, namespaces, policies and topics in SQLite, awaited from the event loop.

Every call validates and normalises its names here on the loop (so bad input fails fast with
InvalidTopicNameError), then runs one operation of `_ops.py` in the store's SQLite thread.

The broker asks `get_partitions` and `namespace_exists` on every lookup, so their answers are cached
on the loop side (a dict each, bounded by `cache_entries_max`, oldest entry evicted first). A write
that can change an answer bumps that cache's generation before it is sent and drops the entry when
it completes; a read only fills the cache if no such write started meanwhile, so a read racing a
write never leaves a stale answer behind.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar, cast

from velamq._clock import Clock, system_clock
from velamq._errors import InvalidTopicNameError, PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.metadata import _ops
from velamq.metadata._schema import connect
from velamq.metadata._schema_registry import SchemaRegistry
from velamq.metadata._topic_pages import TopicListing, page_rows_max, topics_page
from velamq.metadata._worker import SqliteWorker, ops_in_flight_max_default

T = TypeVar("T")

# Entries each read cache keeps at most (one short string and an int or bool each).
cache_entries_max_default: Final = 100_000
# A partitioned topic has at most this many partitions (Pulsar's maxNumPartitionsPerPartitionedTopic
# is unlimited by default, but every partition costs a ledger; this bounds one admin call's cost).
partitions_max: Final = 10_000

# Tenant and namespace parts: Pulsar's NamedEntity rule, also used by velamq._topic_name.
_NAME_PART_RE: Final = re.compile(r"^[-=:.\w]+$")


def _check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not _NAME_PART_RE.match(tenant) or len(tenant) > 255:
        raise InvalidTopicNameError(str(tenant), "bad tenant name")
    return tenant


def _check_namespace(ns: str) -> tuple[str, str]:
    """'tenant/ns' (or V1 'tenant/cluster/ns') -> (namespace, tenant)."""
    parts = ns.split("/") if isinstance(ns, str) else []
    if len(parts) not in (2, 3) or len(ns) > 512 or not all(_NAME_PART_RE.match(p) for p in parts):
        raise InvalidTopicNameError(str(ns), "expected tenant/namespace")
    return ns, parts[0]


def _check_topic(topic: str) -> TopicName:
    return TopicName.parse(topic)


def _check_partitions(partitions: int) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise PreconditionFailedError(f"Number of partitions must be an integer, not {partitions!r}")
    if partitions <= 0:
        raise PreconditionFailedError("Number of partitions should be more than 0")
    if partitions > partitions_max:
        raise PreconditionFailedError(f"Number of partitions should be less than or equal to {partitions_max}")
    return partitions


def _string_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list | tuple | set | frozenset) or not all(isinstance(v, str) for v in value):
        raise PreconditionFailedError(f"{what} must be a list of strings")
    return list(dict.fromkeys(value))  # drop duplicates, keep order (Pulsar keeps a Set)


def _tenant_info(info: dict[str, Any]) -> dict[str, Any]:
    """Pulsar's TenantInfo shape; unknown keys are dropped, as Pulsar's JSON mapper ignores them."""
    if not isinstance(info, dict):
        raise PreconditionFailedError("tenant info must be a JSON object")
    return {
        "adminRoles": _string_list(info.get("adminRoles"), "adminRoles"),
        "allowedClusters": _string_list(info.get("allowedClusters"), "allowedClusters"),
    }


class _ReadCache:
    """A bounded dict plus the generation counter described in the module docstring."""

    def __init__(self, entries_max: int) -> None:
        self._entries: dict[str, Any] = {}
        self._entries_max = entries_max
        self.generation = 0

    def get(self, key: str) -> Any:
        return self._entries.get(key)

    def put_if_current(self, key: str, value: Any, generation: int) -> None:
        if generation != self.generation:
            return
        if key not in self._entries and len(self._entries) >= self._entries_max:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = value

    def begin_write(self) -> None:
        self.generation += 1

    def invalidate(self, key: str) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()


class MetadataStore:
    """The metadata store over one SQLite file (e.g. data_dir/metadata.db)."""

    def __init__(
        self,
        path: Path,
        *,
        ops_in_flight_max: int = ops_in_flight_max_default,
        cache_entries_max: int = cache_entries_max_default,
        clock: Clock = system_clock,
    ) -> None:
        self.path = Path(path)
        self._worker = SqliteWorker(
            functools.partial(connect, self.path), ops_in_flight_max=ops_in_flight_max
        )
        # Topic schemas, in the same file and thread; deleting a topic (below) deletes its history
        # in the same transaction once no topic of its schema id is left.
        self.schemas = SchemaRegistry(self._worker.run, clock)
        self._partitions = _ReadCache(cache_entries_max)
        self._namespaces = _ReadCache(cache_entries_max)

    async def start(self) -> None:
        """Open the file, create the schema, and add what is missing of standalone/public/default."""
        await self._worker.start()
        await self._worker.run(_ops.ensure_defaults)

    async def close(self) -> None:
        """Finish the queued operations, then close. Later calls raise MetadataError."""
        await self._worker.close()
        self._partitions.clear()
        self._namespaces.clear()

    async def _run(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        return await self._worker.run(functools.partial(fn, **kwargs))

    async def _cached(self, cache: _ReadCache, key: str, fn: Callable[..., T], /, **kwargs: Any) -> T:
        hit = cache.get(key)
        if hit is not None:
            return cast(T, hit)
        generation = cache.generation
        value = await self._run(fn, **kwargs)
        cache.put_if_current(key, value, generation)
        return value

    async def _write(self, cache: _ReadCache, key: str, fn: Callable[..., T], /, **kwargs: Any) -> T:
        cache.begin_write()
        try:
            return await self._run(fn, **kwargs)
        finally:
            cache.invalidate(key)

    # ------------------------------------------------------------------------ clusters

    async def list_clusters(self) -> list[str]:
        return await self._run(_ops.list_clusters)

    async def get_cluster(self, name: str) -> dict[str, Any]:
        return await self._run(_ops.get_cluster, name=_check_tenant(name))

    async def create_cluster(self, name: str, data: dict[str, Any] | None = None) -> None:
        await self._run(_ops.create_cluster, name=_check_tenant(name), data=dict(data or {}))

    # ------------------------------------------------------------------------ tenants

    async def create_tenant(self, name: str, info: dict[str, Any]) -> None:
        await self._run(_ops.create_tenant, name=_check_tenant(name), info=_tenant_info(info))

    async def get_tenant(self, name: str) -> dict[str, Any]:
        return await self._run(_ops.get_tenant, name=_check_tenant(name))

    async def update_tenant(self, name: str, info: dict[str, Any]) -> None:
        await self._run(_ops.update_tenant, name=_check_tenant(name), info=_tenant_info(info))

    async def list_tenants(self) -> list[str]:
        return await self._run(_ops.list_tenants)

    async def delete_tenant(self, name: str) -> None:
        """PreconditionFailedError while the tenant still has namespaces."""
        await self._run(_ops.delete_tenant, name=_check_tenant(name))

    # ------------------------------------------------------------------------ namespaces

    async def create_namespace(self, ns: str, policies: dict[str, Any] | None = None) -> None:
        ns, tenant = _check_namespace(ns)
        if policies is not None and not isinstance(policies, dict):
            raise PreconditionFailedError("namespace policies must be a JSON object")
        await self._write(
            self._namespaces, ns, _ops.create_namespace, ns=ns, tenant=tenant, policies=dict(policies or {})
        )

    async def namespace_exists(self, ns: str) -> bool:
        ns, _ = _check_namespace(ns)
        return await self._cached(self._namespaces, ns, _ops.namespace_exists, ns=ns)

    async def list_namespaces(self, tenant: str) -> list[str]:
        return await self._run(_ops.list_namespaces, tenant=_check_tenant(tenant))

    async def delete_namespace(self, ns: str) -> None:
        """PreconditionFailedError while the namespace still has topics or partitioned topics.
        Topic policies and schemas left in it (of topics never created) go with it."""
        ns, _ = _check_namespace(ns)
        await self._write(self._namespaces, ns, _ops.delete_namespace, ns=ns)

    async def get_policies(self, ns: str) -> dict[str, Any]:
        """The policies set on the namespace (Pulsar field names); unset ones are absent."""
        ns, _ = _check_namespace(ns)
        return await self._run(_ops.get_policies, ns=ns)

    async def set_policy(self, ns: str, key: str, value: Any) -> None:
        """Set one policy (e.g. "deduplicationEnabled"); a value of None removes it."""
        ns, _ = _check_namespace(ns)
        if not isinstance(key, str) or not key:
            raise PreconditionFailedError("policy name must be a non-empty string")
        await self._run(_ops.set_policy, ns=ns, key=key, value=value)

    # ------------------------------------------------------------------------ topics

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        tn = _check_topic(topic)
        if tn.partition_index >= 0:
            raise PreconditionFailedError(f"Partitioned topic name must not end in -partition-N: {tn}")
        name = str(tn)
        await self._write(
            self._partitions, name, _ops.create_partitioned_topic,
            topic=name, ns=tn.namespace, partitions=_check_partitions(partitions),
        )

    async def get_partitions(self, topic: str) -> int:
        """Partitions of a partitioned topic; 0 for anything else (non-partitioned or unknown)."""
        name = str(_check_topic(topic))
        return await self._cached(self._partitions, name, _ops.get_partitions, topic=name)

    async def update_partitions(self, topic: str, partitions: int) -> None:
        """Grow a partitioned topic. Fewer partitions: PreconditionFailedError; the same: no-op."""
        name = str(_check_topic(topic))
        await self._write(
            self._partitions, name, _ops.update_partitions, topic=name, partitions=_check_partitions(partitions)
        )

    async def delete_partitioned_topic(self, topic: str) -> None:
        """Delete a partitioned topic and the rows of whichever of its partitions exist (and its
        policies and schemas, as delete_topic)."""
        name = str(_check_topic(topic))
        await self._write(self._partitions, name, _ops.delete_partitioned_topic, topic=name)

    async def list_partitioned_topics(self, ns: str) -> list[str]:
        ns, _ = _check_namespace(ns)
        return await self._run(_ops.list_partitioned_topics, ns=ns)

    async def create_topic(self, topic: str, exist_ok: bool = False) -> None:
        """A non-partitioned topic, or a partition ("x-partition-3") when it is first used."""
        tn = _check_topic(topic)
        await self._run(_ops.create_topic, topic=str(tn), ns=tn.namespace, exist_ok=exist_ok)

    async def topic_exists(self, topic: str) -> bool:
        return await self._run(_ops.topic_exists, topic=str(_check_topic(topic)))

    async def delete_topic(self, topic: str) -> None:
        """Delete a topic's row, and its topic policies and schemas unless another topic still
        carries them (a partition's are its partitioned topic's; schemas are shared by the two
        domains): deleting a topic leaves no rows (BR-8)."""
        tn = _check_topic(topic)
        await self._run(_ops.delete_topic, topic=str(tn), policy_key=str(tn.partitioned_parent))

    async def list_topics(self, ns: str) -> list[str]:
        """Non-partitioned topics and the partitions that exist, both domains, sorted."""
        ns, _ = _check_namespace(ns)
        return await self._run(_ops.list_topics, ns=ns)

    async def topics_page(self, ns: str, search: str = "", offset: int = 0, limit: int = 50) -> TopicListing:
        """One page of the namespace's topics and partitioned topics, sorted, cut in SQLite (see
        _topic_pages.py); `search` keeps those whose local name contains it (any case)."""
        ns, _ = _check_namespace(ns)
        if offset < 0 or not 0 < limit <= page_rows_max:
            raise PreconditionFailedError(f"offset must be >= 0 and limit between 1 and {page_rows_max}")
        return await self._run(topics_page, ns=ns, search=search, offset=offset, limit=limit)

    # ------------------------------------------------------------------------ topic policies

    async def get_topic_policies(self, topic: str) -> dict[str, Any]:
        """Policies set on a topic (Pulsar's TopicPolicies field names, see _policies.py); {} if none
        or if there is no such topic. A partition answers with its partitioned topic's policies."""
        key = str(_check_topic(topic).partitioned_parent)
        return await self._run(_ops.get_topic_policies, policy_key=key)

    async def set_topic_policy(self, topic: str, key: str, value: Any) -> None:
        """Set one topic policy (e.g. "messageTTLInSeconds"); a value of None removes it.

        Set on a partition, it is set on the partitioned topic (as Pulsar does). NotFoundError if
        neither the topic nor its partitioned topic exists. The policies go with the topic.
        """
        tn = _check_topic(topic)
        if not isinstance(key, str) or not key:
            raise PreconditionFailedError("policy name must be a non-empty string")
        parent = tn.partitioned_parent
        await self._run(_ops.set_topic_policy, policy_key=str(parent), ns=parent.namespace, key=key, value=value)

    async def list_topic_policies(self, ns: str) -> list[str]:
        """Names (full topic names) that have topic policies in a namespace, sorted."""
        ns, _ = _check_namespace(ns)
        return await self._run(_ops.list_topic_policies, ns=ns)
