"""The broker: storage, metadata, loaded topics, the Pulsar listener and the admin listener.

It is also the BrokerBackend the admin tier calls. Everything here runs on one event loop;
blocking work lives in the storage writer thread and the metadata thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import struct
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from velamq import __version__
from velamq._clock import Clock, system_clock
from velamq._errors import AlreadyExistsError, NotFoundError, PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.admin import AdminServer
from velamq.broker._admin_ops import BrokerAdmin
from velamq.broker._compaction import CompactedView, CompactionStatus, compacted_store_name
from velamq.broker._config import BrokerConfig
from velamq.broker._errors import BrokerRequestError
from velamq.broker._policy_tasks import PolicyTasks
from velamq.broker._stats import BrokerMetrics
from velamq.broker._subscription import Subscription
from velamq.broker._topic import Topic
from velamq.metadata import MetadataStore, Policies, resolve_policies
from velamq.protocol import pb
from velamq.storage import ManagedCursor, ManagedLedger, Position, Storage, StorageConfig

if TYPE_CHECKING:
    from velamq.broker._connection import ServerConnection

log = logging.getLogger(__name__)

_PARTITION_RE = re.compile(r"-partition-\d+$")


class _NonDurableOwner:
    """A cursor owner that forwards to the ledger but never persists: readers' cursors."""

    def __init__(self, ledger: ManagedLedger) -> None:
        self._ledger = ledger

    @property
    def last_confirmed(self) -> Position | None:
        return self._ledger.last_confirmed

    def next_position(self, pos: Position) -> Position:
        return self._ledger.next_position(pos)

    def count_entries(self, after: Position, up_to: Position) -> int:
        return self._ledger.count_entries(after, up_to)

    def entry_exists(self, pos: Position) -> bool:
        return bool(self._ledger.entry_exists(pos))

    def cursor_changed(self, cursor: ManagedCursor) -> None:
        pass


class BrokerService:
    def __init__(self, config: BrokerConfig, clock: Clock = system_clock) -> None:
        self.config = config
        self.clock = clock
        self.server_version = f"velamq {__version__}"
        self.listeners: set[str] = set()
        self.storage = Storage(
            StorageConfig(
                data_dir=config.data_dir,
                sync_policy=config.sync_policy,  # type: ignore[arg-type]
                sync_interval_ms=config.sync_interval_ms,
                memory_bytes=config.memory_bytes,
                ledger_entries_max=config.ledger_entries_max,
                ledger_bytes_max=config.ledger_megabytes_max * 1024 * 1024,
            )
        )
        self._metadata = MetadataStore(config.data_dir / "metadata.db")
        self.topics: dict[str, Topic] = {}
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self._connections: set[ServerConnection] = set()
        self._connections_opened = 0
        self._producer_counter = itertools.count()
        self._schemas: dict[str, pb.Schema] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self._admin: AdminServer | None = None
        self.broker_port = config.broker_port
        self.http_port = config.http_port
        self.default_policies = Policies(
            retention_time_minutes=config.default_retention_time_minutes,
            retention_size_mb=config.default_retention_size_mb,
        )
        self.policy_tasks = PolicyTasks(self)
        self.admin_ops = BrokerAdmin(self)

    # ---- BrokerBackend -------------------------------------------------------------------------

    @property
    def metadata(self) -> MetadataStore:
        return self._metadata

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.advertised_address}:{self.broker_port}"

    @property
    def service_url_tls(self) -> str | None:
        return None

    @property
    def web_service_url(self) -> str:
        return f"http://{self.config.advertised_address}:{self.http_port}"

    def metrics_snapshot(self) -> BrokerMetrics:
        return BrokerMetrics(
            connections_active=len(self._connections),
            connections_opened_total=self._connections_opened,
            topics=tuple(t.metrics() for t in self.topics.values()),
            storage=self.storage.metrics(),
        )

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        name = TopicName.parse(topic)
        if name.partition_index >= 0:
            raise PreconditionFailedError(f"{topic} is a partition name")
        if await self._metadata.topic_exists(str(name)):
            raise AlreadyExistsError(f"topic {topic} already exists")
        await self._metadata.create_partitioned_topic(str(name), partitions)

    async def delete_partitioned_topic(self, topic: str, force: bool) -> None:
        name = TopicName.parse(topic)
        partitions = await self._metadata.get_partitions(str(name))
        if partitions <= 0:
            raise NotFoundError(f"partitioned topic {topic} does not exist")
        for i in range(partitions):
            partition = str(name.partition(i))
            if partition in self.topics or await self._metadata.topic_exists(partition):
                await self.delete_topic(partition, force)
        await self._metadata.delete_partitioned_topic(str(name))

    async def delete_topic(self, topic: str, force: bool) -> None:
        name = str(TopicName.parse(topic))
        loaded = self.topics.get(name)
        if (
            loaded is None
            and not await self._metadata.topic_exists(name)
            and not await self.storage.ledger_exists(name)
        ):
            raise NotFoundError(f"topic {topic} does not exist")
        if loaded is not None:
            if loaded.in_use and not force:
                raise PreconditionFailedError(f"topic {topic} has active producers or consumers")
            self._disconnect_topic(loaded)
            await loaded.close()
            self.topics.pop(name, None)
        await self.storage.delete_ledger(name)
        await self.storage.delete_ledger(compacted_store_name(name))
        self._schemas.pop(name, None)
        if await self._metadata.topic_exists(name):
            await self._metadata.delete_topic(name)

    def _disconnect_topic(self, topic: Topic) -> None:
        for producer in list(topic.producers.values()):
            producer.close_by_broker()
        for subscription in topic.subscriptions.values():
            self.close_consumers(subscription)

    async def topic_stats(self, topic: str) -> dict[str, Any]:
        return await self.admin_ops.topic_stats(topic)

    async def partitioned_topic_stats(self, topic: str) -> dict[str, Any]:
        return await self.admin_ops.partitioned_topic_stats(topic)

    async def topic_internal_stats(self, topic: str) -> dict[str, Any]:
        return await self.admin_ops.topic_internal_stats(topic)

    async def last_message_id(self, topic: str) -> dict[str, Any]:
        return await self.admin_ops.last_message_id(topic)

    async def list_subscriptions(self, topic: str) -> list[str]:
        return await self.admin_ops.list_subscriptions(topic)

    async def create_subscription(self, topic: str, subscription: str, message_id: tuple[int, int] | str) -> None:
        await self.admin_ops.create_subscription(topic, subscription, message_id)

    async def delete_subscription(self, topic: str, subscription: str, force: bool) -> None:
        await self.admin_ops.delete_subscription(topic, subscription, force)

    async def skip_messages(self, topic: str, subscription: str, count: int | None) -> None:
        await self.admin_ops.skip_messages(topic, subscription, count)

    async def expire_messages(self, topic: str, subscription: str, seconds: int) -> None:
        await self.admin_ops.expire_messages(topic, subscription, seconds)

    async def reset_cursor(
        self, topic: str, subscription: str, timestamp_ms: int | None, message_id: tuple[int, int] | None
    ) -> None:
        await self.admin_ops.reset_cursor(topic, subscription, timestamp_ms, message_id)

    async def peek_messages(self, topic: str, subscription: str, count: int) -> list[tuple[tuple[int, int], bytes]]:
        return await self.admin_ops.peek_messages(topic, subscription, count)

    async def trigger_compaction(self, topic: str) -> None:
        loaded = await self.admin_ops.topic(topic)
        loaded.trigger_compaction(self.storage)

    def compaction_status(self, topic: str) -> dict[str, Any]:
        loaded = self.topics.get(str(TopicName.parse(topic)))
        status = loaded.compaction if loaded is not None else CompactionStatus()
        return {"status": status.status, "lastError": status.last_error}

    async def create_topic(self, topic: str) -> None:
        name = str(TopicName.parse(topic))
        if await self._metadata.get_partitions(name) > 0 or await self._metadata.topic_exists(name):
            raise AlreadyExistsError(f"topic {topic} already exists")
        await self._metadata.create_topic(name)

    async def unload_topic(self, topic: str) -> None:
        """Close the topic (clients reconnect and it loads again): persists cursors, frees memory."""
        name = str(TopicName.parse(topic))
        loaded = self.topics.get(name)
        if loaded is None:
            if not await self._metadata.topic_exists(name):
                raise NotFoundError(f"topic {topic} does not exist")
            return
        self._disconnect_topic(loaded)
        self.topics.pop(name, None)
        await loaded.close()
        await loaded.ledger.close()

    def close_consumers(self, subscription: Subscription) -> None:
        for consumer in list(subscription.consumers):
            subscription.remove_consumer(consumer)
            consumer.connection.forget_consumer(consumer)
            consumer.close_by_broker()

    def reset_subscription(self, subscription: Subscription, mark_delete: Position) -> None:
        """Seek / reset-cursor, as Pulsar does it: disconnect the consumers, reset the cursor; the
        clients subscribe again and start from the new position with a fresh receiver queue."""
        subscription.resetting = True
        self.close_consumers(subscription)
        subscription.reset(mark_delete)

    # ---- topics --------------------------------------------------------------------------------

    async def check_namespace(self, name: TopicName) -> None:
        if not await self._metadata.namespace_exists(name.namespace):
            raise BrokerRequestError(pb.TopicNotFound, f"namespace {name.namespace} does not exist")

    async def policies_for(self, name: TopicName) -> Policies:
        """Topic policy over namespace policy over the broker default, field by field."""
        namespace = await self._metadata.get_policies(name.namespace)
        topic = await self._metadata.get_topic_policies(str(name.partitioned_parent))
        own = await self._metadata.get_topic_policies(str(name)) if name.partition_index >= 0 else {}
        return resolve_policies(namespace, {**topic, **own}, self.default_policies)

    async def policies_changed(self, namespace: str, topic: str | None) -> None:
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
        if not await self._metadata.topic_exists(full):
            parent_partitions = 0
            if name.partition_index >= 0:
                parent_partitions = await self._metadata.get_partitions(str(name.partitioned_parent))
            if parent_partitions <= 0:
                if await self._metadata.get_partitions(full) > 0:
                    raise BrokerRequestError(pb.NotAllowedError, f"{full} is a partitioned topic; use its partitions")
                if not (create and self.config.allow_auto_topic_creation):
                    raise BrokerRequestError(pb.TopicNotFound, f"topic {full} does not exist")
            await self._metadata.create_topic(full, exist_ok=True)
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

    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        if not await self._metadata.namespace_exists(namespace):
            return []
        names = set(await self._metadata.list_topics(namespace))
        for parent in await self._metadata.list_partitioned_topics(namespace):
            n = await self._metadata.get_partitions(parent)
            names.update(str(TopicName.parse(parent).partition(i)) for i in range(n))
        want = {
            pb.CommandGetTopicsOfNamespace.PERSISTENT: ("persistent://",),
            pb.CommandGetTopicsOfNamespace.NON_PERSISTENT: ("non-persistent://",),
        }.get(mode, ("persistent://", "non-persistent://"))  # type: ignore[call-overload]
        return sorted(n for n in names if n.startswith(want))

    def new_producer_name(self) -> str:
        return f"{self.config.cluster_name}-0-{next(self._producer_counter)}"

    def non_durable_cursor(self, ledger: ManagedLedger, name: str, mark_delete: Position) -> ManagedCursor:
        return ManagedCursor(name, _NonDurableOwner(ledger), mark_delete)

    # ---- schemas (kept per topic while the broker runs) ---------------------------------------

    def remember_schema(self, topic: str, schema: pb.Schema) -> None:
        parent = _PARTITION_RE.sub("", topic)
        self._schemas.setdefault(parent, schema)

    def schema_for(self, topic: str) -> pb.Schema | None:
        return self._schemas.get(_PARTITION_RE.sub("", topic))

    def schema_version(self, topic: str) -> bytes:
        return struct.pack(">q", 0)

    # ---- connections ---------------------------------------------------------------------------

    def connection_opened(self, connection: ServerConnection) -> None:
        self._connections.add(connection)
        self._connections_opened += 1

    def connection_closed(self, connection: ServerConnection) -> None:
        self._connections.discard(connection)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        from velamq.broker._connection import ServerConnection

        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        await self._metadata.start()
        await self.storage.start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ServerConnection(self), self.config.bind_address, self.config.broker_port, reuse_address=True
        )
        self.broker_port = self._server.sockets[0].getsockname()[1]
        self._admin = AdminServer(self, self.config.bind_address, self.config.http_port)
        await self._admin.start()
        self.http_port = self._admin.port
        self.policy_tasks.start()

    async def close(self) -> None:
        """Clean shutdown: stop listening, drop connections, close topics (persist cursors),
        flush storage, close metadata."""
        if self._server is not None:
            self._server.close()
        await self.policy_tasks.close()
        if self._admin is not None:
            await self._admin.close()
        for connection in list(self._connections):
            connection.close()
        for topic in list(self.topics.values()):
            await topic.close()
        self.topics.clear()
        for task in list(self._tasks):
            task.cancel()
        await self.storage.close()
        await self._metadata.close()
