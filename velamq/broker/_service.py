"""The broker: loaded topics over storage and metadata, and the Pulsar protocol listener.

Built by the composition root (velamq/server.py), which owns storage and metadata (it starts them
before the broker and closes them after it) and hands the broker's admin facade (BrokerAdmin) to
the admin tier. Everything here runs on one event loop; blocking work lives in the storage
threads and the metadata thread.

Its parts live in their own modules: the ports, their listeners and connection caps
(_listener.py), the table of loaded topics with loading, unloading and deleting (_loaded_topics.py),
the network's share of the memory budget (_net_budget.py), the disk guard that turns the broker
read-only (guards/_disk.py), and crash-safe topic deletes (_topic_deletion.py), whose interrupted
ones `start` finishes before it listens.

Topic lifecycle (docs/architecture.md, _loaded_topics.py): a topic loads on first use, stays
loaded while used, and unloads after `topic_idle_unload_s` without use (_idle_unload.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from velamq import __version__
from velamq._bundles import BundleRange
from velamq._clock import Clock, system_clock
from velamq._log_limit import RateLimitedLog
from velamq._topic_name import TopicName
from velamq.broker._config import BrokerConfig
from velamq.broker._errors import BrokerRequestError
from velamq.broker._ownership import BrokerUrls, Ownership
from velamq.broker.guards._disk import DiskGuard, DiskThresholds, DiskUsage, StorageHealth, statvfs_usage
from velamq.broker.guards._net_budget import NetworkBudget
from velamq.broker.nonpersistent._stats import non_persistent_topic_metrics, with_non_persistent
from velamq.broker.nonpersistent._table import NonPersistentTopics
from velamq.broker.nonpersistent._topic import NonPersistentTopic
from velamq.broker.service._auto_create import TopicCreation
from velamq.broker.service._idle_unload import IdleUnloader
from velamq.broker.service._loaded_topics import LoadedTopics
from velamq.broker.service._offload_policies import TopicOffloadPolicies
from velamq.broker.service._policy_tasks import PolicyTasks
from velamq.broker.service._topic_deletion import finish_interrupted_deletions
from velamq.broker.session._auth import AuthCounters, AuthRefresher
from velamq.broker.session._connection import ServerConnection
from velamq.broker.session._context import OpenConnection
from velamq.broker.session._listener import BrokerPorts, ConnectionLimits, ListenSockets
from velamq.broker.stats._metrics_snapshot import collect
from velamq.broker.stats._rate_history import RateHistory
from velamq.broker.stats._records import BrokerMetrics, NamespaceMetrics, TopicMetrics
from velamq.broker.stats._topic_metrics_cap import TopicLevelMetrics
from velamq.broker.stats._topic_stats import topic_metrics
from velamq.broker.topic._schemas import BrokerSchemas
from velamq.broker.topic._topic import Topic
from velamq.metadata import MetadataStore, Policies
from velamq.metadata._auto_creation import AutoTopicCreation
from velamq.protocol import pb
from velamq.security import AuthenticationService, AuthorizationModel, ReloadingServerContext
from velamq.storage import LedgerStore, OffloadPolicy, PublishBuffer, ShardedStorage

log = logging.getLogger(__name__)


class BrokerService:
    """The Pulsar side of a velamq broker: it accepts client connections on its ports, loads topics
    on first use, resolves their policies and runs the periodic policy checks. Each of those has
    its own owner here (BrokerPorts, LoadedTopics, PolicyTasks, DiskGuard, ...); this class wires
    them together, starts and stops them in order, and is what connections reach through the
    narrow protocols of _context.py and the admin tier through BrokerAdmin."""

    def __init__(
        self,
        config: BrokerConfig,
        storage: LedgerStore,
        metadata: MetadataStore,
        clock: Clock = system_clock,
        *,
        storage_health: StorageHealth | None = None,
        disk_stat: Callable[[Path], DiskUsage] | None = None,
        authentication: AuthenticationService | None = None,
        authorization: AuthorizationModel | None = None,
        ownership: Ownership | None = None,
        listen_sockets: ListenSockets | None = None,
        worker_id: int = 0,
    ) -> None:
        """`worker_id` (0 when alone) is in the producer names it makes: a producer that moved
        with its bundle keeps its name, which no other worker makes. `ownership` says which topics
        this broker serves when it is one worker of several (_ownership.py; None: all of them).
        `authentication` checks CONNECT's credentials (None: everyone is let in, no role);
        `authorization` decides per command (None: authorizationEnabled=false); the composition
        root builds one of each for the broker and the admin API.

        `storage_health` tells whether storage accepts appends (velamq/server.py adapts
        Storage; without it only disk usage decides); `disk_stat` reads the disk usage of a path
        (statvfs by default; tests pass a fake filesystem). The network's share of the memory
        budget is its share of config.memory_bytes (the composition root gives storage the rest)."""
        self.config = config
        self.storage = storage
        self.metadata = metadata
        self.clock = clock
        self.log_limit = RateLimitedLog(log, clock)
        self.authentication = authentication
        self.authorization = authorization
        self.ownership = ownership
        self._listen_sockets = listen_sockets  # a worker's: made by its supervisor
        self.auth_counters = AuthCounters()
        self.ports = BrokerPorts(config, clock, self.log_limit)
        self.network = NetworkBudget.share_of(config.memory_bytes, clock)
        self.disk_guard = _disk_guard(config, clock, storage_health, disk_stat, self.close_producers, self.log_limit)
        self.server_version = f"velamq {__version__}"
        self.listeners: set[str] = set()
        self.loaded = _loaded_topics(config, storage, metadata, clock)
        self.non_persistent = NonPersistentTopics(
            clock, self.loaded._open_row, self.loaded.policies_for, self.loaded.deleting,  # the same rules
            enabled=config.enable_non_persistent_topics, idle_s=config.topic_idle_unload_s,
            rates_interval_s=config.policy_check_interval_s,
        )
        self.schemas = BrokerSchemas(metadata.schemas, self._schema_policies)
        self.policy_tasks = PolicyTasks(clock, config.policy_check_interval_s, lambda: self.topics.values())
        self.topic_level_metrics = TopicLevelMetrics(
            config.expose_topic_level_metrics, config.topic_level_metrics_max_topics
        )
        self.rate_history = RateHistory(clock, lambda: self.topics.values(), config.rate_history_interval_s)
        self._connections: set[OpenConnection] = set()
        self.auth_refresher = AuthRefresher(
            clock, config.security.authentication_refresh_check_s, lambda: self._connections
        )
        self._connections_opened = 0
        self._producer_name_prefix, self._producer_counter = f"{config.cluster_name}-{worker_id}-", itertools.count()
        self._tasks: set[asyncio.Task[Any]] = set()
        offload = config.offload
        if offload is not None:  # each topic's offload policy: its namespace's over the broker's
            default = OffloadPolicy(offload.threshold_bytes, offload.threshold_s, offload.deletion_lag_ms)
            storage.set_offload_policies(TopicOffloadPolicies(metadata, default))

    # ---- what the composition root, the admin facade and the tests read ------------------------

    @property
    def topics(self) -> dict[str, Topic]:
        """The loaded topics by full name (LoadedTopics owns the table)."""
        return self.loaded.topics

    @property
    def deleting(self) -> set[str]:
        """Topics being deleted (_topic_deletion.py): loads of them are refused until it is done."""
        return self.loaded.deleting

    @property
    def default_policies(self) -> Policies:
        return self.loaded.default_policies

    @property
    def idle_unloader(self) -> IdleUnloader:
        return self.loaded.idle_unloader

    @property
    def tls(self) -> ReloadingServerContext | None:
        return self.ports.tls

    @property
    def connection_limits(self) -> ConnectionLimits:
        return self.ports.connection_limits

    @property
    def broker_port(self) -> int | None:
        return self.ports.port

    @property
    def broker_port_tls(self) -> int | None:
        return self.ports.port_tls

    @property
    def service_url(self) -> str:
        """pulsar:// of the plain port; pulsar+ssl:// when there is only the TLS port."""
        return self.ports.service_url

    @property
    def service_url_plain(self) -> str | None:
        return self.ports.service_url_plain

    @property
    def service_url_tls(self) -> str | None:
        return self.ports.service_url_tls

    @property
    def connections_active(self) -> int:
        return len(self._connections)

    @property
    def connections_opened_total(self) -> int:
        return self._connections_opened

    @property
    def publish_buffer(self) -> PublishBuffer:
        return self.storage.publish_buffer

    def metrics_snapshot(self) -> BrokerMetrics:
        """Every loaded topic's figures, taken at once (the console)."""
        topics = tuple(topic_metrics(t) for t in self.topics.values()) + self._non_persistent_metrics()
        return self._metrics(topics, self.clock.monotonic_s())

    def _non_persistent_metrics(self) -> tuple[TopicMetrics, ...]:
        return tuple(non_persistent_topic_metrics(t) for t in self.non_persistent.topics.values())

    async def scrape_metrics(self) -> BrokerMetrics:
        """The /metrics snapshot: per namespace, and per topic unless expose_topic_level_metrics is
        off or more topics are loaded than its cap (_topic_metrics_cap.py); the loaded topics are
        visited a slice at a time (_metrics_snapshot.py)."""
        taken_at_s = self.clock.monotonic_s()
        per_topic = self.topic_level_metrics.per_topic(len(self.topics) + len(self.non_persistent.topics))
        namespaces, topics = await collect(list(self.topics.values()), per_topic)
        if self.non_persistent.topics:  # summed into their namespaces, and listed when per topic
            non_persistent = self._non_persistent_metrics()
            namespaces = with_non_persistent(namespaces, non_persistent)
            if per_topic:
                topics += non_persistent
        return self._metrics(topics, taken_at_s, namespaces)

    def _metrics(
        self, topics: tuple[TopicMetrics, ...], taken_at_s: float, namespaces: tuple[NamespaceMetrics, ...] = ()
    ) -> BrokerMetrics:
        limits: dict[str, float] = {
            **self.network.metrics(),
            **self.disk_guard.metrics(),
            **self.auth_counters.metrics(),
            "velamq_broker_log_lines_suppressed_total": self.log_limit.suppressed_total,
            "velamq_broker_topics_deleting": len(self.deleting),
            **self.ports.metrics(),
        }
        return BrokerMetrics(
            connections_active=len(self._connections),
            connections_opened_total=self._connections_opened,
            topics=topics,
            storage=self.storage.metrics(),
            taken_at_s=taken_at_s,
            policy_checks_total=self.policy_tasks.checks_total,
            limits=limits,
            namespaces=namespaces,
            topics_loaded=len(self.topics),
            topics_unloaded_total=self.idle_unloader.unloaded_total,
        )

    def close_producers(self, reason: str) -> None:
        """The broker turned read-only: every producer is closed (its client fails or keeps its
        pending sends, and is refused until the broker is writable again)."""
        self.loaded.close_producers()

    # ---- topics (LoadedTopics') and discovery ----------------------------------------------------

    async def check_namespace(self, name: TopicName) -> None:
        if not await self.metadata.namespace_exists(name.namespace):
            raise BrokerRequestError(pb.TopicNotFound, f"namespace {name.namespace} does not exist")

    async def partitions_of(self, name: TopicName) -> int:
        """Creates the topic as partitioned first where the auto-creation rule says so (_auto_create.py)."""
        return await self.loaded.auto_create.partitions_of(name)

    async def policies_for(self, name: TopicName) -> Policies:
        return await self.loaded.policies_for(name)

    async def _schema_policies(self, name: TopicName) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """The stored namespace and topic policies the schema settings are read from (read only)."""
        return (await self.metadata.namespace_policies(name.namespace),
                await self.metadata.get_topic_policies(str(name)))

    async def policies_changed(self, namespace: str, topic: str | None) -> None:
        await self.loaded.policies_changed(namespace, topic)
        await self.non_persistent.policies_changed(namespace)

    async def metadata_changed_elsewhere(self) -> None:
        """Another worker changed the shared metadata (the caches were dropped already): every
        loaded topic whose policies are not what they resolve to now gets them, and the deletes it
        left for this worker (topics of its bundles) are done."""
        await self.loaded.policies_changed(None, None, changed_only=True)
        await self.non_persistent.policies_changed(None, changed_only=True)
        await finish_interrupted_deletions(self, owned_only=True)

    def loaded_topic(self, full_name: str) -> Topic | None:
        return self.loaded.topics.get(full_name)

    async def get_topic(self, name: TopicName, create: bool) -> Topic:
        if self.ownership is not None and str(name) not in self.loaded.topics:
            await self._check_owned(name)
        return await self.loaded.get_topic(name, create)

    async def open_topic(self, name: TopicName, create: bool) -> Topic | NonPersistentTopic:
        """A topic of either kind: what clients' commands reach (_context.TopicRegistry)."""
        if self.ownership is not None and self.find_topic(str(name)) is None:
            await self._check_owned(name)  # a loaded topic is owned: a moved bundle's are unloaded
        if name.persistent:
            return await self.loaded.get_topic(name, create)
        return await self.non_persistent.get_topic(name, create)

    async def owner_of(self, name: TopicName) -> BrokerUrls | None:
        """The URLs of the worker that serves the topic; None when it is this broker."""
        return None if self.ownership is None else await self.ownership.owner_of(str(name))

    async def serves(self, topic: str) -> bool:
        """Whether this broker serves the topic: always, unless it is one worker of several."""
        return self.ownership is None or await self.ownership.owner_of(topic) is None

    async def _check_owned(self, name: TopicName) -> None:
        ownership = self.ownership
        full = str(name)
        # Refused only if a fresh read agrees: a client sent here by a move may come before this
        # worker's watch of the shared metadata reports the move.
        if (
            ownership is not None
            and await ownership.owner_of(full) is not None
            and await ownership.owner_of(full, fresh=True) is not None
        ):
            # Retryable: the client looks the topic up again and goes to its owner.
            raise BrokerRequestError(
                pb.ServiceNotReady, f"{name} belongs to a bundle another worker serves: look it up again"
            )

    def find_topic(self, full_name: str) -> Topic | NonPersistentTopic | None:
        return self.loaded.topics.get(full_name) or self.non_persistent.topics.get(full_name)

    async def unload(self, topic: Topic) -> None:
        await self.loaded.unload(topic)

    async def unload_bundle(self, namespace: str, bundle: BundleRange, destination: str | None = None) -> None:
        """Unload every loaded topic of one namespace bundle (pulsar-admin namespaces unload -b).
        One broker alone: the clients reconnect and the topics load again. A worker of several:
        the bundle moves to another worker first (`destination`, or the next one), its topics close
        and its storage shard is released, then the clients are sent to the new owner."""
        bundles = await self.metadata.get_namespace_bundles(namespace)
        bundles.index_of_range(bundle)  # BundleError unless it is one of the namespace's
        new_owner = None
        if self.ownership is not None:
            new_owner = await self.ownership.move_bundle(namespace, bundle, destination)

        def in_bundle(name: TopicName) -> bool:
            return name.namespace == namespace and bundles.bundle_of(str(name)) == bundle

        persistent = [t for t in self.loaded.topics.values() if in_bundle(t.name)]
        await self.loaded.hand_over(persistent, new_owner)
        for full_name, topic in list(self.non_persistent.topics.items()):
            if in_bundle(topic.name):
                await self.non_persistent.unload(full_name)
        if self.ownership is not None and isinstance(self.storage, ShardedStorage):
            await self.storage.close_shard(self.ownership.bundle_shard(namespace, bundle))

    async def delete(self, topic: str) -> None:
        if TopicName.parse(topic).persistent:
            await self.loaded.delete(topic)
        else:
            await self.non_persistent.delete(topic)

    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        """Read from the metadata store a page at a time (nothing of it holds the loop)."""
        if not await self.metadata.namespace_exists(namespace):
            return []
        domains = {
            pb.CommandGetTopicsOfNamespace.PERSISTENT: ("persistent",),
            pb.CommandGetTopicsOfNamespace.NON_PERSISTENT: ("non-persistent",),
        }.get(mode, ("persistent", "non-persistent"))  # type: ignore[call-overload]
        return await self.metadata.namespace_topic_names(namespace, domains)

    def new_producer_name(self) -> str:
        return f"{self._producer_name_prefix}{next(self._producer_counter)}"

    # ---- connections and tasks -----------------------------------------------------------------

    def new_connection(self, release: Callable[[], None]) -> ServerConnection:
        return ServerConnection(self, release)

    def new_tls_connection(self, release: Callable[[], None]) -> ServerConnection:
        return ServerConnection(self, release, tls=True)

    def connection_opened(self, connection: OpenConnection) -> None:
        self._connections.add(connection)
        self._connections_opened += 1

    def connection_closed(self, connection: OpenConnection) -> None:
        self._connections.discard(connection)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- lifecycle (storage and metadata are started before and closed after, by the caller) ----

    async def start(self) -> None:
        """Finish the deletes a crash cut short, read the disk usage (a broker started on a full
        disk starts read-only), then listen."""
        await finish_interrupted_deletions(self, owned_only=self.ownership is not None, orphans=True)
        await self.disk_guard.start()
        self.ports.start(self.new_connection, self.new_tls_connection, self._listen_sockets)
        self.policy_tasks.start()
        if self.authentication is not None:
            self.auth_refresher.start()
        self.rate_history.start()
        self.idle_unloader.start()
        self.non_persistent.start()

    async def close(self) -> None:
        """Stop listening and checking, drop connections, close topics (persists cursors)."""
        self.ports.close()
        await self.disk_guard.close()
        self.network.close()
        await self.policy_tasks.close()
        await self.auth_refresher.close()
        await self.rate_history.close()
        await self.idle_unloader.close()
        await self.non_persistent.close()
        for connection in list(self._connections):
            connection.close()
        await self.loaded.close()
        for task in list(self._tasks):
            task.cancel()


def _loaded_topics(config: BrokerConfig, storage: LedgerStore, metadata: MetadataStore, clock: Clock) -> LoadedTopics:
    """The table of loaded topics, under the broker's default policies and its topic settings."""
    defaults = Policies(
        retention_time_minutes=config.default_retention_time_minutes,
        retention_size_mb=config.default_retention_size_mb,
    )
    rule = AutoTopicCreation(
        config.allow_auto_topic_creation, config.auto_topic_creation_type, config.default_num_partitions
    )
    return LoadedTopics(
        storage, metadata, clock, default_policies=defaults,
        auto_create=TopicCreation(metadata, rule), idle_unload_s=config.topic_idle_unload_s,
    )


def _disk_guard(
    config: BrokerConfig,
    clock: Clock,
    storage_health: StorageHealth | None,
    disk_stat: Callable[[Path], DiskUsage] | None,
    on_read_only: Callable[[str], None],
    log_limit: RateLimitedLog,
) -> DiskGuard:
    """The disk guard of config's thresholds over the data directory's filesystem."""
    thresholds = DiskThresholds(
        config.disk_usage_warn_threshold,
        config.disk_usage_threshold,
        config.disk_usage_lwm_threshold,
        config.disk_check_interval_ms / 1000,
    )
    return DiskGuard(
        config.data_dir, thresholds, clock, storage_health or _AlwaysWritable(), on_read_only, log_limit,
        disk_stat or statvfs_usage, min_free_bytes=config.memory_bytes,
    )


class _AlwaysWritable:
    """Storage health when the composition root gives none: only disk usage decides."""

    @property
    def writable(self) -> bool:
        return True
