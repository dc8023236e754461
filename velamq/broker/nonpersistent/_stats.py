"""Figures of a loaded non-persistent topic: Pulsar's NonPersistentTopicStats, and its metrics.

NonPersistentTopicStats is TopicStats plus `msgDropRate` on the topic, each publisher and each
subscription (Pulsar's NonPersistentTopicStats, NonPersistentPublisherStats and
NonPersistentSubscriptionStats). A non-persistent topic has no storage, backlog, cursor or
deduplication: those figures are 0 or empty, as in Pulsar. Publishers never drop here (velamq
hands each SEND to the subscriptions in the same call, so Pulsar's cap on non-persistent messages
in flight per connection is never reached): their msgDropRate is 0; subscriptions drop what no
consumer could take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from velamq._topic_name import TopicName
from velamq.broker.nonpersistent._subscription import NON_PERSISTENT_POSITION, NonPersistentSubscription
from velamq.broker.nonpersistent._topic import NonPersistentTopic
from velamq.broker.stats._records import (
    NamespaceMetrics,
    SubscriptionMetrics,
    SubscriptionStats,
    TopicMetrics,
    TopicStats,
)
from velamq.broker.stats._topic_stats import consumer_stats, publisher_stats


@dataclass(frozen=True, slots=True)
class NonPersistentTopicStats:
    """A non-persistent topic's TopicStats and its drop rates (messages per second, over the last
    sampling interval): per subscription by name, per publisher by producer name."""

    stats: TopicStats
    subscription_drop_rates: Mapping[str, float]
    publisher_drop_rates: Mapping[str, float]

    @property
    def msg_drop_rate(self) -> float:
        """The topic's: what its publishers and subscriptions dropped."""
        return sum(self.subscription_drop_rates.values()) + sum(self.publisher_drop_rates.values())


def non_persistent_topic_stats(topic: NonPersistentTopic) -> NonPersistentTopicStats:
    rate_in = topic.rate_in
    stats = TopicStats(
        msg_rate_in=rate_in.message_rate,
        msg_throughput_in=rate_in.byte_rate,
        bytes_in_counter=rate_in.bytes_total,
        msg_in_counter=rate_in.messages_total,
        average_msg_size=rate_in.bytes_total / rate_in.messages_total if rate_in.messages_total else 0.0,
        msg_chunk_published=topic.chunks_published > 0,
        storage_size_bytes=0,
        backlog_size_bytes=0,
        publishers=tuple(publisher_stats(p) for p in topic.producers.values()),
        subscriptions={name: _subscription_stats(s) for name, s in topic.subscriptions.items()},
        deduplication_enabled=False,
        topic_epoch=topic.topic_epoch,
        non_contiguous_deleted_ranges=0,
    )
    return NonPersistentTopicStats(
        stats=stats,
        subscription_drop_rates={name: s.drops.message_rate for name, s in topic.subscriptions.items()},
        publisher_drop_rates=dict.fromkeys(topic.producers, 0.0),
    )


def _subscription_stats(s: NonPersistentSubscription) -> SubscriptionStats:
    consumers = tuple(consumer_stats(c, s.is_active(c)) for c in s.consumers)  # never anything unacked
    return SubscriptionStats(
        type=s.sub_type.pulsar_name,
        is_durable=s.durable,
        msg_backlog=0,
        backlog_size_bytes=0,
        unacked_messages=0,
        mark_delete_position=NON_PERSISTENT_POSITION,
        msg_rate_out=s.out.message_rate,
        msg_throughput_out=s.out.byte_rate,
        bytes_out_counter=s.out.bytes_total,
        msg_out_counter=s.out.messages_total,
        consumers=consumers,
    )


def non_persistent_topic_metrics(topic: NonPersistentTopic) -> TopicMetrics:
    """The /metrics and console figures: no storage, no backlog."""
    subscriptions = tuple(
        SubscriptionMetrics(
            name=name,
            type=s.sub_type.pulsar_name,
            consumers=len(s.consumers),
            backlog_entries=0,
            unacked_messages=0,
            msg_out_total=s.out.messages_total,
            bytes_out_total=s.out.bytes_total,
            mark_delete_position="0:0",
            msg_rate_out=s.out.message_rate,
            msg_throughput_out=s.out.byte_rate,
        )
        for name, s in topic.subscriptions.items()
    )
    return TopicMetrics(
        topic=topic.full_name,
        producers=len(topic.producers),
        consumers=sum(m.consumers for m in subscriptions),
        msg_in_total=topic.rate_in.messages_total,
        bytes_in_total=topic.rate_in.bytes_total,
        msg_out_total=sum(m.msg_out_total for m in subscriptions),
        bytes_out_total=sum(m.bytes_out_total for m in subscriptions),
        storage_size_bytes=0,
        entries_total=0,
        backlog_entries=0,
        subscriptions=subscriptions,
        msg_rate_in=topic.rate_in.message_rate,
        msg_rate_out=sum(m.msg_rate_out for m in subscriptions),
        msg_throughput_in=topic.rate_in.byte_rate,
        msg_throughput_out=sum(m.msg_throughput_out for m in subscriptions),
    )


def with_non_persistent(
    namespaces: tuple[NamespaceMetrics, ...], topics: Iterable[TopicMetrics]
) -> tuple[NamespaceMetrics, ...]:
    """The per-namespace series of /metrics with the non-persistent topics' figures added (they
    have no storage and no backlog to add)."""
    by_name = {n.namespace: n for n in namespaces}
    for t in topics:
        namespace = TopicName.parse(t.topic).namespace
        n = by_name.get(namespace) or NamespaceMetrics(namespace, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        by_name[namespace] = replace(
            n,
            topics=n.topics + 1,
            subscriptions=n.subscriptions + len(t.subscriptions),
            producers=n.producers + t.producers,
            consumers=n.consumers + t.consumers,
            msg_in_total=n.msg_in_total + t.msg_in_total,
            bytes_in_total=n.bytes_in_total + t.bytes_in_total,
            msg_out_total=n.msg_out_total + t.msg_out_total,
            bytes_out_total=n.bytes_out_total + t.bytes_out_total,
            msg_rate_in=n.msg_rate_in + t.msg_rate_in,
            msg_rate_out=n.msg_rate_out + t.msg_rate_out,
            msg_throughput_in=n.msg_throughput_in + t.msg_throughput_in,
            msg_throughput_out=n.msg_throughput_out + t.msg_throughput_out,
        )
    return tuple(by_name.values())
