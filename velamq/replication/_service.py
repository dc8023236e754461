"""The broker's geo-replication: which topics replicate where, and their replicators (RP-1..RP-10).

A topic replicates to every cluster of its `replication_clusters` (namespace policy, or the topic's
own) except the local one, provided the local cluster is in that list (a namespace that does not
name the local cluster is not this cluster's to replicate). Each remote must be registered with
PUT /admin/v2/clusters/{c}; one AsyncClient per remote cluster carries every replicator toward it.

    start      topics of namespaces that replicate are loaded, so that what was left unreplicated
               before a restart goes out (their cursors are durable)
    load       LoadedTopics tells the service about each topic before anyone can publish to it, so
               a new topic's first message is behind its replicators' cursors
    policies   a change of replication_clusters starts and stops replicators of loaded topics;
               a cluster taken out of the list loses its cursor (its backlog is dropped)
    clusters   a changed or deleted cluster's replicators start again with the new data
    unload     a replicated topic is never idle; one an admin unloads is loaded again at once
    stop       replicators close (cursors persisted with the managed ledger), then the clients

A replicated topic stays loaded (Topic.idle): its replicators must keep reading. New replicator
cursors start at the end of the log (Pulsar's default): enabling replication does not send what the
topic held before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Protocol

from velamq._errors import NotFoundError
from velamq._topic_name import TopicName
from velamq.broker import BrokerService
from velamq.client import AsyncClient
from velamq.metadata import MetadataStore, Policies
from velamq.protocol import pb
from velamq.replication._clusters import ClusterError, RemoteCluster, remote_cluster
from velamq.replication._entries import cursor_name
from velamq.replication._replicator import Replicator, ReplicatorStats
from velamq.replication._subscriptions import MarkerTopic, ReplicatedSubscriptions, snapshot_interval_s

log = logging.getLogger("velamq.replication")

# Reconnecting to a remote that is down: 0.1 s, doubling, at most this long between tries.
reconnect_backoff_max_s = 5.0


class ReplicatedTopic(MarkerTopic, Protocol):
    """What the service uses of a broker topic."""

    name: TopicName
    closed: bool
    policies: Policies
    entry_watchers: tuple[Callable[[], None], ...]


class ReplicationService:
    """Every replicator of this broker, by topic and remote cluster."""

    def __init__(self, broker: BrokerService, metadata: MetadataStore, local_cluster: str) -> None:
        self.broker = broker
        self.metadata = metadata
        self.local = local_cluster
        self._clients: dict[str, AsyncClient] = {}
        self._cluster_seen: dict[str, RemoteCluster] = {}  # what each client was made from
        self._replicators: dict[str, dict[str, Replicator]] = {}  # topic -> remote -> replicator
        self._subscriptions: dict[str, ReplicatedSubscriptions] = {}  # topic -> its controller
        self._closed = False
        self._reloads: set[asyncio.Task[None]] = set()
        self._timer: asyncio.Task[None] | None = None

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self.broker.loaded.observers.append(self)
        self._timer = asyncio.get_running_loop().create_task(self._snapshots(), name="replicated-subscriptions")
        for tenant in await self.metadata.list_tenants():
            for namespace in await self.metadata.list_namespaces(tenant):
                policies = await self.metadata.get_policies(namespace)
                if self._remotes(policies.get("replication_clusters")):
                    await self._load_namespace(namespace)

    async def _snapshots(self) -> None:
        """One timer for every topic's replicated subscriptions (a topic without any returns at once)."""
        while True:
            await asyncio.sleep(snapshot_interval_s)
            for controller in list(self._subscriptions.values()):
                await controller.tick()

    async def _load_namespace(self, namespace: str) -> None:
        for name in await self.broker.topics_of_namespace(namespace, pb.CommandGetTopicsOfNamespace.PERSISTENT):
            try:
                await self.broker.get_topic(TopicName.parse(name), create=False)
            except Exception as exc:  # a partitioned topic's parent, a topic being deleted
                log.debug("replication: %s not loaded: %s", name, exc)

    async def close(self) -> None:
        self._closed = True
        for task in [*self._reloads, *([self._timer] if self._timer else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self in self.broker.loaded.observers:
            self.broker.loaded.observers.remove(self)
        for topic in list(self._replicators):
            await self._stop_topic(topic)
        for controller in list(self._subscriptions.values()):
            await controller.close()
        self._subscriptions.clear()
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    # ---- LoadedTopics' side (TopicObserver) ------------------------------------------------------

    async def topic_loaded(self, topic: ReplicatedTopic) -> None:
        await self._reconcile(topic)

    async def policies_applied(self, topic: ReplicatedTopic) -> None:
        await self._reconcile(topic)

    async def clusters_changed(self, cluster: str) -> None:
        """A cluster's data changed or it was deleted: its replicators start again with what is
        stored now (or stop, if it is gone)."""
        client = self._clients.pop(cluster, None)
        self._cluster_seen.pop(cluster, None)
        for name, by_remote in list(self._replicators.items()):
            replicator = by_remote.pop(cluster, None)
            if replicator is not None:
                await self._close_replicator(name, replicator)
        if client is not None:
            await client.close()
        for topic in list(self.broker.topics.values()):
            await self._reconcile(topic)

    # ---- reconciling one topic -----------------------------------------------------------------

    def _remotes(self, clusters: object) -> list[str]:
        if not isinstance(clusters, list) or self.local not in clusters:
            return []
        return [c for c in clusters if isinstance(c, str) and c != self.local]

    def wanted(self, topic: ReplicatedTopic) -> list[str]:
        """The remote clusters a topic replicates to now."""
        if self._closed or topic.closed or topic.name.domain != "persistent":
            return []
        return self._remotes(list(topic.policies.replication_clusters))

    async def _reconcile(self, topic: ReplicatedTopic) -> None:
        name = topic.full_name
        if name not in self._replicators and name not in self._subscriptions and not self.wanted(topic):
            return  # nothing runs for it and nothing should (most topics): no work to reconcile
        try:
            await self._reconcile_now(topic)
        except Exception:  # never into the topic's load or policy change
            log.exception("replication of %s could not be set up", topic.full_name)

    async def _reconcile_now(self, topic: ReplicatedTopic) -> None:
        wanted = self.wanted(topic)
        running = self._replicators.get(topic.full_name, {})
        for remote, stale in list(running.items()):
            if stale.ledger is not topic.ledger:  # left from before the topic was unloaded
                del running[remote]
                await stale.close()
        for remote in [r for r in running if r not in wanted]:
            replicator = running.pop(remote)
            await self._close_replicator(topic.full_name, replicator)
            await topic.ledger.delete_cursor(cursor_name(remote))  # Pulsar drops a removed cluster's backlog
        controller = await self._controller(topic, bool(wanted))
        for remote in wanted:
            if remote in running or controller is None:
                continue
            client = await self._client(remote)
            if client is None:
                continue
            cursor = await topic.ledger.open_cursor(cursor_name(remote), "latest")
            if remote in self._replicators.get(topic.full_name, {}) or topic.closed:
                continue  # another reconcile of this topic got there while this one waited
            replicator = Replicator(topic.full_name, topic.ledger, cursor, self.local, remote, client, self._stopped,
                                    controller.on_marker)
            self._replicators.setdefault(topic.full_name, {})[remote] = replicator
            topic.entry_watchers = (*topic.entry_watchers, replicator.wake)
            replicator.start()
        if not self._replicators.get(topic.full_name):
            self._replicators.pop(topic.full_name, None)

    async def _controller(self, topic: ReplicatedTopic, wanted: bool) -> ReplicatedSubscriptions | None:
        """The topic's ReplicatedSubscriptions while it replicates (made, or closed, as needed)."""
        name = topic.full_name
        controller = self._subscriptions.get(name)
        if controller is not None and (controller.topic is not topic or not wanted):
            del self._subscriptions[name]
            await controller.close()
            controller = None
        if controller is None and wanted:
            controller = ReplicatedSubscriptions(topic, self.local, lambda: self._replicators.get(name, {}))
            self._subscriptions[name] = controller
        return controller

    def _stopped(self, replicator: Replicator) -> None:
        """A replicator's topic closed (unloaded by an admin, or deleted): load the topic again,
        so that its replicators go on (a deleted topic does not load: it is forgotten)."""
        by_remote = self._replicators.get(replicator.topic_name, {})
        if by_remote.get(replicator.remote) is replicator:
            del by_remote[replicator.remote]
        if not by_remote:
            self._replicators.pop(replicator.topic_name, None)
            controller = self._subscriptions.pop(replicator.topic_name, None)
            if controller is not None:
                self._spawn(controller.close())
        if not self._closed:
            self._spawn(self._reload(replicator.topic_name))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def _reload(self, topic: str) -> None:
        try:
            await self.broker.get_topic(TopicName.parse(topic), create=False)
        except Exception as exc:
            log.debug("replication: %s not loaded again: %s", topic, exc)

    async def _close_replicator(self, topic: str, replicator: Replicator) -> None:
        loaded = self.broker.loaded_topic(topic)
        if loaded is not None:
            loaded.entry_watchers = tuple(w for w in loaded.entry_watchers if w != replicator.wake)
        await replicator.close()

    async def _stop_topic(self, topic: str) -> None:
        for replicator in self._replicators.pop(topic, {}).values():
            await self._close_replicator(topic, replicator)
        controller = self._subscriptions.pop(topic, None)
        if controller is not None:
            await controller.close()

    async def _client(self, remote: str) -> AsyncClient | None:
        client = self._clients.get(remote)
        if client is not None:
            return client
        try:
            cluster: RemoteCluster = remote_cluster(remote, await self.metadata.get_cluster(remote))
        except NotFoundError:
            log.warning("replication to %s: no such cluster (register it with PUT /admin/v2/clusters/%s)",
                        remote, remote)
            return None
        except ClusterError as exc:
            log.warning("replication to %s: %s", remote, exc)
            return None
        client = AsyncClient(cluster.service_url, **cluster.security.client_options(),
                             max_backoff_s=reconnect_backoff_max_s)
        self._clients[remote] = client
        self._cluster_seen[remote] = cluster
        return client

    async def metadata_changed_elsewhere(self) -> None:
        """Another worker changed the shared metadata: a cluster this worker replicates to whose
        data changed (or that is gone) is taken up again, as a change made here would be."""
        for remote, seen in list(self._cluster_seen.items()):
            try:
                now: RemoteCluster | None = remote_cluster(remote, await self.metadata.get_cluster(remote))
            except (NotFoundError, ClusterError):
                now = None
            if now != seen:
                self._cluster_seen.pop(remote, None)
                await self.clusters_changed(remote)

    # ---- figures -------------------------------------------------------------------------------

    def topic_stats(self, topic: str) -> Mapping[str, ReplicatorStats]:
        """replication.<remote> of a topic's stats."""
        return {remote: r.stats() for remote, r in self._replicators.get(topic, {}).items()}

    def all_stats(self) -> Iterable[tuple[str, str, ReplicatorStats]]:
        """(topic, remote, figures) of every replicator: the replication metrics."""
        for topic, by_remote in list(self._replicators.items()):
            for remote, replicator in list(by_remote.items()):
                yield topic, remote, replicator.stats()

