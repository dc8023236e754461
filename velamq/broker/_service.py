"""The broker: loaded topics over storage and metadata, and the Pulsar protocol listener.

Built by the composition root (velamq/server.py), which owns storage and metadata (it starts them
before the broker and closes them after it) and hands the broker's admin facade (BrokerAdmin) to
the admin tier. Everything here runs on one event loop; blocking work lives in the storage
threads and the metadata thread.

The limits of docs/operations.md live next to it: the listener's connection caps (_listener.py),
the network's share of the memory budget (_net_budget.py), the disk guard that turns the broker
read-only (_disk_guard.py), and crash-safe topic deletes (_topic_deletion.py), whose interrupted
ones `start` finishes before it listens.
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
from velamq._topic_name import PartitionRole, TopicName, partition_role
from velamq.broker._compaction import CompactedView, compacted_store_name
from velamq.broker._config import BrokerConfig
from velamq.broker._connection import ServerConnection
from velamq.broker._disk_guard import DiskGuard, DiskThresholds, DiskUsage, StorageHealth, statvfs_usage
from velamq.broker._errors import BrokerRequestError
from velamq.broker._listener import ConnectionLimits, Listener, fd_soft_limit
from velamq.broker._net_budget import NetworkBudget
from velamq.broker._policy_tasks import PolicyTasks
from velamq.broker._rate_history import RateHistory
from velamq.broker._schemas import BrokerSchemas
from velamq.broker._stats import BrokerMetrics
from velamq.broker._topic import Topic
from velamq.broker._topic_deletion import finish_interrupted_deletions
from velamq.broker._topic_stats import topic_metrics
from velamq.metadata import MetadataStore, Policies, resolve_policies
from velamq.protocol import pb
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
    ) -> None:
        """`storage_health` tells whether storage accepts appends (velamq/server.py adapts
        Storage; without it only disk usage decides); `disk_stat` reads the disk usage of a path
        (statvfs by default; tests pass a fake filesystem). The network's share of the memory
        budget is its share of config.memory_bytes (the composition root gives storage the rest)."""
        self.config = config
        self.storage = storage
        self.metadata = metadata
        self.clock = clock
        self.log_limit = RateLimitedLog(log, clock)
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
        self.broker_port = config.broker_port
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self._connections: set[ServerConnection] = set()
        self._connections_opened = 0
        self._producer_counter = itertools.count()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.advertised_address}:{self.broker_port}"

    @property
    def service_url_tls(self) -> str | None:
        return None

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
        limits: dict[str, float] = {
            **self.network.metrics(),
            **self.disk_guard.metrics(),
            "velamq_broker_log_lines_suppressed_total": self.log_limit.suppressed_total,
            "velamq_broker_topics_deleting": len(self.deleting),
        }
        if self._listener is not None:
            limits |= self._listener.metrics()
        return BrokerMetrics(
            connections_active=len(self._connections),
            connections_opened_total=self._connections_opened,
            topics=tuple(topic_metrics(t) for t in self.topics.values()),
            storage=self.storage.metrics(),
            taken_at_s=self.clock.monotonic_s(),
            policy_checks_total=self.policy_tasks.checks_total,
            limits=limits,
        )

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
        """Topic policy over namespace policy over the broker default, field by field."""
        namespace = await self.metadata.get_policies(name.namespace)
        topic = await self.metadata.get_topic_policies(str(name.partitioned_parent))
        own = await self.metadata.get_topic_policies(str(name)) if name.partition_index >= 0 else {}
        return resolve_policies(namespace, {**topic, **own}, self.default_policies)

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
            return topic
        loading = self._loading.get(full)
        if loading is not None:
            return await asyncio.shield(loading)
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

    async def _load_topic(self, name: TopicName, create: bool) -> Topic:
        full = str(name)
        self._check_not_deleting(full)
        await self.check_namespace(name)
        if not await self.metadata.topic_exists(full):
            parent_partitions = 0
            if name.partition_index >= 0:
                parent_partitions = await self.metadata.get_partitions(str(name.partitioned_parent))
            role = partition_role(name, parent_partitions)
            if role is PartitionRole.OUT_OF_RANGE:
                raise BrokerRequestError(
                    pb.NotAllowedError,
                    f"{full} is beyond the {parent_partitions} partitions of {name.partitioned_parent}",
                )
            if role is PartitionRole.ORDINARY:
                if await self.metadata.get_partitions(full) > 0:
                    raise BrokerRequestError(pb.NotAllowedError, f"{full} is a partitioned topic; use its partitions")
                if not (create and self.config.allow_auto_topic_creation):
                    raise BrokerRequestError(pb.TopicNotFound, f"topic {full} does not exist")
            await self.metadata.create_topic(full, exist_ok=True)
        ledger = await self.storage.open_ledger(full)
        topic = Topic(name, ledger, self.clock)
        await topic.apply_policies(await self.policies_for(name))
        store_name = compacted_store_name(full)
        if await self.storage.ledger_exists(store_name):
            view = await CompactedView.load(await self.storage.open_ledger(store_name))
            if view is None:  # a compaction that never finished
                await self.storage.delete_ledger(store_name)
            topic.set_compacted_view(view)
        if full in self.deleting:  # a delete started while this load was under way
            await topic.close()
            self._check_not_deleting(full)
        self.topics[full] = topic
        return topic

    def _check_not_deleting(self, full: str) -> None:
        if full in self.deleting:
            # Retryable for clients: once the delete is done they may create the topic anew.
            raise BrokerRequestError(pb.ServiceNotReady, f"topic {full} is being deleted")

    async def unload(self, topic: Topic) -> None:
        """Close a loaded topic: clients are disconnected (they reconnect and it loads again),
        cursors persisted, memory freed."""
        topic.disconnect_clients()
        self.topics.pop(topic.full_name, None)
        await topic.close()
        await topic.ledger.close()

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

    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        if not await self.metadata.namespace_exists(namespace):
            return []
        names = set(await self.metadata.list_topics(namespace))
        for parent in await self.metadata.list_partitioned_topics(namespace):
            n = await self.metadata.get_partitions(parent)
            names.update(str(TopicName.parse(parent).partition(i)) for i in range(n))
        want = {
            pb.CommandGetTopicsOfNamespace.PERSISTENT: ("persistent://",),
            pb.CommandGetTopicsOfNamespace.NON_PERSISTENT: ("non-persistent://",),
        }.get(mode, ("persistent://", "non-persistent://"))  # type: ignore[call-overload]
        return sorted(n for n in names if n.startswith(want))

    def new_producer_name(self) -> str:
        return f"{self.config.cluster_name}-0-{next(self._producer_counter)}"

    # ---- connections and tasks -----------------------------------------------------------------

    def new_connection(self, release: Callable[[], None]) -> ServerConnection:
        return ServerConnection(self, release)

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
        self._listener = Listener(self.new_connection, self.connection_limits, self.clock, self.log_limit)
        self.broker_port = self._listener.start(self.config.bind_address, self.config.broker_port)
        self.policy_tasks.start()
        self.rate_history.start()

    async def close(self) -> None:
        """Stop listening and checking, drop connections, close topics (persists cursors)."""
        if self._listener is not None:
            self._listener.close()
        await self.disk_guard.close()
        self.network.close()
        await self.policy_tasks.close()
        await self.rate_history.close()
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
