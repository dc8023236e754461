"""The broker: loaded topics over storage and metadata, and the Pulsar protocol listener.

Built by the composition root (velamq/server.py), which owns storage and metadata (it starts them
before the broker and closes them after it) and hands the broker's admin facade (BrokerAdmin) to
the admin tier. Everything here runs on one event loop; blocking work lives in the storage
threads and the metadata thread.

The limits of docs/operations.md live next to it: the listener's connection caps (_listener.py),
the network's share of the memory budget (_net_budget.py), the disk guard that turns the broker
read-only (_disk_guard.py), and crash-safe topic deletes (_topic_deletion.py), whose interrupted
ones `start` finishes before it listens.

Topic lifecycle (docs/architecture.md): a topic loads on first use (one metadata operation, its
managed ledger and compacted store looked up in one trip), stays loaded while used, and unloads
after `topic_idle_unload_s` without use (_idle_unload.py); the next use loads it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from velamq import __version__, _limits
from velamq._clock import Clock, system_clock
from velamq._log_limit import RateLimitedLog
from velamq._topic_name import TopicName
from velamq.broker._auth_connection import AuthCounters, AuthRefresher
from velamq.broker._compaction import CompactedView, compacted_store_name
from velamq.broker._config import BrokerConfig
from velamq.broker._connection import ServerConnection
from velamq.broker._delay_store import delete_delayed_indexes
from velamq.broker._disk_guard import DiskGuard, DiskThresholds, DiskUsage, StorageHealth, statvfs_usage
from velamq.broker._errors import BrokerRequestError
from velamq.broker._idle_unload import IdleUnloader
from velamq.broker._listener import ConnectionLimits, Listener, fd_soft_limit
from velamq.broker._metrics_snapshot import collect
from velamq.broker._net_budget import NetworkBudget
from velamq.broker._policy_tasks import PolicyTasks
from velamq.broker._rate_history import RateHistory
from velamq.broker._schemas import BrokerSchemas
from velamq.broker._stats import BrokerMetrics
from velamq.broker._topic import Topic
from velamq.broker._topic_deletion import finish_interrupted_deletions
from velamq.broker._topic_stats import topic_metrics
from velamq.metadata import MetadataStore, Policies, TopicOpen, resolve_policies
from velamq.protocol import pb
from velamq.security import AuthenticationService, AuthorizationModel, ReloadingServerContext
from velamq.storage import PublishBuffer, Storage

log = logging.getLogger(__name__)


class BrokerService:
    """The Pulsar side of a velamq broker: it accepts client connections, loads topics on first use
    (one load at a time per name), resolves their policies and runs the periodic policy checks.
    It is the one owner of the table of loaded topics; connections reach it through the narrow
    protocols of _context.py, the admin tier through BrokerAdmin."""

    def __init__(
        self,
        config: BrokerConfig,
        storage: Storage,
        metadata: MetadataStore,
        clock: Clock = system_clock,
        *,
        storage_health: StorageHealth | None = None,
        disk_stat: Callable[[Path], DiskUsage] | None = None,
        authentication: AuthenticationService | None = None,
        authorization: AuthorizationModel | None = None,
    ) -> None:
        """`authentication` checks CONNECT's credentials (None: everyone is let in, no role);
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
        self.auth_counters = AuthCounters()
        # pulsar+ssl:// on brokerServicePortTls; the certificate files are re-read when they change.
        security = config.security
        self.tls: ReloadingServerContext | None = None
        if security.broker_port_tls is not None and security.tls is not None:
            self.tls = ReloadingServerContext(security.tls, clock)
        self.network = NetworkBudget.share_of(config.memory_bytes, clock)
        self.disk_guard = DiskGuard(
            config.data_dir,
            DiskThresholds(
                config.disk_usage_warn_threshold,
                config.disk_usage_threshold,
                config.disk_usage_lwm_threshold,
                config.disk_check_interval_ms / 1000,
            ),
            clock,
            storage_health or _AlwaysWritable(),
            self.close_producers,
            self.log_limit,
            disk_stat or statvfs_usage,
            min_free_bytes=config.memory_bytes,
        )
        # Topics being deleted (_topic_deletion.py): loads of them are refused until it is done.
        self.deleting: set[str] = set()
        self.connection_limits = ConnectionLimits(
            config.max_connections or _limits.connections_max_for(fd_soft_limit()), config.max_connections_per_ip
        )
        self._listener: Listener | None = None
        self._listener_tls: Listener | None = None
        self.server_version = f"velamq {__version__}"
        self.listeners: set[str] = set()
        self.topics: dict[str, Topic] = {}
        self.schemas = BrokerSchemas(metadata.schemas, self._schema_policies)
        self.default_policies = Policies(
            retention_time_minutes=config.default_retention_time_minutes,
            retention_size_mb=config.default_retention_size_mb,
        )
        self.policy_tasks = PolicyTasks(clock, config.policy_check_interval_s, lambda: self.topics.values())
        self.rate_history = RateHistory(clock, lambda: self.topics.values(), config.rate_history_interval_s)
        self.idle_unloader = IdleUnloader(
            clock, config.topic_idle_unload_s, lambda t: self.topics.get(t.full_name) is t, self._unload_idle
        )
        # namespace -> (its stored policies, their resolution): shared by the topics that have no
        # topic policies of their own, so resolving costs nothing per topic load.
        self._resolved: dict[str, tuple[dict[str, object], Policies]] = {}
        self.broker_port = config.broker_port
        self.broker_port_tls = security.broker_port_tls
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self._connections: set[ServerConnection] = set()
        self.auth_refresher = AuthRefresher(
            clock, security.authentication_refresh_check_s, lambda: self._connections
        )
        self._connections_opened = 0
        self._producer_counter = itertools.count()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def service_url(self) -> str:
        """pulsar:// of the plain port; pulsar+ssl:// when there is only the TLS port."""
        if self.broker_port is None:
            return self.service_url_tls or ""
        return f"pulsar://{self.config.advertised_address}:{self.broker_port}"

    @property
    def service_url_plain(self) -> str | None:
        return None if self.broker_port is None else self.service_url

    @property
    def service_url_tls(self) -> str | None:
        if self.tls is None or self.broker_port_tls is None:
            return None
        return f"pulsar+ssl://{self.config.advertised_address}:{self.broker_port_tls}"

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
        return BrokerMetrics(
            connections_active=len(self._connections),
            connections_opened_total=self._connections_opened,
            topics=tuple(topic_metrics(t) for t in self.topics.values()),
            storage=self.storage.metrics(),
            taken_at_s=self.clock.monotonic_s(),
            policy_checks_total=self.policy_tasks.checks_total,
            limits=self._limits(),
            topics_loaded=len(self.topics),
            topics_unloaded_total=self.idle_unloader.unloaded_total,
        )

    async def scrape_metrics(self) -> BrokerMetrics:
        """The /metrics snapshot: per namespace (per topic too with expose_topic_level_metrics),
        the loaded topics visited a slice at a time (_metrics_snapshot.py)."""
        taken_at_s = self.clock.monotonic_s()
        namespaces, topics = await collect(list(self.topics.values()), self.config.expose_topic_level_metrics)
        return BrokerMetrics(
            connections_active=len(self._connections),
            connections_opened_total=self._connections_opened,
            topics=topics,
            storage=self.storage.metrics(),
            taken_at_s=taken_at_s,
            policy_checks_total=self.policy_tasks.checks_total,
            limits=self._limits(),
            namespaces=namespaces,
            topics_loaded=len(self.topics),
            topics_unloaded_total=self.idle_unloader.unloaded_total,
        )

    def _limits(self) -> dict[str, float]:
        limits: dict[str, float] = {
            **self.network.metrics(),
            **self.disk_guard.metrics(),
            **self.auth_counters.metrics(),
            "velamq_broker_log_lines_suppressed_total": self.log_limit.suppressed_total,
            "velamq_broker_topics_deleting": len(self.deleting),
        }
        listeners = [x for x in (self._listener, self._listener_tls) if x is not None]
        if listeners:  # both share the connection caps; their own counters add up
            limits |= listeners[0].metrics()
            limits["velamq_broker_accept_errors_total"] = sum(x.accept_errors_total for x in listeners)
            limits["velamq_broker_tls_handshake_failures_total"] = sum(
                x.tls_handshake_failures_total for x in listeners
            )
        return limits

    def close_producers(self, reason: str) -> None:
        """The broker turned read-only: every producer is closed (its client fails or keeps its
        pending sends, and is refused until the broker is writable again)."""
        for topic in list(self.topics.values()):
            for producer in list(topic.producers.values()):
                producer.close_by_broker()

    # ---- topics --------------------------------------------------------------------------------

    async def check_namespace(self, name: TopicName) -> None:
        if not await self.metadata.namespace_exists(name.namespace):
            raise BrokerRequestError(pb.TopicNotFound, f"namespace {name.namespace} does not exist")

    async def partitions_of(self, name: TopicName) -> int:
        return await self.metadata.get_partitions(str(name))

    async def policies_for(self, name: TopicName) -> Policies:
        """Topic policy over namespace policy over the broker default, field by field. (All three
        reads are answered from the metadata store's caches for an ordinary topic.)"""
        namespace = await self.metadata.get_policies(name.namespace)
        topic = await self.metadata.get_topic_policies(str(name.partitioned_parent))
        own = await self.metadata.get_topic_policies(str(name)) if name.partition_index >= 0 else {}
        if topic or own:
            return resolve_policies(namespace, {**topic, **own}, self.default_policies)
        resolved = self._resolved.get(name.namespace)
        if resolved is None or resolved[0] != namespace:
            resolved = (namespace, resolve_policies(namespace, {}, self.default_policies))
            self._resolved[name.namespace] = resolved
        return resolved[1]

    async def _schema_policies(self, name: TopicName) -> tuple[dict[str, Any], dict[str, Any]]:
        """The stored namespace and topic policies the schema settings are read from."""
        return await self.metadata.get_policies(name.namespace), await self.metadata.get_topic_policies(str(name))

    async def policies_changed(self, namespace: str, topic: str | None) -> None:
        """Re-read the policies of the loaded topics of a namespace (or of one partitioned topic)."""
        for loaded in list(self.topics.values()):
            if loaded.name.namespace != namespace:
                continue
            if topic is not None and str(TopicName.parse(topic)) not in (
                loaded.full_name,
                str(loaded.name.partitioned_parent),
            ):
                continue
            await loaded.apply_policies(await self.policies_for(loaded.name))

    def loaded_topic(self, full_name: str) -> Topic | None:
        return self.topics.get(full_name)

    async def get_topic(self, name: TopicName, create: bool) -> Topic:
        full = str(name)
        topic = self.topics.get(full)
        if topic is not None:
            self._used(topic)
            return topic
        loading = self._loading.get(full)
        if loading is not None:
            topic = await asyncio.shield(loading)
            self._used(topic)
            return topic
        future: asyncio.Future[Topic] = asyncio.get_running_loop().create_future()
        self._loading[full] = future
        try:
            topic = await self._load_topic(name, create)
            future.set_result(topic)
            return topic
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: other waiters re-raise it themselves
            raise
        finally:
            self._loading.pop(full, None)

    def _used(self, topic: Topic) -> None:
        topic.last_used_s = self.clock.monotonic_s()
        self.idle_unloader.track(topic)

    async def _load_topic(self, name: TopicName, create: bool) -> Topic:
        """One metadata operation (the topic's row: found, or created), then the managed ledger
        and the compacted store, looked up in the same trip to the storage database."""
        full = str(name)
        self._check_not_deleting(full)
        found = await self.metadata.open_topic(full, create and self.config.allow_auto_topic_creation)
        if found is TopicOpen.NO_NAMESPACE:
            raise BrokerRequestError(pb.TopicNotFound, f"namespace {name.namespace} does not exist")
        if found is TopicOpen.IS_PARTITIONED:
            raise BrokerRequestError(pb.NotAllowedError, f"{full} is a partitioned topic; use its partitions")
        if found is TopicOpen.OUT_OF_RANGE:
            parent = name.partitioned_parent
            partitions = await self.metadata.get_partitions(str(parent))
            raise BrokerRequestError(pb.NotAllowedError, f"{full} is beyond the {partitions} partitions of {parent}")
        if found is TopicOpen.NOT_FOUND:
            raise BrokerRequestError(pb.TopicNotFound, f"topic {full} does not exist")
        store_name = compacted_store_name(full)
        ledger, store = await asyncio.gather(
            self.storage.open_ledger(full), self.storage.open_ledger_if_exists(store_name)
        )
        topic = Topic(name, ledger, self.clock)
        topic.storage = self.storage
        await topic.apply_policies(await self.policies_for(name))
        if store is not None:
            view = await CompactedView.load(store)
            if view is None:  # a compaction that never finished
                await self.storage.delete_ledger(store_name)
            topic.set_compacted_view(view)
        if full in self.deleting:  # a delete started while this load was under way
            await topic.close()
            self._check_not_deleting(full)
        self.topics[full] = topic
        self._used(topic)
        return topic

    def _check_not_deleting(self, full: str) -> None:
        if full in self.deleting:
            # Retryable for clients: once the delete is done they may create the topic anew.
            raise BrokerRequestError(pb.ServiceNotReady, f"topic {full} is being deleted")

    async def unload(self, topic: Topic) -> None:
        """Close a loaded topic: clients are disconnected (they reconnect and it loads again),
        cursors persisted, memory freed."""
        topic.disconnect_clients()
        await self._close_topics([topic])

    async def _unload_idle(self, topics: list[Topic]) -> None:
        """The idle unloader's batch: no clients to disconnect (an idle topic has none)."""
        await self._close_topics(topics)

    async def _close_topics(self, topics: list[Topic]) -> None:
        """Unload topics together: out of the table at once (a lookup from now on loads the topic
        again, after its managed ledger is closed), then closed concurrently, so that their cursor
        writes and entries share one journal group and one flush."""
        for topic in topics:
            if self.topics.get(topic.full_name) is topic:
                del self.topics[topic.full_name]
            topic.closed = True
        if len(topics) > 1024 and len(self.topics) < len(topics):
            self.topics = dict(self.topics)  # a dict never shrinks by itself: give its table back
        await asyncio.gather(*(_close_topic(t) for t in topics))

    async def delete(self, topic: str) -> None:
        """Delete a topic's data: the loaded topic (its clients disconnected), its ledger and its
        compacted store. The metadata rows (its schemas go with them), and the order that makes
        this crash-safe, are _topic_deletion.py's."""
        loading = self._loading.get(topic)
        if loading is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(loading)
        loaded = self.topics.pop(topic, None)
        if loaded is not None:
            loaded.disconnect_clients()
            await loaded.close()
        await self.storage.delete_ledger(topic)
        await self.storage.delete_ledger(compacted_store_name(topic))
        await delete_delayed_indexes(self.storage, topic)

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
        return f"{self.config.cluster_name}-0-{next(self._producer_counter)}"

    # ---- connections and tasks -----------------------------------------------------------------

    def new_connection(self, release: Callable[[], None]) -> ServerConnection:
        return ServerConnection(self, release)

    def new_tls_connection(self, release: Callable[[], None]) -> ServerConnection:
        return ServerConnection(self, release, tls=True)

    def connection_opened(self, connection: ServerConnection) -> None:
        self._connections.add(connection)
        self._connections_opened += 1

    def connection_closed(self, connection: ServerConnection) -> None:
        self._connections.discard(connection)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- lifecycle (storage and metadata are started before and closed after, by the caller) ----

    async def start(self) -> None:
        """Finish the deletes a crash cut short, read the disk usage (a broker started on a full
        disk starts read-only), then listen."""
        await finish_interrupted_deletions(self)
        await self.disk_guard.start()
        # Both ports count against the same connection caps.
        if self.config.broker_port is not None:
            self._listener = Listener(self.new_connection, self.connection_limits, self.clock, self.log_limit)
            self.broker_port = self._listener.start(self.config.bind_address, self.config.broker_port)
        if self.tls is not None and self.broker_port_tls is not None:
            self._listener_tls = Listener(
                self.new_tls_connection, self.connection_limits, self.clock, self.log_limit,
                tls=self.tls, handshake_timeout_s=self.config.handshake_timeout_s,
            )
            self.broker_port_tls = self._listener_tls.start(self.config.bind_address, self.broker_port_tls)
        self.policy_tasks.start()
        if self.authentication is not None:
            self.auth_refresher.start()
        self.rate_history.start()
        self.idle_unloader.start()

    async def close(self) -> None:
        """Stop listening and checking, drop connections, close topics (persists cursors)."""
        for listener in (self._listener, self._listener_tls):
            if listener is not None:
                listener.close()
        await self.disk_guard.close()
        self.network.close()
        await self.policy_tasks.close()
        await self.auth_refresher.close()
        await self.rate_history.close()
        await self.idle_unloader.close()
        for connection in list(self._connections):
            connection.close()
        for topic in list(self.topics.values()):
            await topic.close()
        self.topics.clear()
        for task in list(self._tasks):
            task.cancel()


class _AlwaysWritable:
    """Storage health when the composition root gives none: only disk usage decides."""

    @property
    def writable(self) -> bool:
        return True


async def _close_topic(topic: Topic) -> None:
    await topic.close()
    await topic.ledger.close()
