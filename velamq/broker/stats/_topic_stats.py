"""Figures of a loaded topic as the records of _records.py: Prometheus metrics, TopicStats, internal stats.

Backlog size in bytes is estimated as backlog entries x the topic's average entry size, as Pulsar
does. Everything here reads state on the loop and copies it; nothing is changed.
"""

from __future__ import annotations

from velamq.broker.stats._records import (
    ConsumerStats,
    CursorStats,
    InternalStats,
    LedgerStats,
    PublisherStats,
    SubscriptionMetrics,
    SubscriptionStats,
    TopicMetrics,
    TopicStats,
)
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._subscription import Subscription
from velamq.broker.topic._producer import ServerProducer
from velamq.broker.topic._topic import Topic
from velamq.protocol import pb
from velamq.storage import ManagedCursor, Position


def _average_entry_bytes(topic: Topic) -> float:
    ledger = topic.ledger
    return ledger.size_bytes / ledger.entries_total if ledger.entries_total else 0.0


def _sub_type_name(s: Subscription | None) -> str:
    return s.sub_type.pulsar_name if s is not None else "Exclusive"


# ---- metrics --------------------------------------------------------------------------------------


def topic_metrics(topic: Topic) -> TopicMetrics:
    subs = tuple(_subscription_metrics(name, cursor, s) for name, cursor, s in topic.cursors())
    backlog = max((s.backlog_entries for s in subs), default=0)
    quota = topic.policies.backlog_quota
    live = topic.subscriptions.values()
    return TopicMetrics(
        topic=topic.full_name,
        producers=len(topic.producers),
        consumers=sum(len(s.consumers) for s in live),
        msg_in_total=topic.rate_in.messages_total,
        bytes_in_total=topic.rate_in.bytes_total,
        msg_out_total=sum(s.out.messages_total for s in live),
        bytes_out_total=sum(s.out.bytes_total for s in live),
        storage_size_bytes=topic.ledger.size_bytes,
        entries_total=topic.ledger.entries_total,
        backlog_entries=backlog,
        subscriptions=subs,
        msg_rate_in=topic.rate_in.message_rate,
        msg_rate_out=sum(s.msg_rate_out for s in subs),
        msg_throughput_in=topic.rate_in.byte_rate,
        msg_throughput_out=sum(s.msg_throughput_out for s in subs),
        backlog_size_bytes=int(backlog * _average_entry_bytes(topic)),
        backlog_quota_limit_bytes=quota.limit_bytes if quota else -1,
        backlog_quota_limit_time_s=quota.limit_time_s if quota else -1,
    )


def _subscription_metrics(name: str, cursor: ManagedCursor, s: Subscription | None) -> SubscriptionMetrics:
    md = cursor.mark_delete_position
    return SubscriptionMetrics(
        name=name,
        type=_sub_type_name(s),
        consumers=len(s.consumers) if s else 0,
        backlog_entries=cursor.backlog,
        unacked_messages=s.unacked_messages if s else 0,
        msg_out_total=s.out.messages_total if s else 0,
        bytes_out_total=s.out.bytes_total if s else 0,
        mark_delete_position=f"{md.ledger_id}:{md.entry_id}",
        delayed_messages=s.delayed_messages if s else 0,
        msg_rate_out=s.out.message_rate if s else 0.0,
        msg_throughput_out=s.out.byte_rate if s else 0.0,
        msg_rate_redeliver=s.redelivered.message_rate if s else 0.0,
        msg_rate_expired=s.expired.message_rate if s else 0.0,
        total_msg_expired=s.expired.messages_total if s else 0,
    )


# ---- TopicStats -----------------------------------------------------------------------------------


def publisher_stats(p: ServerProducer) -> PublisherStats:
    """One producer's figures, as Pulsar's PublisherStats (either kind of topic)."""
    return PublisherStats(
        producer_id=p.producer_id,
        producer_name=p.name,
        access_mode=pb.ProducerAccessMode.Name(p.access_mode),  # type: ignore[arg-type]
        msg_rate_in=p.rate_in.message_rate,
        msg_throughput_in=p.rate_in.byte_rate,
        average_msg_size=p.rate_in.bytes_total / p.rate_in.messages_total if p.rate_in.messages_total else 0.0,
        chunked_message_rate=p.chunks_in.message_rate,
        address=p.channel.remote_address,
        connected_since_ms=p.connected_since_ms,
        client_version=p.channel.client_version,
        metadata=dict(p.metadata),
    )


def consumer_stats(c: ServerConsumer, active: bool, joined_at: Position | None = None) -> ConsumerStats:
    """One consumer's figures, as Pulsar's ConsumerStats (either kind of topic)."""
    return ConsumerStats(
        consumer_name=c.name,
        msg_rate_out=c.out.message_rate,
        msg_throughput_out=c.out.byte_rate,
        bytes_out_counter=c.out.bytes_total,
        msg_out_counter=c.out.messages_total,
        chunked_message_rate=c.chunks_out.message_rate,
        available_permits=c.permits,
        unacked_messages=c.unacked_messages,
        address=c.channel.remote_address,
        connected_since_ms=c.connected_since_ms,
        key_hash_ranges=tuple(c.hash_ranges),
        is_active=active,
        client_version=c.channel.client_version,
        metadata=dict(c.metadata),
        last_acked_ms=c.last_acked_ms,
        last_consumed_ms=c.last_consumed_ms,
        last_consumed_flow_ms=c.last_flow_ms,
        msg_rate_redeliver=c.redelivered.message_rate,
        read_position_when_joining=joined_at,
    )


def topic_stats(topic: Topic) -> TopicStats:
    average_entry = _average_entry_bytes(topic)
    publishers = tuple(publisher_stats(p) for p in topic.producers.values())
    subscriptions = {name: _subscription_stats(cursor, s, average_entry) for name, cursor, s in topic.cursors()}
    backlog = max((s.msg_backlog for s in subscriptions.values()), default=0)
    rate_in = topic.rate_in
    return TopicStats(
        msg_rate_in=rate_in.message_rate,
        msg_throughput_in=rate_in.byte_rate,
        bytes_in_counter=rate_in.bytes_total,
        msg_in_counter=rate_in.messages_total,
        average_msg_size=rate_in.bytes_total / rate_in.messages_total if rate_in.messages_total else 0.0,
        msg_chunk_published=topic.chunks_published > 0,
        storage_size_bytes=topic.ledger.size_bytes,
        backlog_size_bytes=int(backlog * average_entry),
        publishers=publishers,
        subscriptions=subscriptions,
        deduplication_enabled=topic.dedup is not None,
        topic_epoch=topic.topic_epoch,
        non_contiguous_deleted_ranges=sum(c.individually_acked.range_count() for c in topic.ledger.cursors.values()),
    )


def _subscription_stats(cursor: ManagedCursor, s: Subscription | None, average_entry: float) -> SubscriptionStats:
    backlog = cursor.backlog
    common = SubscriptionStats(
        type=_sub_type_name(s),
        is_durable=s.durable if s else True,
        msg_backlog=backlog,
        backlog_size_bytes=int(backlog * average_entry),
        unacked_messages=s.unacked_messages if s else 0,
        mark_delete_position=cursor.mark_delete_position,
    )
    if s is None:
        return common
    consumers = tuple(consumer_stats(c, s.is_active(c), s.joined_at(c)) for c in s.consumers)
    return SubscriptionStats(
        type=common.type,
        is_durable=common.is_durable,
        msg_backlog=backlog,
        backlog_size_bytes=common.backlog_size_bytes,
        unacked_messages=common.unacked_messages,
        mark_delete_position=common.mark_delete_position,
        msg_rate_out=s.out.message_rate,
        msg_throughput_out=s.out.byte_rate,
        bytes_out_counter=s.out.bytes_total,
        msg_out_counter=s.out.messages_total,
        msg_rate_redeliver=s.redelivered.message_rate,
        msg_rate_expired=s.expired.message_rate,
        total_msg_expired=s.expired.messages_total,
        chunked_message_rate=s.chunks_out.message_rate,
        consumers=consumers,
        msg_delayed=s.delayed_messages,
    )


# ---- internal stats -------------------------------------------------------------------------------


def internal_stats(topic: Topic) -> InternalStats:
    ledger = topic.ledger
    ledgers = ledger.ledgers()
    current = ledgers[-1] if ledgers else None
    last = ledger.last_confirmed
    return InternalStats(
        entries_added_counter=topic.rate_in.messages_total,
        number_of_entries=ledger.entries_total,
        total_size_bytes=ledger.size_bytes,
        current_ledger_entries=current.entries if current else 0,
        current_ledger_size_bytes=current.size_bytes if current else 0,
        pending_add_entries=ledger.pending_appends,
        last_confirmed_entry=last if last is not None else Position(ledger.current_ledger_id, -1),
        ledgers=tuple(LedgerStats(i.ledger_id, i.entries, i.size_bytes, i.offloaded_ms is not None) for i in ledgers),
        cursors={name: _cursor_stats(topic, cursor, s) for name, cursor, s in topic.cursors(replicators=True)},
    )


def _cursor_stats(topic: Topic, cursor: ManagedCursor, s: Subscription | None) -> CursorStats:
    md = cursor.mark_delete_position
    last = topic.ledger.last_confirmed
    since = topic.ledger.count_entries(md, last) if last is not None and last > md else 0
    return CursorStats(
        mark_delete_position=md,
        read_position=s.read_position if s is not None else md,
        messages_consumed_counter=s.out.messages_total if s else 0,
        individually_acked=tuple(cursor.individually_acked.ranges()),
        entries_since_mark_delete=since,
        active=bool(s and s.consumers),
    )
