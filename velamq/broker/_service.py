"""The broker: loaded topics over storage and metadata, and the Pulsar protocol listener.

Built by the composition root (velamq/server.py), which owns storage and metadata (it starts them
before the broker and closes them after it) and hands the broker's admin facade (BrokerAdmin) to
the admin tier. Everything here runs on one event loop; blocking work lives in the storage
threads and the metadata thread.

Topic lifecycle (docs/architecture.md): a topic loads on first use (one metadata operation, its
managed ledger and compacted store looked up in one trip), stays loaded while used, and unloads
after `topic_idle_unload_s` without use (_idle_unload.py); the next use loads it again.
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
from velamq.broker._idle_unload import IdleUnloader
from velamq.broker._metrics_snapshot import collect
from velamq.broker._policy_tasks import PolicyTasks
from velamq.broker._schemas import SchemaRegistry
from velamq.broker._stats import BrokerMetrics
from velamq.broker._topic import Topic
from velamq.broker._topic_stats import topic_metrics
from velamq.metadata import MetadataStore, Policies, TopicOpen, resolve_policies
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
        self.schemas = SchemaRegistry()
        self.default_policies = Policies(
            retention_time_minutes=config.default_retention_time_minutes,
            retention_size_mb=config.default_retention_size_mb,
        )
        self.policy_tasks = PolicyTasks(clock, config.policy_check_interval_s, lambda: self.topics.values())
        self.idle_unloader = IdleUnloader(
            clock, config.topic_idle_unload_s, lambda t: self.topics.get(t.full_name) is t, self._unload_idle
        )
        # namespace -> (its stored policies, their resolution): shared by the topics that have no
        # topic policies of their own, so resolving costs nothing per topic load.
        self._resolved: dict[str, tuple[dict[str, object], Policies]] = {}
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
            namespaces=namespaces,
            topics_loaded=len(self.topics),
            topics_unloaded_total=self.idle_unloader.unloaded_total,
        )

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
        found = await self.metadata.open_topic(full, create and self.config.allow_auto_topic_creation)
        if found is TopicOpen.NO_NAMESPACE:
            raise BrokerRequestError(pb.TopicNotFound, f"namespace {name.namespace} does not exist")
        if found is TopicOpen.IS_PARTITIONED:
            raise BrokerRequestError(pb.NotAllowedError, f"{full} is a partitioned topic; use its partitions")
        if found is TopicOpen.NOT_FOUND:
            raise BrokerRequestError(pb.TopicNotFound, f"topic {full} does not exist")
        store_name = compacted_store_name(full)
        ledger, store = await asyncio.gather(
            self.storage.open_ledger(full), self.storage.open_ledger_if_exists(store_name)
        )
        topic = Topic(name, ledger, self.clock)
        await topic.apply_policies(await self.policies_for(name))
        if store is not None:
            view = await CompactedView.load(store)
            if view is None:  # a compaction that never finished
                await self.storage.delete_ledger(store_name)
            topic.set_compacted_view(view)
        self.topics[full] = topic
        self._used(topic)
        return topic

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
        """Delete a topic's data: the loaded topic (its clients disconnected), its ledger, its
        compacted store and its schema. The metadata row is the caller's."""
        loaded = self.topics.pop(topic, None)
        if loaded is not None:
            loaded.disconnect_clients()
            await loaded.close()
        await self.storage.delete_ledger(topic)
        await self.storage.delete_ledger(compacted_store_name(topic))
        self.schemas.forget(topic)

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
        self.idle_unloader.start()

    async def close(self) -> None:
        """Stop listening and checking, drop connections, close topics (persists cursors)."""
        if self._server is not None:
            self._server.close()
        await self.policy_tasks.close()
        await self.idle_unloader.close()
        for connection in list(self._connections):
            connection.close()
        for topic in list(self.topics.values()):
            await topic.close()
        self.topics.clear()
        for task in list(self._tasks):
            task.cancel()


async def _close_topic(topic: Topic) -> None:
    await topic.close()
    await topic.ledger.close()
