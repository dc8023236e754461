"""The broker's stats records as Pulsar's JSON: TopicStats, PartitionedTopicStats,
PersistentTopicInternalStats, MessageId and LongRunningProcessStatus (WC-4).

Field names and shapes follow Pulsar's, so that tools written for Pulsar read them unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from velamq.admin._peek import iso_ms
from velamq.broker import (
    CompactionStatus,
    ConsumerStats,
    CursorStats,
    InternalStats,
    LastMessageId,
    PublisherStats,
    SubscriptionStats,
    TopicStats,
)
from velamq.storage import Position


def _pos(p: Position) -> str:
    return f"{p.ledger_id}:{p.entry_id}"


def _publisher(p: PublisherStats) -> dict[str, Any]:
    return {
        "producerId": p.producer_id,
        "producerName": p.producer_name,
        "accessMode": p.access_mode,
        "msgRateIn": p.msg_rate_in,
        "msgThroughputIn": p.msg_throughput_in,
        "averageMsgSize": p.average_msg_size,
        "chunkedMessageRate": p.chunked_message_rate,
        "address": p.address,
        "connectedSince": iso_ms(p.connected_since_ms),
        "clientVersion": p.client_version,
        "metadata": dict(p.metadata),
    }


def _consumer(c: ConsumerStats) -> dict[str, Any]:
    consumer = {
        "consumerName": c.consumer_name,
        "msgRateOut": c.msg_rate_out,
        "msgThroughputOut": c.msg_throughput_out,
        "bytesOutCounter": c.bytes_out_counter,
        "msgOutCounter": c.msg_out_counter,
        "chunkedMessageRate": c.chunked_message_rate,
        "availablePermits": c.available_permits,
        "unackedMessages": c.unacked_messages,
        "blockedConsumerOnUnackedMsgs": False,
        "address": c.address,
        "connectedSince": iso_ms(c.connected_since_ms),
        "keyHashRanges": [f"[{a}, {b}]" for a, b in c.key_hash_ranges] or None,
        "isActive": c.is_active,
        "clientVersion": c.client_version,
        "metadata": dict(c.metadata),
        # Pulsar's ConsumerStats: epoch ms (0: never), and the same as a date (lastAckedTime, ...).
        "lastAckedTimestamp": c.last_acked_ms,
        "lastConsumedTimestamp": c.last_consumed_ms,
        "lastConsumedFlowTimestamp": c.last_consumed_flow_ms,
        "lastAckedTime": iso_ms(c.last_acked_ms),
        "lastConsumedTime": iso_ms(c.last_consumed_ms),
        "msgRateRedeliver": c.msg_rate_redeliver,
    }
    if c.read_position_when_joining is not None:
        consumer["readPositionWhenJoining"] = _pos(c.read_position_when_joining)
    return consumer


def _subscription(s: SubscriptionStats) -> dict[str, Any]:
    return {
        "msgRateOut": s.msg_rate_out,
        "msgThroughputOut": s.msg_throughput_out,
        "bytesOutCounter": s.bytes_out_counter,
        "msgOutCounter": s.msg_out_counter,
        "msgRateRedeliver": s.msg_rate_redeliver,
        "msgRateExpired": s.msg_rate_expired,
        "totalMsgExpired": s.total_msg_expired,
        "chunkedMessageRate": s.chunked_message_rate,
        "msgBacklog": s.msg_backlog,
        "msgDelayed": s.msg_delayed,
        "backlogSize": s.backlog_size_bytes,
        "unackedMessages": s.unacked_messages,
        "type": s.type,
        "isDurable": s.is_durable,
        "markDeletePosition": _pos(s.mark_delete_position),
        "consumers": [_consumer(c) for c in s.consumers],
    }


def topic_stats_json(t: TopicStats) -> dict[str, Any]:
    subscriptions = {name: _subscription(s) for name, s in t.subscriptions.items()}
    return {
        "msgRateIn": t.msg_rate_in,
        "msgThroughputIn": t.msg_throughput_in,
        "msgRateOut": sum(s.msg_rate_out for s in t.subscriptions.values()),
        "msgThroughputOut": sum(s.msg_throughput_out for s in t.subscriptions.values()),
        "bytesInCounter": t.bytes_in_counter,
        "msgInCounter": t.msg_in_counter,
        "bytesOutCounter": sum(s.bytes_out_counter for s in t.subscriptions.values()),
        "msgOutCounter": sum(s.msg_out_counter for s in t.subscriptions.values()),
        "averageMsgSize": t.average_msg_size,
        "msgChunkPublished": t.msg_chunk_published,
        "storageSize": t.storage_size_bytes,
        "backlogSize": t.backlog_size_bytes,
        "offloadedStorageSize": 0,
        "earliestMsgPublishTimeInBacklogs": 0,
        "publishers": [_publisher(p) for p in t.publishers],
        "waitingPublishers": 0,
        "subscriptions": subscriptions,
        "replication": {},
        "deduplicationStatus": "Enabled" if t.deduplication_enabled else "Disabled",
        "topicEpoch": t.topic_epoch,
        "nonContiguousDeletedMessagesRanges": t.non_contiguous_deleted_ranges,
    }


_SUMMED = (
    "msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter", "msgInCounter",
    "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize",
)


def partitioned_stats_json(partition_count: int, partitions: Mapping[str, TopicStats]) -> dict[str, Any]:
    """PartitionedTopicStats: the partitions' figures summed, their subscriptions merged by name,
    and each partition's own TopicStats under "partitions"."""
    return partitioned_stats_of({name: topic_stats_json(stats) for name, stats in partitions.items()},
                                partition_count)


def partitioned_stats_of(per_partition: Mapping[str, Any], partition_count: int) -> dict[str, Any]:
    """The same from each partition's TopicStats JSON (a partition another worker owns answers
    with its JSON)."""
    total: dict[str, Any] = {"metadata": {"partitions": partition_count}, "partitions": dict(per_partition)}
    for key in _SUMMED:
        total[key] = sum(p[key] for p in per_partition.values())
    total["msgChunkPublished"] = any(p["msgChunkPublished"] for p in per_partition.values())
    total["publishers"] = [pub for p in per_partition.values() for pub in p["publishers"]]
    subs: dict[str, Any] = {}
    for p in per_partition.values():
        for sub_name, sub in p["subscriptions"].items():
            agg = subs.setdefault(sub_name, {
                "msgBacklog": 0, "msgRateOut": 0.0, "msgThroughputOut": 0.0, "unackedMessages": 0,
                "type": sub["type"], "consumers": [],
            })
            for key in ("msgBacklog", "msgRateOut", "msgThroughputOut", "unackedMessages"):
                agg[key] += sub[key]
            agg["consumers"].extend(sub["consumers"])
    total["subscriptions"] = subs
    return total


def _cursor(c: CursorStats) -> dict[str, Any]:
    # Pulsar prints acked ranges open-closed: (before-first..last]
    acked = c.individually_acked
    ranges = ", ".join(f"({first.ledger_id}:{first.entry_id - 1}..{_pos(last)}]" for first, last in acked)
    return {
        "markDeletePosition": _pos(c.mark_delete_position),
        "readPosition": _pos(c.read_position),
        "waitingReadOp": False,
        "pendingReadOps": 0,
        "messagesConsumedCounter": c.messages_consumed_counter,
        "cursorLedger": -1,
        "individuallyDeletedMessages": f"[{ranges}]",
        "totalNonContiguousDeletedMessagesRange": len(c.individually_acked),
        # Entries from the mark-delete position to the end, acked or not: what ack holes inflate.
        "numberOfEntriesSinceFirstNotAckedMessage": c.entries_since_mark_delete,
        "state": "Open",
        "active": c.active,
        "properties": {},
    }


def internal_stats_json(s: InternalStats) -> dict[str, Any]:
    return {
        "entriesAddedCounter": s.entries_added_counter,
        "numberOfEntries": s.number_of_entries,
        "totalSize": s.total_size_bytes,
        "currentLedgerEntries": s.current_ledger_entries,
        "currentLedgerSize": s.current_ledger_size_bytes,
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": s.pending_add_entries,
        "lastConfirmedEntry": _pos(s.last_confirmed_entry),
        "state": "LedgerOpened",
        "ledgers": [
            {"ledgerId": info.ledger_id, "entries": info.entries, "size": info.size_bytes, "offloaded": info.offloaded}
            for info in s.ledgers
        ],
        "cursors": {name: _cursor(c) for name, c in s.cursors.items()},
        "schemaLedgers": [],
        "compactedLedger": {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False},
    }


def last_message_id_json(m: LastMessageId) -> dict[str, Any]:
    result: dict[str, Any] = {"ledgerId": m.ledger_id, "entryId": m.entry_id, "partitionIndex": m.partition_index}
    if m.batch_index >= 0:
        result["batchIndex"] = m.batch_index
    return result


def compaction_status_json(status: CompactionStatus) -> dict[str, Any]:
    return {"status": status.status, "lastError": status.last_error}
