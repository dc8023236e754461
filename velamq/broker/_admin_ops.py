"""What the admin REST API asks of a live broker: stats, internal stats, subscription operations.

The JSON shapes follow Pulsar's TopicStats and PersistentTopicInternalStats so that tools written
for Pulsar read them unchanged (WC-4). Everything runs on the broker loop; nothing here blocks.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from velamq._errors import AlreadyExistsError, NotFoundError, PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.broker._errors import BrokerRequestError
from velamq.broker._subscription import Subscription, entry_info
from velamq.broker._topic import Topic
from velamq.protocol import parse_entry_metadata, pb
from velamq.storage import ManagedCursor, ManagedLedger, Position

if TYPE_CHECKING:
    from velamq.broker._service import BrokerService

_EARLIEST = "earliest"


def _pos(p: Position) -> str:
    return f"{p.ledger_id}:{p.entry_id}"


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


class BrokerAdmin:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def topic(self, topic: str) -> Topic:
        """A topic that exists (loaded on demand, never auto-created)."""
        name = TopicName.parse(topic)
        try:
            return await self.service.get_topic(name, create=False)
        except BrokerRequestError as exc:
            raise NotFoundError(exc.message) from None

    # ---- stats ---------------------------------------------------------------------------------

    async def topic_stats(self, topic: str) -> dict[str, Any]:
        t = await self.topic(topic)
        ledger = t.ledger
        average_entry = ledger.size_bytes / ledger.entries_total if ledger.entries_total else 0.0
        publishers = [
            {
                "producerId": p.producer_id,
                "producerName": p.name,
                "accessMode": pb.ProducerAccessMode.Name(p.access_mode),  # type: ignore[arg-type]
                "msgRateIn": p.rate_in.message_rate,
                "msgThroughputIn": p.rate_in.byte_rate,
                "averageMsgSize": p.rate_in.bytes_total / p.rate_in.messages_total if p.rate_in.messages_total else 0.0,
                "chunkedMessageRate": p.chunks_in.message_rate,
                "address": p.connection.remote_address,
                "connectedSince": _iso(p.connected_since_ms),
                "clientVersion": "",
                "metadata": {},
            }
            for p in t.producers.values()
        ]
        subscriptions: dict[str, Any] = {}
        for name, cursor in ledger.cursors.items():
            subscriptions[name] = self._subscription_stats(t, name, cursor, t.subscriptions.get(name), average_entry)
        for name, s in t.subscriptions.items():
            if name not in subscriptions:
                subscriptions[name] = self._subscription_stats(t, name, s.cursor, s, average_entry)
        rate_out = sum(s["msgRateOut"] for s in subscriptions.values())
        throughput_out = sum(s["msgThroughputOut"] for s in subscriptions.values())
        backlog = max((s["msgBacklog"] for s in subscriptions.values()), default=0)
        return {
            "msgRateIn": t.rate_in.message_rate,
            "msgThroughputIn": t.rate_in.byte_rate,
            "msgRateOut": rate_out,
            "msgThroughputOut": throughput_out,
            "bytesInCounter": t.rate_in.bytes_total,
            "msgInCounter": t.rate_in.messages_total,
            "bytesOutCounter": sum(s["bytesOutCounter"] for s in subscriptions.values()),
            "msgOutCounter": sum(s["msgOutCounter"] for s in subscriptions.values()),
            "averageMsgSize": t.rate_in.bytes_total / t.rate_in.messages_total if t.rate_in.messages_total else 0.0,
            "msgChunkPublished": t.chunks_published > 0,
            "storageSize": ledger.size_bytes,
            "backlogSize": int(backlog * average_entry),
            "offloadedStorageSize": 0,
            "earliestMsgPublishTimeInBacklogs": 0,
            "publishers": publishers,
            "waitingPublishers": 0,
            "subscriptions": subscriptions,
            "replication": {},
            "deduplicationStatus": "Enabled" if t.dedup is not None else "Disabled",
            "topicEpoch": t.topic_epoch,
            "nonContiguousDeletedMessagesRanges": sum(
                c.individually_acked.range_count() for c in ledger.cursors.values()
            ),
        }

    def _subscription_stats(
        self, t: Topic, name: str, cursor: ManagedCursor, s: Subscription | None, average_entry: float
    ) -> dict[str, Any]:
        consumers = []
        if s is not None:
            consumers = [
                {
                    "consumerName": c.name,
                    "msgRateOut": c.out.message_rate,
                    "msgThroughputOut": c.out.byte_rate,
                    "bytesOutCounter": c.out.bytes_total,
                    "msgOutCounter": c.out.messages_total,
                    "chunkedMessageRate": c.chunks_out.message_rate,
                    "availablePermits": c.permits,
                    "unackedMessages": c.unacked_messages,
                    "blockedConsumerOnUnackedMsgs": False,
                    "address": c.connection.remote_address,
                    "connectedSince": _iso(c.connected_since_ms),
                    "keyHashRanges": [f"[{a}, {b}]" for a, b in c.hash_ranges] or None,
                    "isActive": s.is_active(c) if s.sub_type.name in ("EXCLUSIVE", "FAILOVER") else True,
                }
                for c in s.consumers
            ]
        backlog = cursor.backlog
        return {
            "msgRateOut": s.out.message_rate if s else 0.0,
            "msgThroughputOut": s.out.byte_rate if s else 0.0,
            "bytesOutCounter": s.out.bytes_total if s else 0,
            "msgOutCounter": s.out.messages_total if s else 0,
            "msgRateRedeliver": s.redelivered.message_rate if s else 0.0,
            "msgRateExpired": s.expired.message_rate if s else 0.0,
            "totalMsgExpired": s.expired.messages_total if s else 0,
            "chunkedMessageRate": s.chunks_out.message_rate if s else 0.0,
            "msgBacklog": backlog,
            "backlogSize": int(backlog * average_entry),
            "unackedMessages": s.unacked_messages if s else 0,
            "type": _sub_type_name(s),
            "isDurable": s.durable if s else True,
            "markDeletePosition": _pos(cursor.mark_delete_position),
            "consumers": consumers,
        }

    async def partitioned_topic_stats(self, topic: str) -> dict[str, Any]:
        name = TopicName.parse(topic)
        n = await self.service.metadata.get_partitions(str(name))
        if n <= 0:
            raise NotFoundError(f"partitioned topic {topic} does not exist")
        partitions: dict[str, Any] = {}
        for i in range(n):
            partition = str(name.partition(i))
            try:
                partitions[partition] = await self.topic_stats(partition)
            except NotFoundError:
                continue
        total: dict[str, Any] = {"metadata": {"partitions": n}, "partitions": partitions}
        for key in (
            "msgRateIn",
            "msgThroughputIn",
            "msgRateOut",
            "msgThroughputOut",
            "bytesInCounter",
            "msgInCounter",
            "bytesOutCounter",
            "msgOutCounter",
            "storageSize",
            "backlogSize",
        ):
            total[key] = sum(p[key] for p in partitions.values())
        total["msgChunkPublished"] = any(p["msgChunkPublished"] for p in partitions.values())
        total["publishers"] = [pub for p in partitions.values() for pub in p["publishers"]]
        subs: dict[str, Any] = {}
        for p in partitions.values():
            for sub_name, sub in p["subscriptions"].items():
                agg = subs.setdefault(
                    sub_name,
                    {
                        "msgBacklog": 0,
                        "msgRateOut": 0.0,
                        "msgThroughputOut": 0.0,
                        "unackedMessages": 0,
                        "type": sub["type"],
                        "consumers": [],
                    },
                )
                agg["msgBacklog"] += sub["msgBacklog"]
                agg["msgRateOut"] += sub["msgRateOut"]
                agg["msgThroughputOut"] += sub["msgThroughputOut"]
                agg["unackedMessages"] += sub["unackedMessages"]
                agg["consumers"].extend(sub["consumers"])
        total["subscriptions"] = subs
        return total

    async def topic_internal_stats(self, topic: str) -> dict[str, Any]:
        t = await self.topic(topic)
        ledger = t.ledger
        ledgers = ledger.ledgers()
        last = ledger.last_confirmed
        current = ledgers[-1] if ledgers else None
        cursors: dict[str, Any] = {}
        for name, cursor in ledger.cursors.items():
            s = t.subscriptions.get(name)
            cursors[name] = self._cursor_internal(ledger, cursor, s)
        for name, s in t.subscriptions.items():
            if name not in cursors:
                cursors[name] = self._cursor_internal(ledger, s.cursor, s)
        return {
            "entriesAddedCounter": t.rate_in.messages_total,
            "numberOfEntries": ledger.entries_total,
            "totalSize": ledger.size_bytes,
            "currentLedgerEntries": current.entries if current else 0,
            "currentLedgerSize": current.size_bytes if current else 0,
            "waitingCursorsCount": 0,
            "pendingAddEntriesCount": ledger.pending_appends,
            "lastConfirmedEntry": _pos(last) if last else f"{ledger.current_ledger_id}:-1",
            "state": "LedgerOpened",
            "ledgers": [
                {"ledgerId": info.ledger_id, "entries": info.entries, "size": info.size_bytes, "offloaded": False}
                for info in ledgers
            ],
            "cursors": cursors,
            "schemaLedgers": [],
            "compactedLedger": {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False},
        }

    @staticmethod
    def _since_mark_delete(ledger: ManagedLedger, cursor: ManagedCursor) -> int:
        last = ledger.last_confirmed
        if last is None or last <= cursor.mark_delete_position:
            return 0
        return ledger.count_entries(cursor.mark_delete_position, last)

    def _cursor_internal(self, ledger: ManagedLedger, cursor: ManagedCursor, s: Subscription | None) -> dict[str, Any]:
        md = cursor.mark_delete_position
        ranges = cursor.individually_acked.ranges()
        # Pulsar prints acked ranges open-closed: (before-first..last]
        text = ", ".join(f"({first.ledger_id}:{first.entry_id - 1}..{_pos(last)}]" for first, last in ranges)
        read = s.read_position if s is not None else cursor.mark_delete_position
        return {
            "markDeletePosition": _pos(md),
            "readPosition": _pos(read),
            "waitingReadOp": False,
            "pendingReadOps": 0,
            "messagesConsumedCounter": s.out.messages_total if s else 0,
            "cursorLedger": -1,
            "individuallyDeletedMessages": f"[{text}]",
            "totalNonContiguousDeletedMessagesRange": len(ranges),
            # Entries from the mark-delete position to the end, acked or not: what ack holes inflate.
            "numberOfEntriesSinceFirstNotAckedMessage": self._since_mark_delete(ledger, cursor),
            "state": "Open",
            "active": bool(s and s.consumers),
            "properties": {},
        }

    # ---- subscriptions -------------------------------------------------------------------------

    async def list_subscriptions(self, topic: str) -> list[str]:
        t = await self.topic(topic)
        return sorted(set(t.ledger.cursors) | set(t.subscriptions))

    async def create_subscription(self, topic: str, subscription: str, message_id: tuple[int, int] | str) -> None:
        t = await self.topic(topic)
        if subscription in t.ledger.cursors or subscription in t.subscriptions:
            raise AlreadyExistsError(f"subscription {subscription} already exists")
        initial = "earliest" if message_id == _EARLIEST else "latest"
        cursor = await t.ledger.open_cursor(subscription, initial)  # type: ignore[arg-type]
        if isinstance(message_id, tuple):
            cursor.reset(Position(message_id[0], message_id[1] - 1))

    async def delete_subscription(self, topic: str, subscription: str, force: bool) -> None:
        t = await self.topic(topic)
        s = t.subscriptions.get(subscription)
        if s is None and subscription not in t.ledger.cursors:
            raise NotFoundError(f"subscription {subscription} not found")
        if s is not None and s.consumers:
            if not force:
                raise PreconditionFailedError(f"subscription {subscription} has active consumers")
            self.service.close_consumers(s)
        await t.remove_subscription(subscription, delete_cursor=True)

    def _cursor(self, t: Topic, subscription: str) -> tuple[ManagedCursor, Subscription | None]:
        s = t.subscriptions.get(subscription)
        if s is not None:
            return s.cursor, s
        cursor = t.ledger.cursors.get(subscription)
        if cursor is None:
            raise NotFoundError(f"subscription {subscription} not found")
        return cursor, None

    async def skip_messages(self, topic: str, subscription: str, count: int | None) -> None:
        t = await self.topic(topic)
        cursor, s = self._cursor(t, subscription)
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

    async def expire_messages(self, topic: str, subscription: str, seconds: int) -> None:
        t = await self.topic(topic)
        cursor, s = self._cursor(t, subscription)
        expired = await self.service.policy_tasks.expire(t, cursor, self.service.clock.now_ms() - seconds * 1000)
        if s is not None:
            s.expired.add(expired, 0)
            s.forget_acked()

    async def reset_cursor(
        self, topic: str, subscription: str, timestamp_ms: int | None, message_id: tuple[int, int] | None
    ) -> None:
        t = await self.topic(topic)
        cursor, s = self._cursor(t, subscription)
        if message_id is not None:
            mark_delete = Position(message_id[0], message_id[1] - 1)
        elif timestamp_ms is not None:
            found = await t.ledger.find_first(lambda data: parse_entry_metadata(data).publish_time >= timestamp_ms)
            last = t.ledger.last_confirmed
            if found is None:
                mark_delete = last if last is not None else Position(t.ledger.current_ledger_id, -1)
            else:
                mark_delete = Position(found.ledger_id, found.entry_id - 1)
        else:
            raise PreconditionFailedError("reset needs a timestamp or a message id")
        if s is not None:
            self.service.reset_subscription(s, mark_delete)
        else:
            cursor.reset(mark_delete)

    async def peek_messages(self, topic: str, subscription: str, count: int) -> list[tuple[tuple[int, int], bytes]]:
        t = await self.topic(topic)
        cursor, _ = self._cursor(t, subscription)
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

    async def last_message_id(self, topic: str) -> dict[str, Any]:
        t = await self.topic(topic)
        last = t.ledger.last_confirmed
        if last is None:
            return {"ledgerId": t.ledger.current_ledger_id, "entryId": -1, "partitionIndex": t.partition_index}
        entries = await t.ledger.read_entries(last, 1)
        batch = -1
        if entries and parse_entry_metadata(entries[0].data).HasField("num_messages_in_batch"):
            batch = entry_info(entries[0].data).num_messages - 1
        result: dict[str, Any] = {
            "ledgerId": last.ledger_id,
            "entryId": last.entry_id,
            "partitionIndex": t.partition_index,
        }
        if batch >= 0:
            result["batchIndex"] = batch
        return result


def _sub_type_name(s: Subscription | None) -> str:
    if s is None:
        return "Exclusive"
    return {"EXCLUSIVE": "Exclusive", "SHARED": "Shared", "FAILOVER": "Failover", "KEY_SHARED": "Key_Shared"}[
        s.sub_type.name
    ]
