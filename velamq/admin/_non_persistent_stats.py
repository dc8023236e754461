"""A non-persistent topic's stats as Pulsar's JSON: NonPersistentTopicStats (WC-4).

Pulsar's NonPersistentTopicStats is its TopicStats plus `msgDropRate` on the topic, on each
publisher (NonPersistentPublisherStats) and on each subscription (NonPersistentSubscriptionStats);
the rest is TopicStats' JSON (_stats_json.py), with no storage, backlog or deduplication.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from velamq.admin._stats_json import partitioned_stats_of, topic_stats_json
from velamq.broker import NonPersistentTopicStats, TopicStats


def non_persistent_stats_json(s: NonPersistentTopicStats) -> dict[str, Any]:
    result = topic_stats_json(s.stats)
    for publisher in result["publishers"]:
        publisher["msgDropRate"] = s.publisher_drop_rates.get(publisher["producerName"], 0.0)
    for name, subscription in result["subscriptions"].items():
        subscription["msgDropRate"] = s.subscription_drop_rates.get(name, 0.0)
    result["msgDropRate"] = s.msg_drop_rate
    return result


def any_stats_json(s: TopicStats | NonPersistentTopicStats) -> dict[str, Any]:
    """TopicStats' JSON for a persistent topic, NonPersistentTopicStats' for a non-persistent one."""
    return non_persistent_stats_json(s) if isinstance(s, NonPersistentTopicStats) else topic_stats_json(s)


def any_partitioned_stats_json(partition_count: int, partitions: Mapping[str, Any]) -> dict[str, Any]:
    """PartitionedTopicStats from each partition's stats JSON (any_stats_json's, here or from the
    worker that owns the partition); for non-persistent partitions (Pulsar's
    NonPersistentPartitionedTopicStats) with the drop rates summed over the partitions."""
    result = partitioned_stats_of(partitions, partition_count)
    dropping = [p for p in partitions.values() if "msgDropRate" in p]
    if not dropping:
        return result
    result["msgDropRate"] = sum(p["msgDropRate"] for p in dropping)
    for sub_name, subscription in result["subscriptions"].items():
        subscription["msgDropRate"] = sum(
            p["subscriptions"].get(sub_name, {}).get("msgDropRate", 0.0) for p in dropping
        )
    return result
