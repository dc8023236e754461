"""The broker's BrokerOperations, faked: the outside world of the admin tier's topic and subscription routes.

Each topic keeps a list of stored entries and, per subscription, the index of its first unacknowledged
entry; calls are recorded in `calls` so tests can see what the routes asked for. Partitions of a
partitioned topic come to life when first touched, as the real broker's do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from velamq._errors import AlreadyExistsError, NotFoundError, PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.metadata import MetadataStore


@dataclass
class FakeTopic:
    entries: list[tuple[tuple[int, int], bytes]] = field(default_factory=list)
    cursors: dict[str, int] = field(default_factory=dict)  # subscription -> index of first unacked entry
    busy: set[str] = field(default_factory=set)  # subscriptions with connected consumers
    compaction: str = "NOT_RUN"


@dataclass
class FakeOperations:
    store: MetadataStore
    topics: dict[str, FakeTopic] = field(default_factory=dict)
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    async def _topic(self, topic: str) -> FakeTopic:
        if topic in self.topics:
            return self.topics[topic]
        name = TopicName.parse(topic)
        parent_partitions = await self.store.get_partitions(str(name.partitioned_parent))
        if not await self.store.topic_exists(topic) and not (0 <= name.partition_index < parent_partitions):
            raise NotFoundError(f"Topic {topic} not found")
        return self.topics.setdefault(topic, FakeTopic())

    def append(self, topic: str, entry: bytes) -> None:
        """Store an entry (as a producer would); ledger 7, dense entry ids."""
        state = self.topics.setdefault(topic, FakeTopic())
        state.entries.append(((7, len(state.entries)), entry))

    # ------------------------------------------------------------------ stats

    async def topic_stats(self, topic: str) -> dict[str, Any]:
        t = await self._topic(topic)
        subscriptions = {s: {"msgBacklog": len(t.entries) - i, "consumers": []} for s, i in t.cursors.items()}
        return {"msgRateIn": 0.0, "storageSize": sum(len(e) for _, e in t.entries), "subscriptions": subscriptions}

    async def partitioned_topic_stats(self, topic: str) -> dict[str, Any]:
        n = await self.store.get_partitions(topic)
        partitions = {str(TopicName.parse(topic).partition(i)): {"msgRateIn": 0.0} for i in range(n)}
        return {"metadata": {"partitions": n}, "msgRateIn": 0.0, "partitions": partitions}

    async def topic_internal_stats(self, topic: str) -> dict[str, Any]:
        t = await self._topic(topic)
        return {
            "entriesAddedCounter": len(t.entries),
            "ledgers": [{"ledgerId": 7, "entries": len(t.entries)}] if t.entries else [],
            "cursors": {s: {"markDeletePosition": f"7:{i - 1}", "individuallyDeletedMessages": "[]"}
                        for s, i in t.cursors.items()},
        }

    async def last_message_id(self, topic: str) -> dict[str, Any]:
        t = await self._topic(topic)
        ledger, entry = t.entries[-1][0] if t.entries else (-1, -1)
        return {"ledgerId": ledger, "entryId": entry, "partitionIndex": TopicName.parse(topic).partition_index}

    # ------------------------------------------------------------------ topic operations

    async def unload_topic(self, topic: str) -> None:
        await self._topic(topic)
        self.calls.append(("unload", topic))

    async def trigger_compaction(self, topic: str) -> None:
        t = await self._topic(topic)
        if t.compaction == "RUNNING":
            raise AlreadyExistsError("Compaction already in progress")
        t.compaction = "RUNNING"
        self.calls.append(("compact", topic))

    def compaction_status(self, topic: str) -> dict[str, Any]:
        t = self.topics.get(topic)
        return {"status": t.compaction if t else "NOT_RUN", "lastError": ""}

    async def create_topic(self, topic: str) -> None:
        await self.store.create_topic(topic)
        self.calls.append(("create_topic", topic))

    async def policies_changed(self, namespace: str, topic: str | None) -> None:
        self.calls.append(("policies_changed", namespace, topic))

    # ------------------------------------------------------------------ subscriptions

    async def list_subscriptions(self, topic: str) -> list[str]:
        return sorted((await self._topic(topic)).cursors)

    async def create_subscription(self, topic: str, subscription: str, message_id: tuple[int, int] | str) -> None:
        t = await self._topic(topic)
        if subscription in t.cursors:
            raise AlreadyExistsError("Subscription already exists for topic")
        if message_id == "earliest":
            t.cursors[subscription] = 0
        elif message_id == "latest":
            t.cursors[subscription] = len(t.entries)
        else:
            t.cursors[subscription] = next((i for i, (p, _) in enumerate(t.entries) if p == message_id), 0)
        self.calls.append(("create_subscription", topic, subscription, message_id))

    async def _cursor(self, topic: str, subscription: str) -> FakeTopic:
        t = await self._topic(topic)
        if subscription not in t.cursors:
            raise NotFoundError("Subscription not found")
        return t

    async def delete_subscription(self, topic: str, subscription: str, force: bool) -> None:
        t = await self._cursor(topic, subscription)
        if subscription in t.busy and not force:
            raise PreconditionFailedError("Subscription has active connected consumers")
        del t.cursors[subscription]
        self.calls.append(("delete_subscription", topic, subscription, force))

    async def skip_messages(self, topic: str, subscription: str, count: int | None) -> None:
        t = await self._cursor(topic, subscription)
        end = len(t.entries)
        t.cursors[subscription] = end if count is None else min(end, t.cursors[subscription] + count)
        self.calls.append(("skip", topic, subscription, count))

    async def expire_messages(self, topic: str, subscription: str, seconds: int) -> None:
        await self._cursor(topic, subscription)
        self.calls.append(("expire", topic, subscription, seconds))

    async def reset_cursor(
        self, topic: str, subscription: str, timestamp_ms: int | None, message_id: tuple[int, int] | None
    ) -> None:
        await self._cursor(topic, subscription)
        self.calls.append(("reset", topic, subscription, timestamp_ms, message_id))

    async def peek_messages(self, topic: str, subscription: str, count: int) -> list[tuple[tuple[int, int], bytes]]:
        t = await self._cursor(topic, subscription)
        start = t.cursors[subscription]
        return t.entries[start:start + count]
