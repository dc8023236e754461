"""The broker's admin facade: everything the admin tier may ask of a live broker.

BrokerAdmin implements velamq.admin's BrokerBackend protocol (the composition root hands it to
the AdminServer; the broker never imports the admin tier). It answers with the typed records of
stats/_records.py, which the admin tier renders as Pulsar's JSON. Names are full topic names; message
ids are (ledger_id, entry_id). Everything runs on the broker loop; nothing here blocks. The
cursor operations on one subscription (skip, expire, reset, peek) are the functions after the
class, over a loaded Topic.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Coroutine, Iterable
from typing import Any

from velamq._bundles import BundleError, parse_bundle
from velamq._errors import AlreadyExistsError, NotFoundError, PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.broker._errors import BrokerRequestError
from velamq.broker._offload_admin import OffloadAdmin
from velamq.broker._service import BrokerService
from velamq.broker.log import _positions
from velamq.broker.log._compaction import CompactionStatus
from velamq.broker.nonpersistent import _admin as non_persistent
from velamq.broker.nonpersistent._stats import (
    NonPersistentTopicStats,
    non_persistent_topic_metrics,
    non_persistent_topic_stats,
)
from velamq.broker.nonpersistent._topic import NonPersistentTopic
from velamq.broker.service._policy_tasks import apply_retention, expire
from velamq.broker.service._topic_deletion import delete_topics
from velamq.broker.stats._rate_history import RateSeries
from velamq.broker.stats._records import (
    BrokerMetrics,
    BrokerOverview,
    InternalStats,
    LastMessageId,
    TopicMetrics,
    TopicStats,
)
from velamq.broker.stats._topic_stats import internal_stats, topic_metrics, topic_stats
from velamq.broker.subscription._subscription import Subscription
from velamq.broker.topic._terminate import terminate
from velamq.broker.topic._topic import Topic
from velamq.metadata import MetadataStore, Policies
from velamq.storage import ManagedCursor, Position

_EARLIEST = "earliest"
# Topics a namespace force-delete deletes at once (their deletions share journal groups and
# metadata transactions); the next batch follows when they are done.
namespace_delete_batch = 500


class BrokerAdmin(OffloadAdmin):
    """Admin operations on one BrokerService: topic lifecycle (create, delete, unload, compact),
    stats, and subscription operations (create, delete, skip, expire, reset, peek). Plain metadata
    reads and writes go to `metadata` directly; whatever must also act on live topics comes here,
    so that each topic's state keeps one owner."""

    def __init__(self, broker: BrokerService) -> None:
        self._broker = broker
        # namespace -> its force delete running (a request that times out leaves it running; the
        # next request for the namespace waits for the same one)
        self._namespace_deletions: dict[str, asyncio.Task[None]] = {}

    # ---- what the admin server shows ----------------------------------------------------------

    @property
    def metadata(self) -> MetadataStore:
        return self._broker.metadata

    @property
    def service_url(self) -> str:
        return self._broker.service_url

    @property
    def service_url_tls(self) -> str | None:
        return self._broker.service_url_tls

    @property
    def default_policies(self) -> Policies:
        return self._broker.default_policies

    @property
    def max_message_bytes(self) -> int:
        return self._broker.config.max_message_bytes

    def metrics_snapshot(self) -> BrokerMetrics:
        return self._broker.metrics_snapshot()

    async def scrape_metrics(self) -> BrokerMetrics:
        return await self._broker.scrape_metrics()

    @property
    def cluster_name(self) -> str:
        return self._broker.config.cluster_name

    @property
    def force_delete_namespace_allowed(self) -> bool:
        return self._broker.config.force_delete_namespace_allowed

    async def policies_changed(self, namespace: str, topic: str | None) -> None:
        await self._broker.policies_changed(namespace, topic)

    # ---- the console: loaded topics only, never loading one --------------------------------------

    def loaded_topics(self, namespace: str) -> list[str]:
        """Full names of the namespace's loaded persistent topics, sorted (the namespace operations
        over them: unload, clear-backlog, unsubscribe)."""
        return sorted(name for name, t in self._broker.topics.items() if t.name.namespace == namespace)

    def loaded_topic_metrics(self, topics: Iterable[str]) -> dict[str, TopicMetrics]:
        """Metrics of those of `topics` that are loaded (the others are left out)."""
        found: dict[str, TopicMetrics] = {}
        for name in topics:
            t = self._broker.find_topic(name)
            if isinstance(t, NonPersistentTopic):
                found[name] = non_persistent_topic_metrics(t)
            elif t is not None:
                found[name] = topic_metrics(t)
        return found

    def broker_overview(self, busiest_max: int) -> BrokerOverview:
        broker = self._broker
        return BrokerOverview(
            connections_active=broker.connections_active,
            connections_opened_total=broker.connections_opened_total,
            topics_loaded=len(broker.topics),
            topics_loaded_by_namespace=Counter(t.name.namespace for t in broker.topics.values()),
            rate_history=broker.rate_history.broker_series(),
            busiest_topics=tuple(broker.rate_history.busiest(busiest_max)),
        )

    def topic_rate_history(self, topic: str) -> RateSeries | None:
        return self._broker.rate_history.topic_series(topic)
    async def delete_namespace_topics(self, namespace: str) -> None:
        """Force-delete every topic of a namespace: partitioned topics one by one (each deletes
        its partitions), the other topics a batch of `namespace_delete_batch` at a time, read a
        page at a time from the metadata store. Each deletion is delete_topic's, so a crash midway
        leaves whole topics, deleted or not, and the next delete goes on. The work is a task of
        its own: a caller that gives up (an admin request that times out) does not stop it."""
        task = self._namespace_deletions.get(namespace)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._delete_namespace_topics(namespace))
            self._namespace_deletions[namespace] = task
            task.add_done_callback(self._namespace_deleted)
        await asyncio.shield(task)

    def _namespace_deleted(self, task: asyncio.Task[None]) -> None:
        for namespace, running in list(self._namespace_deletions.items()):
            if running is task:
                del self._namespace_deletions[namespace]
        if not task.cancelled():
            task.exception()  # retrieved: a caller that waited has seen it

    async def _delete_namespace_topics(self, namespace: str) -> None:
        metadata = self.metadata
        for parent in await metadata.list_partitioned_topics(namespace):
            await _forgiving(self.delete_partitioned_topic(parent, force=True))
        for domain in ("persistent", "non-persistent"):
            while page := await metadata.list_topics_page(namespace, "", namespace_delete_batch, domain):
                await asyncio.gather(*(_forgiving(self.delete_topic(name, force=True)) for name in page))

    # ---- topics --------------------------------------------------------------------------------

    async def _topic(self, topic: str) -> Topic:
        """A persistent topic that exists (loaded on demand, never auto-created)."""
        name = TopicName.parse(topic)
        if not name.persistent:  # nothing is stored: no log to read, skip, reset or compact
            raise PreconditionFailedError(f"not supported on non-persistent topic {topic}")
        try:
            return await self._broker.get_topic(name, create=False)
        except BrokerRequestError as exc:
            raise NotFoundError(exc.message) from None

    async def _non_persistent(self, topic: str) -> NonPersistentTopic | None:
        """The non-persistent topic (loaded on demand, never auto-created); None for a persistent
        name."""
        name = TopicName.parse(topic)
        if name.persistent:
            return None
        try:
            return await self._broker.non_persistent.get_topic(name, create=False)
        except BrokerRequestError as exc:
            raise NotFoundError(exc.message) from None

    async def create_topic(self, topic: str) -> None:
        """AlreadyExistsError if the topic, or a partitioned topic of that name, exists: checked in
        the same metadata operation that creates it (one trip to the store, not three)."""
        await self.metadata.create_topic(str(TopicName.parse(topic)))

    async def delete_topic(self, topic: str, force: bool) -> None:
        """Crash-safe (_topic_deletion.py): marked first, so it is finished even after a crash."""
        name = str(TopicName.parse(topic))
        loaded = self._broker.find_topic(name)
        exists = await self.metadata.topic_exists(name)
        if loaded is None and not exists and not await self._broker.storage.ledger_exists(name):
            raise NotFoundError(f"topic {topic} does not exist")
        self._check_not_in_use(name, force)
        await delete_topics(self._broker, [name])
        self._broker.disk_guard.check_soon()  # space may be free again

    def _check_not_in_use(self, name: str, force: bool) -> None:
        loaded = self._broker.find_topic(name)
        if loaded is not None and loaded.in_use and not force:
            raise PreconditionFailedError(f"topic {name} has active producers or consumers")

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        name = TopicName.parse(topic)
        if name.partition_index >= 0:
            raise PreconditionFailedError(f"{topic} is a partition name")
        if await self.metadata.topic_exists(str(name)):
            raise AlreadyExistsError(f"topic {topic} already exists")
        await self.metadata.create_partitioned_topic(str(name), partitions)

    async def delete_partitioned_topic(self, topic: str, force: bool) -> None:
        """All partitions and the partitioned topic are marked in one transaction: after a crash
        the whole partitioned topic is there or gone, never some of its partitions."""
        name = TopicName.parse(topic)
        partitions = await self.metadata.get_partitions(str(name))
        if partitions <= 0:
            raise NotFoundError(f"partitioned topic {topic} does not exist")
        names = [str(name.partition(i)) for i in range(partitions)]
        for partition in names:
            self._check_not_in_use(partition, force)
        await delete_topics(self._broker, names, partitioned=str(name))
        self._broker.disk_guard.check_soon()

    async def unload_topic(self, topic: str) -> None:
        """Close the topic (clients reconnect and it loads again): persists cursors, frees memory."""
        name = str(TopicName.parse(topic))
        loaded = self._broker.find_topic(name)
        if loaded is None:
            if not await self.metadata.topic_exists(name):
                raise NotFoundError(f"topic {topic} does not exist")
            return
        if isinstance(loaded, NonPersistentTopic):
            await self._broker.non_persistent.unload(name)
        else:
            await self._broker.unload(loaded)

    async def unload_bundle(self, namespace: str, bundle: str, destination: str | None) -> None:
        """Unload the loaded topics of one bundle (`0x..._0x...`) of a namespace. One process:
        their clients reconnect and load them again here, as Pulsar's standalone does. A worker of
        several: the bundle moves to `destination` (a worker's host:port) or the next worker
        (BrokerService.unload_bundle). NotFoundError for an unknown namespace,
        PreconditionFailedError for a range that is not one of its bundles or a bad destination."""
        if not await self.metadata.namespace_exists(namespace):
            raise NotFoundError(f"namespace {namespace} does not exist")
        try:
            await self._broker.unload_bundle(namespace, parse_bundle(bundle), destination)
        except (BundleError, ValueError) as exc:
            raise PreconditionFailedError(str(exc)) from None

    async def trigger_compaction(self, topic: str) -> None:
        """Start compacting unless a compaction of the topic is running already."""
        (await self._topic(topic)).trigger_compaction(self._broker.storage)

    def compaction_status(self, topic: str) -> CompactionStatus:
        loaded = self._broker.loaded_topic(str(TopicName.parse(topic)))
        return loaded.compaction if loaded is not None else CompactionStatus()

    # ---- stats ---------------------------------------------------------------------------------

    async def topic_stats(self, topic: str) -> TopicStats | NonPersistentTopicStats:
        """NotFoundError if the topic is unknown."""
        np = await self._non_persistent(topic)
        if np is not None:
            return non_persistent_topic_stats(np)
        return topic_stats(await self._topic(topic))

    async def topic_internal_stats(self, topic: str) -> InternalStats:
        np = await self._non_persistent(topic)
        if np is not None:
            return non_persistent.internal_stats(np)
        return internal_stats(await self._topic(topic))

    async def trim_topic(self, topic: str) -> None:
        """Apply retention now: delete the consumed ledgers that retention no longer keeps."""
        await apply_retention(await self._topic(topic), self._broker.clock.now_ms())

    async def terminate_topic(self, topic: str) -> tuple[int, int]:
        """Terminate a topic (_terminate.py); its last message id, the same when asked again."""
        end = await terminate(await self._topic(topic), self.metadata)
        return end.ledger_id, end.entry_id

    # ---- reading stored messages ----------------------------------------------------------------

    async def read_entry(self, topic: str, message_id: tuple[int, int]) -> bytes:
        """The stored entry at (ledger, entry); NotFoundError if there is none."""
        t = await self._topic(topic)
        position = Position(*message_id)
        entries = await t.ledger.read_entries(position, 1) if t.ledger.entry_exists(position) else []
        if not entries or entries[0].position != position:
            raise NotFoundError(f"message {message_id[0]}:{message_id[1]} not found")
        return entries[0].data

    async def examine_entry(self, topic: str, from_latest: bool, n: int) -> tuple[tuple[int, int], bytes]:
        """The n-th stored entry (1-based) counted from the oldest, or back from the newest."""
        t = await self._topic(topic)
        infos = [info for info in t.ledger.ledgers() if info.entries > 0]
        total = sum(info.entries for info in infos)
        index = total - n if from_latest else n - 1
        if n < 1 or not 0 <= index < total:
            raise NotFoundError(f"no message at position {n} (the topic holds {total})")
        for info in infos:  # entry ids in a ledger are dense from 0 (retention removes whole ledgers)
            if index < info.entries:
                position = (info.ledger_id, index)
                return position, await self.read_entry(topic, position)
            index -= info.entries
        raise NotFoundError(f"no message at position {n}")

    async def message_id_at(self, topic: str, timestamp_ms: int) -> tuple[int, int]:
        """The first message published at or after timestamp_ms; past the end, the position the next
        message will take (as Pulsar answers)."""
        ledger = (await self._topic(topic)).ledger
        mark_delete = await _positions.mark_delete_for_publish_time(ledger, timestamp_ms)
        found = ledger.next_position(mark_delete)
        return found.ledger_id, found.entry_id

    async def last_message_id(self, topic: str) -> LastMessageId:
        t = await self._topic(topic)
        last, batch_index = await _positions.last_message(t.ledger)
        return LastMessageId(last.ledger_id, last.entry_id, t.partition_index, batch_index)

    # ---- subscriptions -------------------------------------------------------------------------

    async def list_subscriptions(self, topic: str) -> list[str]:
        np = await self._non_persistent(topic)
        if np is not None:
            return non_persistent.list_subscriptions(np)
        t = await self._topic(topic)
        return sorted({name for name, _, _ in t.cursors()})

    async def create_subscription(self, topic: str, subscription: str, message_id: tuple[int, int] | str) -> None:
        """message_id: "earliest", "latest" or (ledger, entry); AlreadyExistsError if it exists."""
        np = await self._non_persistent(topic)
        if np is not None:
            return await non_persistent.create_subscription(np, subscription)
        t = await self._topic(topic)
        if subscription in t.ledger.cursors or subscription in t.subscriptions:
            raise AlreadyExistsError(f"subscription {subscription} already exists")
        initial = "earliest" if message_id == _EARLIEST else "latest"
        cursor = await t.ledger.open_cursor(subscription, initial)  # type: ignore[arg-type]
        if isinstance(message_id, tuple):
            cursor.reset(_positions.before(Position(*message_id)))

    async def delete_subscription(self, topic: str, subscription: str, force: bool) -> None:
        np = await self._non_persistent(topic)
        if np is not None:
            return await non_persistent.delete_subscription(np, subscription, force)
        t = await self._topic(topic)
        s = t.subscriptions.get(subscription)
        if s is None and subscription not in t.ledger.cursors:
            raise NotFoundError(f"subscription {subscription} not found")
        if s is not None and s.consumers:
            if not force:
                raise PreconditionFailedError(f"subscription {subscription} has active consumers")
            s.disconnect_consumers()
        await t.remove_subscription(subscription, delete_cursor=True)

    async def skip_messages(self, topic: str, subscription: str, count: int | None) -> None:
        """Acknowledge the first `count` unacknowledged entries; None: everything (skip_all)."""
        skip(await self._topic(topic), subscription, count)

    async def expire_messages(self, topic: str, subscription: str, seconds: int) -> None:
        await expire_older(await self._topic(topic), subscription, seconds, self._broker.clock.now_ms())

    async def reset_cursor(
        self, topic: str, subscription: str, timestamp_ms: int | None, message_id: tuple[int, int] | None
    ) -> None:
        await reset(await self._topic(topic), subscription, timestamp_ms, message_id)

    async def peek_messages(self, topic: str, subscription: str, count: int) -> list[tuple[tuple[int, int], bytes]]:
        """The first `count` entries of the subscription's backlog as ((ledger, entry), stored entry
        bytes: [0x0e01][crc][metadata size][MessageMetadata][payload])."""
        return await peek(await self._topic(topic), subscription, count)


async def _forgiving(deletion: Coroutine[Any, Any, None]) -> None:
    """A deletion that may find its topic gone already (deleted meanwhile by someone else)."""
    try:
        await deletion
    except NotFoundError:
        pass


# ---- cursor operations on one subscription ------------------------------------------------------
# A subscription with consumers is changed through its Subscription (so that dispatch forgets what
# was acknowledged behind the consumers' backs, or rewinds for a reset); a durable subscription
# without consumers is only its ManagedCursor.


def skip(t: Topic, subscription: str, count: int | None) -> None:
    """Acknowledge the first `count` unacknowledged entries; None: everything (skip_all)."""
    cursor, s = _cursor(t, subscription)
    last = t.ledger.last_confirmed
    if last is None:
        return
    if count is None:
        cursor.ack_cumulative(last)
    else:
        skipped: list[Position] = []
        position = t.ledger.next_position(cursor.mark_delete_position)
        while len(skipped) < count and position <= last:
            if not cursor.is_acked(position):
                skipped.append(position)
            position = t.ledger.next_position(position)
        cursor.ack(skipped)
    if s is not None:
        s.forget_acked()


async def expire_older(t: Topic, subscription: str, seconds: int, now_ms: int) -> None:
    """Acknowledge the entries published more than `seconds` before now (TTL's rule, _policy_tasks)."""
    cursor, s = _cursor(t, subscription)
    expired = await expire(t, cursor, now_ms - seconds * 1000, now_ms, s)
    if s is not None:
        s.count_expired(expired)
        s.forget_acked()


async def reset(t: Topic, subscription: str, timestamp_ms: int | None, message_id: tuple[int, int] | None) -> None:
    """Move the cursor to a message id (the next read is that message) or to a publish time."""
    cursor, s = _cursor(t, subscription)
    if message_id is not None:
        mark_delete = _positions.before(Position(*message_id))
    elif timestamp_ms is not None:
        mark_delete = await _positions.mark_delete_for_publish_time(t.ledger, timestamp_ms)
    else:
        raise PreconditionFailedError("reset needs a timestamp or a message id")
    if s is not None:
        s.seek(mark_delete)
    else:
        cursor.reset(mark_delete)


async def peek(t: Topic, subscription: str, count: int) -> list[tuple[tuple[int, int], bytes]]:
    """The first `count` unacknowledged entries of the subscription's backlog, with their ids."""
    cursor, _ = _cursor(t, subscription)
    out: list[tuple[tuple[int, int], bytes]] = []
    position = t.ledger.next_position(cursor.mark_delete_position)
    last = t.ledger.last_confirmed
    while last is not None and position <= last and len(out) < count:
        entries = await t.ledger.read_entries(position, count)
        if not entries:
            break
        for entry in entries:
            if not cursor.is_acked(entry.position) and len(out) < count:
                out.append(((entry.position.ledger_id, entry.position.entry_id), entry.data))
        position = t.ledger.next_position(entries[-1].position)
    return out


def _cursor(t: Topic, subscription: str) -> tuple[ManagedCursor, Subscription | None]:
    s = t.subscriptions.get(subscription)
    if s is not None:
        return s.cursor, s
    cursor = t.ledger.cursors.get(subscription)
    if cursor is None:
        raise NotFoundError(f"subscription {subscription} not found")
    return cursor, None
