"""The broker: loaded topics over storage and metadata, and the Pulsar protocol listener.

Built by the composition root (velamq/server.py), which owns storage and metadata (it starts them
before the broker and closes them after it) and hands the broker's admin facade (BrokerAdmin) to
the admin tier. Everything here runs on one event loop; blocking work lives in the storage
threads and the metadata thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Coroutine
from typing import Any

from velamq import __version__
from velamq._clock import Clock, system_clock
from velamq._topic_name import TopicName
from velamq.broker._compaction import CompactedView, compacted_store_name
from velamq.broker._config import BrokerConfig
from velamq.broker._connection import ServerConnection
from velamq.broker._errors import BrokerRequestError
from velamq.broker._policy_tasks import PolicyTasks
from velamq.broker._rate_history import RateHistory
from velamq.broker._schemas import BrokerSchemas
from velamq.broker._stats import BrokerMetrics
from velamq.broker._topic import Topic
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
        self, config: BrokerConfig, storage: Storage, metadata: MetadataStore, clock: Clock = system_clock
    ) -> None:
        self.config = config
        self.storage = storage
        self.metadata = metadata
        self.clock = clock
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
        self._server: asyncio.Server | None = None

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
        return BrokerMetrics(
            connections_active=len(self._connections),
            connections_opened_total=self._connections_opened,
            topics=tuple(topic_metrics(t) for t in self.topics.values()),
            storage=self.storage.metrics(),
            taken_at_s=self.clock.monotonic_s(),
            policy_checks_total=self.policy_tasks.checks_total,
        )

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
        await self.check_namespace(name)
        if not await self.metadata.topic_exists(full):
            parent_partitions = 0
            if name.partition_index >= 0:
                parent_partitions = await self.metadata.get_partitions(str(name.partitioned_parent))
            if parent_partitions <= 0:
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
        self.topics[full] = topic
        return topic

    async def unload(self, topic: Topic) -> None:
        """Close a loaded topic: clients are disconnected (they reconnect and it loads again),
        cursors persisted, memory freed."""
        topic.disconnect_clients()
        self.topics.pop(topic.full_name, None)
        await topic.close()
        await topic.ledger.close()

    async def delete(self, topic: str) -> None:
        """Delete a topic's data: the loaded topic (its clients disconnected), its ledger and its
        compacted store. The metadata row is the caller's (its schemas go with it)."""
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
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(self), self.config.bind_address, self.config.broker_port, reuse_address=True
        )
        self.broker_port = self._server.sockets[0].getsockname()[1]
        self.policy_tasks.start()
        self.rate_history.start()

    async def close(self) -> None:
        """Stop listening and checking, drop connections, close topics (persists cursors)."""
        if self._server is not None:
            self._server.close()
        await self.policy_tasks.close()
        await self.rate_history.close()
        for connection in list(self._connections):
            connection.close()
        for topic in list(self.topics.values()):
            await topic.close()
        self.topics.clear()
        for task in list(self._tasks):
            task.cancel()
