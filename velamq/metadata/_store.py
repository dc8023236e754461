"""MetadataStore: tenants, namespaces, policies and topics in SQLite, awaited from the event loop.

Every call validates and normalises its names here on the loop (so bad input fails fast with
InvalidTopicNameError), then runs one operation of `_ops.py` in the store's SQLite thread.

What the broker asks on every lookup and every topic load is cached on the loop side (`_caches.py`):
whether a namespace exists and its policies (per namespace), and per namespace its partitioned
topics and the names that carry topic policies, so that `get_partitions` and `get_topic_policies`
of an ordinary topic cost no trip to the thread, and a million topics cost a few cache entries.
`open_topic` does the whole existence check (and the creation) of a topic load in one operation.
Big listings come a page at a time (`list_topics_page`), so no single operation holds the thread
for long.
"""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

from velamq._errors import PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.metadata import _ops
from velamq.metadata._names import check_namespace as _check_namespace
from velamq.metadata._names import check_tenant as _check_tenant
from velamq.metadata._names import check_topic as _check_topic
from velamq.metadata._ownership_ops import BUNDLES_KEY, bundles_policy, with_bundles
from velamq.metadata._store_cluster import ClusterMetadata
from velamq.metadata._topic_pages import TopicListing, page_rows_max, topics_page

# Names a listing reads per operation: a page, so other operations get their turn in between.
list_page_default: Final = 10_000
# A partitioned topic has at most this many partitions (Pulsar's maxNumPartitionsPerPartitionedTopic
# is unlimited by default, but every partition costs a ledger; this bounds one admin call's cost).
partitions_max: Final = 10_000


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


class TopicOpen(enum.Enum):
    """What MetadataStore.open_topic found or did."""

    EXISTS = _ops.TOPIC_EXISTS
    CREATED = _ops.TOPIC_CREATED
    NO_NAMESPACE = _ops.TOPIC_NO_NAMESPACE  # the topic's namespace does not exist
    IS_PARTITIONED = _ops.TOPIC_IS_PARTITIONED  # a partitioned topic: use its partitions
    NOT_FOUND = _ops.TOPIC_NOT_FOUND  # no such topic, and creating it was not asked for
    OUT_OF_RANGE = _ops.TOPIC_OUT_OF_RANGE  # -partition-N beyond its partitioned topic's partitions


class MetadataStore(ClusterMetadata):
    """The metadata store over one SQLite file (e.g. data_dir/metadata.db); its constructor and
    what every call shares are StoreCore's (_store_core.py), workers, bundles and their owners
    are ClusterMetadata's (_store_cluster.py)."""

    async def start(self) -> None:
        """Open the file, create the schema, and add what is missing of the local cluster,
        public and public/default; start watching other processes' commits if shared."""
        await self._open(_check_tenant(self.cluster_name))

    # ------------------------------------------------------------------------ clusters

    async def list_clusters(self) -> list[str]:
        return await self._read(_ops.list_clusters)

    async def get_cluster(self, name: str) -> dict[str, Any]:
        return await self._read(_ops.get_cluster, name=_check_tenant(name))

    async def create_cluster(self, name: str, data: dict[str, Any] | None = None) -> None:
        await self._announce(_ops.create_cluster, name=_check_tenant(name), data=dict(data or {}))

    async def update_cluster(self, name: str, data: dict[str, Any]) -> None:
        await self._announce(_ops.update_cluster, name=_check_tenant(name), data=dict(data))

    async def delete_cluster(self, name: str) -> None:
        await self._announce(_ops.delete_cluster, name=_check_tenant(name))

    # ------------------------------------------------------------------------ tenants

    async def create_tenant(self, name: str, info: dict[str, Any]) -> None:
        await self._announce(_ops.create_tenant, name=_check_tenant(name), info=_tenant_info(info))

    async def get_tenant(self, name: str) -> dict[str, Any]:
        return await self._read(_ops.get_tenant, name=_check_tenant(name))

    async def update_tenant(self, name: str, info: dict[str, Any]) -> None:
        await self._announce(_ops.update_tenant, name=_check_tenant(name), info=_tenant_info(info))

    async def list_tenants(self) -> list[str]:
        return await self._read(_ops.list_tenants)

    async def delete_tenant(self, name: str) -> None:
        """PreconditionFailedError while the tenant still has namespaces."""
        await self._announce(_ops.delete_tenant, name=_check_tenant(name))

    # ------------------------------------------------------------------------ namespaces

    async def create_namespace(self, ns: str, policies: dict[str, Any] | None = None) -> None:
        """Its `bundles` policy is checked (Pulsar's BundlesData: numBundles or boundaries), or set
        to the default count: a namespace's bundles never change with the configuration."""
        ns, tenant = _check_namespace(ns)
        if policies is not None and not isinstance(policies, dict):
            raise PreconditionFailedError("namespace policies must be a JSON object")
        checked = with_bundles(dict(policies or {}), self.default_bundles_count)
        await self._write(self._caches, ns, _ops.create_namespace, ns=ns, tenant=tenant, policies=checked)

    async def namespace_exists(self, ns: str) -> bool:
        ns, _ = _check_namespace(ns)
        if self.shared and self._namespaces.get(ns) is False:
            # Another process may have made it since this one's cache learnt "no", and a client
            # told of it goes straight on (create then use): a cached "no" is read again.
            self._namespaces.invalidate(ns)
        return await self._cached(self._namespaces, ns, _ops.namespace_exists, ns=ns)

    async def list_namespaces(self, tenant: str) -> list[str]:
        return await self._read(_ops.list_namespaces, tenant=_check_tenant(tenant))

    async def delete_namespace(self, ns: str) -> None:
        """PreconditionFailedError while the namespace still has topics or partitioned topics.
        Topic policies and schemas left in it (of topics never created) and its bundle owners go
        with it."""
        ns, _ = _check_namespace(ns)
        await self._write(self._caches, ns, _ops.delete_namespace, ns=ns)

    async def get_policies(self, ns: str) -> dict[str, Any]:
        """The policies set on the namespace (Pulsar field names); unset ones are absent. A fresh
        dict each time: the caller may change it."""
        ns, _ = _check_namespace(ns)
        stored = await self._cached(self._policies, ns, _ops.get_policies_stored, ns=ns)
        return _ops.loads(stored.text)

    async def namespace_policies(self, ns: str) -> Mapping[str, Any]:
        """The same policies as get_policies, read-only and not copied: one object per namespace
        while its policies stay the same (a reader may compare by identity to know that nothing
        changed). Nothing in it may be changed, nested values included."""
        ns, _ = _check_namespace(ns)
        return (await self._cached(self._policies, ns, _ops.get_policies_stored, ns=ns)).view

    async def set_policy(self, ns: str, key: str, value: Any) -> None:
        """Set one policy (e.g. "deduplicationEnabled"); a value of None removes it. `bundles` is
        checked and cannot be removed."""
        ns, _ = _check_namespace(ns)
        if not isinstance(key, str) or not key:
            raise PreconditionFailedError("policy name must be a non-empty string")
        if key == BUNDLES_KEY:
            if value is None:
                raise PreconditionFailedError("a namespace's bundles cannot be removed")
            value = bundles_policy(value, self.default_bundles_count)
        await self._write((self._policies, self._bundles), ns, _ops.set_policy, ns=ns, key=key, value=value)

    async def update_policy(self, ns: str, key: str, change: Callable[[Any], Any]) -> Any:
        """Store `change(current value or None)` as one policy (None removes it) and return it, in
        one transaction under the write lock: two changes made at once, by this process or by
        another sharing the file, both apply (grants, backlog quota maps, properties). `change` runs
        in the store's thread: a quick pure function of the value, raising to refuse it."""
        ns, _ = _check_namespace(ns)
        if not isinstance(key, str) or not key or key == BUNDLES_KEY:
            raise PreconditionFailedError(f"cannot update policy {key!r} this way")
        return await self._write((self._policies,), ns, _ops.update_policy, ns=ns, key=key, change=change)

    # ------------------------------------------------------------------------ topics

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        tn = _check_topic(topic)
        if tn.partition_index >= 0:
            raise PreconditionFailedError(f"Partitioned topic name must not end in -partition-N: {tn}")
        name = str(tn)
        await self._write(
            (self._partitions,), tn.namespace, _ops.create_partitioned_topic,
            topic=name, ns=tn.namespace, partitions=_check_partitions(partitions),
        )

    async def get_partitions(self, topic: str) -> int:
        """Partitions of a partitioned topic; 0 for anything else (non-partitioned or unknown)."""
        tn = _check_topic(topic)
        name = str(tn)
        known = await self._per_namespace(self._partitions, tn.namespace, _ops.partitioned_of_namespace)
        if known is not None and (name in known or not self.shared):
            return known.get(name, 0)
        # Not cached, or (shared by several processes) not known here: another process may have
        # made it partitioned since this one's cache was filled, and a client told of it (create,
        # then produce through the service URL) must not be told 0.
        return await self._read(_ops.get_partitions, topic=name)

    async def update_partitions(self, topic: str, partitions: int) -> None:
        """Grow a partitioned topic. Fewer partitions: PreconditionFailedError; the same: no-op."""
        tn = _check_topic(topic)
        await self._write(
            (self._partitions,), tn.namespace, _ops.update_partitions,
            topic=str(tn), partitions=_check_partitions(partitions),
        )

    async def delete_partitioned_topic(self, topic: str) -> None:
        """Delete a partitioned topic and the rows of whichever of its partitions exist (and its
        policies and schemas, as delete_topic)."""
        tn = _check_topic(topic)
        await self._write(
            (self._partitions, self._topic_policies), tn.namespace, _ops.delete_partitioned_topic, topic=str(tn)
        )

    async def list_partitioned_topics(self, ns: str) -> list[str]:
        ns, _ = _check_namespace(ns)
        return await self._read(_ops.list_partitioned_topics, ns=ns)

    async def create_topic(self, topic: str, exist_ok: bool = False) -> None:
        """A non-partitioned topic, or a partition ("x-partition-3") when it is first used."""
        tn = _check_topic(topic)
        await self._run(_ops.create_topic, topic=str(tn), ns=tn.namespace, exist_ok=exist_ok)

    async def topic_exists(self, topic: str) -> bool:
        return await self._read(_ops.topic_exists, topic=str(_check_topic(topic)))

    async def open_topic(self, topic: str, create: bool) -> TopicOpen:
        """Everything the broker checks before loading a topic, in one operation: the topic's row
        exists (EXISTS), or was made now (CREATED: a partition of an existing partitioned topic,
        or, with `create`, a new topic), or why not."""
        tn = _check_topic(topic)
        parent = tn.partitioned_parent
        found = await self._run(
            _ops.open_topic, topic=str(tn), ns=tn.namespace, parent=str(parent), create=create,
        )
        return TopicOpen(found)

    async def delete_topic(self, topic: str) -> None:
        """Delete a topic's row, and its topic policies and schemas unless another topic still
        carries them (a partition's are its partitioned topic's; schemas are shared by the two
        domains): deleting a topic leaves no rows (BR-8)."""
        tn = _check_topic(topic)
        await self._write(
            (self._topic_policies,), tn.namespace, _ops.delete_topic,
            topic=str(tn), policy_key=str(tn.partitioned_parent),
        )

    async def list_topics(self, ns: str) -> list[str]:
        """Non-partitioned topics and the partitions that exist, both domains, sorted. One
        operation: at a million topics, prefer list_topics_page."""
        ns, _ = _check_namespace(ns)
        return await self._read(_ops.list_topics, ns=ns)

    async def topics_page(self, ns: str, search: str = "", offset: int = 0, limit: int = 50) -> TopicListing:
        """One page of the namespace's topics and partitioned topics, sorted, cut in SQLite (see
        _topic_pages.py); `search` keeps those whose local name contains it (any case)."""
        ns, _ = _check_namespace(ns)
        if offset < 0 or not 0 < limit <= page_rows_max:
            raise PreconditionFailedError(f"offset must be >= 0 and limit between 1 and {page_rows_max}")
        return await self._read(topics_page, ns=ns, search=search, offset=offset, limit=limit)

    async def list_topics_page(
        self, ns: str, after: str = "", limit: int = 1000, domain: str = "persistent"
    ) -> list[str]:
        """A page of the topics of one domain of a namespace (non-partitioned topics and the
        partitions that exist), in name order: the first `limit` full names greater than `after`
        ("" for the first page; pass the last name of a page to get the next). Each page is one
        range scan, as cheap at the millionth topic as at the first."""
        ns, _ = _check_namespace(ns)
        if domain not in ("persistent", "non-persistent"):
            raise PreconditionFailedError(f"unknown domain {domain!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise PreconditionFailedError("limit must be a positive integer")
        return await self._read(_ops.list_topics_page, prefix=f"{domain}://{ns}/", after=after, limit=limit)

    async def count_topics(self, ns: str) -> int:
        """Rows of the namespace's topics (non-partitioned topics and partitions that exist)."""
        ns, _ = _check_namespace(ns)
        return await self._read(_ops.count_topics, ns=ns)

    async def namespace_topic_names(self, ns: str, domains: Collection[str]) -> list[str]:
        """The topics of a namespace as Pulsar lists them, sorted: non-partitioned topics and
        every partition of each partitioned topic of the given domains (Pulsar creates partitions
        eagerly, velamq lazily: they are listed all the same). Read a page at a time."""
        ns, _ = _check_namespace(ns)
        names: list[str] = []
        for domain in sorted(domains):
            after = ""
            while True:
                page = await self.list_topics_page(ns, after, list_page_default, domain)
                names += page
                if len(page) < list_page_default:
                    break
                after = page[-1]
        expanded: list[str] = []
        for parent in await self.list_partitioned_topics(ns):
            parent_name = TopicName.parse(parent)
            if parent_name.domain in domains:
                partitions = await self.get_partitions(parent)
                expanded += (str(parent_name.partition(i)) for i in range(partitions))
        if expanded:
            names = sorted(set(names).union(expanded))
        return names

    # ------------------------------------------------------------------------ topic policies

    async def get_topic_policies(self, topic: str) -> dict[str, Any]:
        """Policies set on a topic (Pulsar's TopicPolicies field names, see _policies.py); {} if none
        or if there is no such topic. A partition answers with its partitioned topic's policies."""
        parent = _check_topic(topic).partitioned_parent
        carriers = await self._per_namespace(self._topic_policies, parent.namespace, _ops.topic_policy_names)
        key = str(parent)
        if carriers is not None and key not in carriers:
            return {}
        return await self._read(_ops.get_topic_policies, policy_key=key)

    async def set_topic_policy(self, topic: str, key: str, value: Any) -> None:
        """Set one topic policy (e.g. "messageTTLInSeconds"); a value of None removes it.

        Set on a partition, it is set on the partitioned topic (as Pulsar does). NotFoundError if
        neither the topic nor its partitioned topic exists. The policies go with the topic.
        """
        tn = _check_topic(topic)
        if not isinstance(key, str) or not key:
            raise PreconditionFailedError("policy name must be a non-empty string")
        parent = tn.partitioned_parent
        await self._write(
            (self._topic_policies,), parent.namespace, _ops.set_topic_policy,
            policy_key=str(parent), ns=parent.namespace, key=key, value=value,
        )

    async def update_topic_policy(self, topic: str, key: str, change: Callable[[Any], Any]) -> Any:
        """As update_policy, for a topic policy (where set_topic_policy would set it)."""
        tn = _check_topic(topic)
        if not isinstance(key, str) or not key:
            raise PreconditionFailedError("policy name must be a non-empty string")
        parent = tn.partitioned_parent
        return await self._write(
            (self._topic_policies,), parent.namespace, _ops.update_topic_policy,
            policy_key=str(parent), ns=parent.namespace, key=key, change=change,
        )

    async def list_topic_policies(self, ns: str) -> list[str]:
        """Names (full topic names) that have topic policies in a namespace, sorted."""
        ns, _ = _check_namespace(ns)
        return await self._read(_ops.list_topic_policies, ns=ns)

    # ------------------------------------------------------------------------ topic deletions

    async def mark_topics_deleting(self, topics: Sequence[str], partitioned: Sequence[str] = ()) -> None:
        """Record, in one transaction, that these topics (and partitioned topics) are being
        deleted: the commit point of a delete. Marking a marked topic again changes nothing."""
        names = [str(_check_topic(t)) for t in topics]
        parents = [str(_check_topic(t)) for t in partitioned]
        # Announced to the other processes of a shared store: a topic another worker serves is
        # deleted by that worker when its watch reports the mark (docs/workers.md).
        now_ms = time.time_ns() // 1_000_000
        mark = functools.partial(_ops.mark_deleting, topics=names, partitioned=parents, now_ms=now_ms)
        await self._run(self._announced(mark))

    async def topics_being_deleted(self) -> list[tuple[str, bool]]:
        """Marked deletes as (full name, is a partitioned topic), topics before partitioned ones."""
        return await self._read(_ops.list_deleting)

    async def finish_topic_deletion(self, topic: str, partitioned: bool = False) -> None:
        """Remove the topic's rows (a partitioned topic's with its partitions'), its policies and
        schemas if nothing else carries them, and its deletion mark: one transaction."""
        tn = _check_topic(topic)
        name = str(tn)
        await self._write(
            (self._partitions, self._topic_policies), tn.namespace, _ops.finish_deletion,
            name=name, partitioned=partitioned, policy_key=str(tn.partitioned_parent),
        )
