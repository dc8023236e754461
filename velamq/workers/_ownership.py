"""Which worker serves which bundle: the broker's Ownership and the admin's routing, over metadata.

A bundle's owner is the worker an unload moved it to (the `bundle_owners` rows of the shared
metadata), else its default: `default_owner(namespace, index, workers)` (velamq/_bundles.py), so
every worker computes the same answer without asking anyone, and bundles of many namespaces spread
over the workers. A moved bundle stays with its new owner across restarts while that worker exists
(a row naming a worker beyond `--workers` is ignored). Every worker knows every worker's URLs from
its supervisor (they never change while it runs: the sockets are the supervisor's).

Storage follows ownership: the managed ledgers of a topic live in its bundle's storage shard
(`<tenant>/<namespace>/<0x..._0x...>`), which only the owner opens (velamq.storage.ShardedStorage).
Storage routes by name synchronously, so the boundaries of every namespace this worker has seen are
kept here; bundle counts are fixed at a namespace's creation, so they never go stale.
"""

from __future__ import annotations

import logging
import os
import time

from velamq._bundles import BundleRange, NamespaceBundles, default_owner, even_boundaries, parse_bundle
from velamq._topic_name import TopicName
from velamq.broker import BrokerUrls
from velamq.metadata import MetadataStore, WorkerInfo
from velamq.workers._sockets import WorkerAddress

log = logging.getLogger("velamq.workers")


class WorkerOwnership:
    """One worker's view of bundle ownership (implements velamq.broker.Ownership and the admin
    server's WorkerRouting). Lives on the worker's event loop."""

    def __init__(
        self, metadata: MetadataStore, worker_id: int, addresses: tuple[WorkerAddress, ...], default_bundles: int
    ) -> None:
        self._metadata = metadata
        self.worker_id = worker_id
        self._addresses = {a.worker_id: a for a in addresses}
        self._workers = len(addresses)
        self._default_bundles = NamespaceBundles(even_boundaries(default_bundles))
        self._bundles: dict[str, NamespaceBundles] = {}

    async def start(self) -> None:
        """Register this worker (admin listings read the rows) and learn every namespace's
        bundles, so that storage can route the names of topics not looked up yet."""
        me = self.me
        await self._metadata.forget_workers_from(self._workers)
        await self._metadata.register_worker(
            WorkerInfo(
                id=me.worker_id,
                broker_url=me.broker_url or me.broker_url_tls or "",
                broker_url_tls=me.broker_url_tls,
                web_url=me.web_url or me.web_url_tls or "",
                web_url_tls=me.web_url_tls,
                pid=os.getpid(),
                started_ms=int(time.time() * 1000),
            )
        )
        for tenant in await self._metadata.list_tenants():
            for namespace in await self._metadata.list_namespaces(tenant):
                await self.namespace_bundles(namespace)

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def me(self) -> WorkerAddress:
        return self._addresses[self.worker_id]

    def address(self, worker_id: int) -> WorkerAddress:
        return self._addresses[worker_id]

    # ---- bundles ---------------------------------------------------------------------------------

    async def namespace_bundles(self, namespace: str) -> NamespaceBundles:
        bundles = await self._metadata.get_namespace_bundles(namespace)
        self._bundles[namespace] = bundles
        return bundles

    async def bundle_of(self, full_topic: str) -> tuple[str, BundleRange]:
        namespace = TopicName.parse(full_topic).namespace
        bundles = await self.namespace_bundles(namespace)
        return namespace, bundles.bundle_of(full_topic)

    async def owner_id(self, namespace: str, bundle: BundleRange, fresh: bool = False) -> int:
        """The worker that owns a bundle now (`fresh`: moves read again from the metadata)."""
        bundles = await self.namespace_bundles(namespace)
        return await self._owner_at(namespace, bundles, bundles.index_of_range(bundle), fresh)

    async def _owner_at(self, namespace: str, bundles: NamespaceBundles, index: int, fresh: bool) -> int:
        owners = await self._metadata.get_bundle_owners(namespace, fresh)
        if owners:  # some bundle of the namespace moved: is it this one?
            b = bundles.boundaries
            moved = owners.get(BundleRange(b[index], b[index + 1]).name)
            if moved is not None and 0 <= moved < self._workers:
                return moved
        return default_owner(namespace, index, self._workers)

    async def owner_of_topic(self, full_topic: str, fresh: bool = False) -> WorkerAddress:
        """The worker serving a topic: its bundle computed once (every lookup and every topic load
        of a worker of several asks this)."""
        namespace = TopicName.parse(full_topic).namespace
        bundles = await self.namespace_bundles(namespace)
        owner = await self._owner_at(namespace, bundles, bundles.index_of(full_topic), fresh)
        return self._addresses[owner]

    async def owned_bundles(self, namespaces: list[str]) -> dict[str, list[str]]:
        """The bundles of these namespaces this worker owns, by namespace (for its start line)."""
        owned: dict[str, list[str]] = {}
        for namespace in namespaces:
            bundles = await self.namespace_bundles(namespace)
            for bundle in bundles.ranges:
                if await self.owner_id(namespace, bundle) == self.worker_id:
                    owned.setdefault(namespace, []).append(bundle.name)
        return owned

    # ---- velamq.broker.Ownership ------------------------------------------------------------------

    async def owner_of(self, full_topic: str, fresh: bool = False) -> BrokerUrls | None:
        owner = await self.owner_of_topic(full_topic, fresh)
        if owner.worker_id == self.worker_id:
            return None
        return BrokerUrls(owner.broker_url, owner.broker_url_tls)

    async def move_bundle(self, namespace: str, bundle: BundleRange, destination: str | None) -> BrokerUrls:
        target = self._destination(destination)
        if target == self.worker_id:
            raise ValueError(f"{namespace}/{bundle.name} is served by worker {target} already")
        await self._metadata.set_bundle_owner(namespace, bundle.name, target)
        log.info("bundle %s/%s moves from worker %d to worker %d", namespace, bundle.name, self.worker_id, target)
        address = self._addresses[target]
        return BrokerUrls(address.broker_url, address.broker_url_tls)

    def _destination(self, destination: str | None) -> int:
        """The worker a `destinationBroker` names (its admin or binary host:port, or its id), or
        the next worker after this one."""
        if destination is None or destination == "":
            return (self.worker_id + 1) % self._workers
        if destination.isdigit() and int(destination) in self._addresses:
            return int(destination)
        for address in self._addresses.values():
            for url in (address.web_url, address.web_url_tls, address.broker_url, address.broker_url_tls):
                if url is not None and (url == destination or url.split("://", 1)[1] == destination):
                    return address.worker_id
        raise ValueError(f"no worker is {destination!r}: give a worker's host:port (GET /admin/v2/brokers)")

    def shard_of(self, ledger_name: str) -> str:
        """The storage shard of a managed ledger: its topic's bundle's (a topic's compacted store
        and delayed-delivery indexes are named after it: `<topic>#...`)."""
        topic = TopicName.parse(ledger_name.split("#", 1)[0])
        namespace = topic.namespace
        bundles = self._bundles.get(namespace, self._default_bundles)
        return self.bundle_shard(namespace, bundles.bundle_of(str(topic)))

    def bundle_shard(self, namespace: str, bundle: BundleRange) -> str:
        return f"{namespace}/{bundle.name}"

    # ---- the admin server's WorkerRouting --------------------------------------------------------

    def _web_url(self, address: WorkerAddress, tls: bool) -> str | None:
        return (address.web_url_tls or address.web_url) if tls else (address.web_url or address.web_url_tls)

    async def topic_owner_web_url(self, full_topic: str, tls: bool) -> str | None:
        owner = await self.owner_of_topic(full_topic)
        return None if owner.worker_id == self.worker_id else self._web_url(owner, tls)

    async def bundle_owner_web_url(self, namespace: str, bundle: str, tls: bool) -> str | None:
        owner = await self.owner_id(namespace, parse_bundle(bundle))
        return None if owner == self.worker_id else self._web_url(self._addresses[owner], tls)

    async def broker_addresses(self) -> list[str]:
        return [
            url.split("://", 1)[1]
            for a in self._addresses.values()
            if (url := a.web_url or a.web_url_tls) is not None
        ]

    async def topic_lookup(self, full_topic: str) -> dict[str, str]:
        owner = await self.owner_of_topic(full_topic)
        found = {
            "brokerUrl": owner.broker_url or "",
            "brokerUrlTls": owner.broker_url_tls or "",
            "httpUrl": owner.web_url or "",
            "httpUrlTls": owner.web_url_tls or "",
        }
        found["nativeUrl"] = found["brokerUrl"] or found["brokerUrlTls"]
        return found

    async def peer_web_urls(self) -> list[tuple[int, str]]:
        return [
            (a.worker_id, url)
            for a in self._addresses.values()
            if a.worker_id != self.worker_id and (url := a.web_url or a.web_url_tls) is not None
        ]
