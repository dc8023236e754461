"""The /metrics scrape's snapshot: the loaded topics summed per namespace, or listed one by one.

With `expose_topic_level_metrics` off (Pulsar's exposeTopicLevelMetricsInPrometheus=false), or
with more topics loaded than its cap (_topic_metrics_cap.py), the scrape carries one
NamespaceMetrics per namespace with loaded topics, so its size does not grow with the number of
topics. Either way the loaded topics are visited a slice at a time, with the
loop free in between: at hundreds of thousands of loaded topics a scrape never holds it for long.
Unloaded topics are not visited at all (as in Pulsar, a topic's figures are those of the broker
that has it loaded).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from velamq.broker._rates import NO_RATE
from velamq.broker.stats._records import NamespaceMetrics, TopicMetrics
from velamq.broker.stats._topic_stats import topic_metrics
from velamq.broker.topic._topic import Topic

# Topics visited between two yields to the loop.
slice_topics = 2000


@dataclass(slots=True)
class _Totals:
    """A namespace's sums while the scrape visits its topics."""

    topics: int = 0
    subscriptions: int = 0
    producers: int = 0
    consumers: int = 0
    msg_in: int = 0
    bytes_in: int = 0
    msg_out: int = 0
    bytes_out: int = 0
    storage: int = 0
    entries: int = 0
    backlog: int = 0
    backlog_bytes: float = 0.0
    rate_in: float = 0.0
    rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0

    def add_topic(self, topic: Topic) -> None:
        ledger = topic.ledger
        entries = ledger.entries_total
        size = ledger.size_bytes
        self.topics += 1
        self.storage += size
        self.entries += entries
        self.producers += len(topic.producers)
        rate = topic.rate_in
        if rate is not NO_RATE:
            self.msg_in += rate.messages_total
            self.bytes_in += rate.bytes_total
            self.rate_in += rate.message_rate
            self.throughput_in += rate.byte_rate
        cursors = ledger.cursors
        live = topic.subscriptions
        self.subscriptions += len(cursors) + sum(1 for name in live if name not in cursors)
        largest = 0
        for cursor in cursors.values():
            backlog = cursor.backlog
            self.backlog += backlog
            largest = max(largest, backlog)
        for name, subscription in live.items():
            self.consumers += len(subscription.consumers)
            if name not in cursors:
                backlog = subscription.backlog
                self.backlog += backlog
                largest = max(largest, backlog)
            out = subscription.out
            if out is not NO_RATE:
                self.msg_out += out.messages_total
                self.bytes_out += out.bytes_total
                self.rate_out += out.message_rate
                self.throughput_out += out.byte_rate
        if largest and entries:
            self.backlog_bytes += largest * size / entries

    def add_metrics(self, topic: TopicMetrics) -> None:
        self.topics += 1
        self.subscriptions += len(topic.subscriptions)
        self.producers += topic.producers
        self.consumers += topic.consumers
        self.msg_in += topic.msg_in_total
        self.bytes_in += topic.bytes_in_total
        self.msg_out += topic.msg_out_total
        self.bytes_out += topic.bytes_out_total
        self.storage += topic.storage_size_bytes
        self.entries += topic.entries_total
        self.backlog += sum(s.backlog_entries for s in topic.subscriptions)
        self.backlog_bytes += topic.backlog_size_bytes
        self.rate_in += topic.msg_rate_in
        self.rate_out += topic.msg_rate_out
        self.throughput_in += topic.msg_throughput_in
        self.throughput_out += topic.msg_throughput_out

    def metrics(self, namespace: str) -> NamespaceMetrics:
        return NamespaceMetrics(
            namespace=namespace,
            topics=self.topics,
            subscriptions=self.subscriptions,
            producers=self.producers,
            consumers=self.consumers,
            msg_in_total=self.msg_in,
            bytes_in_total=self.bytes_in,
            msg_out_total=self.msg_out,
            bytes_out_total=self.bytes_out,
            storage_size_bytes=self.storage,
            entries_total=self.entries,
            backlog_entries=self.backlog,
            backlog_size_bytes=int(self.backlog_bytes),
            msg_rate_in=self.rate_in,
            msg_rate_out=self.rate_out,
            msg_throughput_in=self.throughput_in,
            msg_throughput_out=self.throughput_out,
        )


async def collect(
    topics: Sequence[Topic], per_topic: bool
) -> tuple[tuple[NamespaceMetrics, ...], tuple[TopicMetrics, ...]]:
    """Per-namespace sums of the given loaded topics, and (per_topic) each topic's figures."""
    totals: dict[tuple[str, str], _Totals] = {}
    listed: list[TopicMetrics] = []
    for start in range(0, len(topics), slice_topics):
        if start:
            await asyncio.sleep(0)
        for topic in topics[start:start + slice_topics]:
            if topic.closed:
                continue
            name = topic.name
            key = (name.tenant, name.namespace_part)
            sums = totals.get(key)
            if sums is None:
                sums = totals[key] = _Totals()
            if per_topic:
                figures = topic_metrics(topic)
                listed.append(figures)
                sums.add_metrics(figures)
            else:
                sums.add_topic(topic)
    namespaces = tuple(sums.metrics(f"{tenant}/{ns}") for (tenant, ns), sums in sorted(totals.items()))
    return namespaces, tuple(listed)
