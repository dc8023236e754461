"""The broker's table of loaded topics: loading on first use, the policies in force, unloading, deleting.

LoadedTopics is the one owner of that table (BrokerService holds one and answers the connections'
and the admin facade's topic requests through it). It depends on storage for the managed ledgers
and on the four metadata reads of TopicRows, nothing else of the broker.

Topic lifecycle (docs/architecture.md): a topic loads on first use (one metadata operation, its
managed ledger and compacted store looked up in one trip), stays loaded while used, and unloads
after `idle_unload_s` without use (_idle_unload.py); the next use loads it again. At most one load
per name runs at a time: later lookups of the same name wait for it. Names in `deleting` are
being deleted (_topic_deletion.py): loads of them are refused until the delete is done.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Protocol

from velamq._clock import Clock
from velamq._topic_name import TopicName
from velamq.broker._errors import BrokerRequestError
from velamq.broker._ownership import BrokerUrls
from velamq.broker.delayed._store import delete_delayed_indexes
from velamq.broker.log._compaction import CompactedView, compacted_store_name
from velamq.broker.service._auto_create import TopicCreation
from velamq.broker.service._idle_unload import IdleUnloader
from velamq.broker.topic._terminate import set_terminated, stored_termination
from velamq.broker.topic._topic import Topic
from velamq.metadata import Policies, TopicOpen, resolve_policies
from velamq.protocol import pb
from velamq.storage import LedgerStore, ManagedLedger


class TopicRows(Protocol):
    """What loading a topic reads of the metadata store (MetadataStore implements it)."""

    async def open_topic(self, topic: str, create: bool) -> TopicOpen: ...

    async def get_partitions(self, topic: str) -> int: ...

    async def namespace_policies(self, ns: str) -> Mapping[str, Any]: ...

    async def get_topic_policies(self, topic: str) -> dict[str, Any]: ...

    async def list_topic_policies(self, ns: str) -> list[str]: ...


class TopicObserver(Protocol):
    """Told of each topic as it loads (before anyone can publish to it) and after its policies
    change: the server's geo-replication starts its replicators so. Must not raise."""

    async def topic_loaded(self, topic: Topic) -> None: ...

    async def policies_applied(self, topic: Topic) -> None: ...


class LoadedTopics:
    """The loaded topics by full name, and everything that adds to or removes from that table:
    loads (one at a time per name), idle unloads (its IdleUnloader), unloads, deletes, and the
    resolution of the policies a topic runs under. Everything runs on the broker loop."""

    def __init__(
        self,
        storage: LedgerStore,
        metadata: TopicRows,
        clock: Clock,
        *,
        default_policies: Policies,
        auto_create: TopicCreation,
        idle_unload_s: float,
    ) -> None:
        """`auto_create`: whether a lookup that may create creates a missing topic (the broker's
        allowAutoTopicCreation, or its namespace's autoTopicCreation policy); `default_policies`
        are the broker's, under namespace and topic policies."""
        self.storage = storage
        self.metadata = metadata
        self.clock = clock
        self.default_policies = default_policies
        self.auto_create = auto_create
        self.topics: dict[str, Topic] = {}
        self.deleting: set[str] = set()
        self.idle_unloader = IdleUnloader(
            clock, idle_unload_s, lambda t: self.topics.get(t.full_name) is t, self._unload_idle
        )
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self.observers: list[TopicObserver] = []
        # namespace -> (its stored policies, their resolution): shared by the topics that have no
        # topic policies of their own, so resolving costs nothing per topic load.
        self._resolved: dict[str, tuple[Mapping[str, Any], Policies]] = {}

    # ---- policies --------------------------------------------------------------------------------

    async def policies_for(self, name: TopicName) -> Policies:
        """Topic policy over namespace policy over the broker default, field by field. (All three
        reads are answered from the metadata store's caches for an ordinary topic.)"""
        namespace = await self.metadata.namespace_policies(name.namespace)
        topic = await self.metadata.get_topic_policies(str(name.partitioned_parent))
        own = await self.metadata.get_topic_policies(str(name)) if name.partition_index >= 0 else {}
        if topic or own:
            return resolve_policies(namespace, {**topic, **own}, self.default_policies)
        return self._namespace_resolved(name.namespace, namespace)

    def _namespace_resolved(self, namespace: str, stored: Mapping[str, Any]) -> Policies:
        """The policies of the namespace's topics that have none of their own (one object while
        the namespace's stored policies stay the same: the store hands out the same read-only
        object for them until they change)."""
        resolved = self._resolved.get(namespace)
        if resolved is None or (resolved[0] is not stored and resolved[0] != stored):
            resolved = (stored, resolve_policies(stored, {}, self.default_policies))
            self._resolved[namespace] = resolved
        return resolved[1]

    async def policies_changed(self, namespace: str | None, topic: str | None, changed_only: bool = False) -> None:
        """Re-read the policies of the loaded topics of a namespace (or of one partitioned topic;
        of every loaded topic if namespace is None). changed_only: apply them only to topics whose
        policies differ from what they have (another worker changed some metadata, nobody knows
        what)."""
        if changed_only and namespace is None and topic is None:
            await self._policies_changed_elsewhere()
            return
        for loaded in list(self.topics.values()):
            if namespace is not None and loaded.name.namespace != namespace:
                continue
            if topic is not None and str(TopicName.parse(topic)) not in (
                loaded.full_name,
                str(loaded.name.partitioned_parent),
            ):
                continue
            policies = await self.policies_for(loaded.name)
            if changed_only and policies == loaded.policies:
                continue
            await self._apply(loaded, policies)

    async def _policies_changed_elsewhere(self) -> None:
        """Every loaded topic checked against the policies it resolves to now, with two reads of
        the metadata store per namespace rather than three awaited reads per topic: any commit
        of another worker (a topic it created, a policy) brings this walk, every change-watch
        interval, so its cost per loaded topic must be small."""
        by_namespace: dict[str, list[Topic]] = {}
        for loaded in list(self.topics.values()):
            by_namespace.setdefault(loaded.name.namespace, []).append(loaded)
        for namespace, topics in by_namespace.items():
            common = self._namespace_resolved(namespace, await self.metadata.namespace_policies(namespace))
            carriers = set(await self.metadata.list_topic_policies(namespace))
            for loaded in topics:
                if self.topics.get(loaded.full_name) is not loaded:
                    continue  # unloaded or deleted while this walk awaited
                if carriers and str(loaded.name.partitioned_parent) in carriers:
                    policies = await self.policies_for(loaded.name)  # it has topic policies
                else:
                    policies = common
                if policies is not loaded.policies and policies != loaded.policies:
                    await self._apply(loaded, policies)

    async def _apply(self, loaded: Topic, policies: Policies) -> None:
        await loaded.apply_policies(policies)
        for observer in self.observers:
            await observer.policies_applied(loaded)

    # ---- loading ---------------------------------------------------------------------------------

    def loaded_topic(self, full_name: str) -> Topic | None:
        return self.topics.get(full_name)

    async def get_topic(self, name: TopicName, create: bool) -> Topic:
        """The loaded topic, loading it first; BrokerRequestError(TopicNotFound) if it does not
        exist and may not be created."""
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
        and the compacted store, looked up in the same trip to the storage database. A topic whose
        row this load created has no compacted store: a store is only made by compacting a loaded
        topic (which has its row), and a delete removes a topic's ledgers before its rows
        (_topic_deletion.py), so a new row never finds an old topic's store."""
        full = str(name)
        self._check_not_deleting(full)
        store_name = compacted_store_name(full)
        if await self._open_row(name, create) is TopicOpen.CREATED:
            ledger, store = await self.storage.open_ledger(full), None
        else:
            ledger, store = await self._open_ledgers(full, store_name)
        topic = Topic(name, ledger, self.clock)
        topic.storage = self.storage
        await topic.apply_policies(await self.policies_for(name))
        end = await stored_termination(self.metadata, topic)
        if end is not None:
            set_terminated(topic, end)
        if store is not None:
            view = await CompactedView.load(store)
            if view is None:  # a compaction that never finished
                await self.storage.delete_ledger(store_name)
            topic.set_compacted_view(view)
        for observer in self.observers:
            await observer.topic_loaded(topic)
        if full in self.deleting:  # a delete started while this load was under way
            await topic.close()
            self._check_not_deleting(full)
        self.topics[full] = topic
        self._used(topic)
        return topic

    async def _open_ledgers(self, full: str, store_name: str) -> tuple[ManagedLedger, ManagedLedger | None]:
        """The topic's managed ledger and its compacted store if it has one, asked for in the same
        turn of the loop (one trip to the storage database for both). One task for the store's
        lookup, the ledger's awaited here: cheaper than gather's two tasks and its future."""
        lookup = asyncio.ensure_future(self.storage.open_ledger_if_exists(store_name))
        try:
            ledger = await self.storage.open_ledger(full)
        except BaseException:
            lookup.cancel()
            lookup.add_done_callback(_retrieve)
            raise
        return ledger, await lookup

    async def _open_row(self, name: TopicName, create: bool) -> TopicOpen:
        """The topic's metadata row, found (EXISTS) or created (CREATED); BrokerRequestError says
        why not."""
        full = str(name)
        found = await self.metadata.open_topic(full, create and await self.auto_create.may_create(name))
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
        return found

    def _check_not_deleting(self, full: str) -> None:
        if full in self.deleting:
            # Retryable for clients: once the delete is done they may create the topic anew.
            raise BrokerRequestError(pb.ServiceNotReady, f"topic {full} is being deleted")

    # ---- unloading and deleting ------------------------------------------------------------------

    async def unload(self, topic: Topic) -> None:
        """Close a loaded topic: clients are disconnected (they reconnect and it loads again),
        cursors persisted, memory freed."""
        topic.disconnect_clients()
        await self._close_topics([topic])

    async def hand_over(self, topics: list[Topic], new_owner: BrokerUrls | None) -> None:
        """Unload the topics of a bundle that moves to another worker (PIP-307's order): closed
        first, so that every append settles and its receipt goes out while SENDs that come later
        get none, then their clients are told to go to `new_owner`. A producer sends what has no
        receipt again there, in order; a consumer gets again what it had not acknowledged."""
        producers = [p for topic in topics for p in topic.producers.values()]
        consumers = [
            (subscription, consumer)
            for topic in topics
            for subscription in topic.subscriptions.values()
            for consumer in subscription.consumers
        ]
        await self._close_topics(topics)
        for producer in producers:
            producer.close_by_broker(new_owner)
        for subscription, consumer in consumers:
            subscription.remove_consumer(consumer)
            consumer.close_by_broker(new_owner)

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

    def close_producers(self) -> None:
        """Close every producer of every loaded topic from the broker's side (the broker turned
        read-only)."""
        for topic in list(self.topics.values()):
            for producer in list(topic.producers.values()):
                producer.close_by_broker()

    async def close(self) -> None:
        """The broker closes (after the idle unloader stopped): every loaded topic closes, its
        cursors persisted, and the table empties."""
        for topic in list(self.topics.values()):
            await topic.close()
        self.topics.clear()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # marked retrieved: the load failed already for another reason


async def _close_topic(topic: Topic) -> None:
    await topic.close()
    await topic.ledger.close()
