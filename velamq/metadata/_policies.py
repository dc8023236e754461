"""Namespace and topic policies: the names they are stored under and how a topic's are resolved.

Policies are stored as JSON with Apache Pulsar's field names, so that what the admin API shows and
what a Pulsar user expects are the same thing. A namespace keeps them in its Pulsar `Policies`
object, a topic in a `TopicPolicies` object (the two use different spellings, as in Pulsar):

    policy                  namespace key (Policies)          topic key (TopicPolicies)
    retention               retention_policies                retentionPolicies
                            {retentionTimeInMinutes, retentionSizeInMB}   (-1 = infinite, 0 = none)
    message TTL             message_ttl_in_seconds            messageTTLInSeconds        (0 = none)
    backlog quota           backlog_quota_map                 backLogQuotaMap
                            {"destination_storage" | "message_age":
                                {limit, limitSize, limitTime, policy}}                   (-1 = none)
    deduplication           deduplicationEnabled              deduplicationEnabled
    delayed delivery        delayed_delivery_policies         delayedDeliveryEnabled,
                            {active, tickTime, maxDeliveryDelayInMillis}  delayedDeliveryTickTimeMillis
    max message size        -                                 maxMessageSize   (0 = broker default)
    max producers           max_producers_per_topic           maxProducerPerTopic        (0 = unlimited)
    max consumers           max_consumers_per_topic           maxConsumerPerTopic        (0 = unlimited)
    max consumers / sub     max_consumers_per_subscription    maxConsumersPerSubscription (0 = unlimited)
    ack-hole redelivery     velamq_ack_hole_redelivery_ms     velamq_ack_hole_redelivery_ms (0 = off; BR-4)
    replication clusters    replication_clusters              replicationClusters   [cluster, ...] (RP-1)

A partition has no policies of its own: like Pulsar, velamq keeps a partitioned topic's policies
under the partitioned topic's name and every partition reads those.

`resolve_policies` gives a topic's effective policies: for each policy the topic's value if set,
else the namespace's, else the broker default. A stored value of the wrong type (a namespace
created with a hand-written policies body, say) counts as not set, so resolution never fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

BACKLOG_POLICIES: Final = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
DESTINATION_STORAGE: Final = "destination_storage"  # the size limit's entry in a backlog quota map
MESSAGE_AGE: Final = "message_age"  # the time limit's entry (Pulsar 2.9+)
BACKLOG_QUOTA_TYPES: Final = (DESTINATION_STORAGE, MESSAGE_AGE)

# Namespace-level keys: fields of Pulsar's Policies.
NS_RETENTION: Final = "retention_policies"
NS_MESSAGE_TTL: Final = "message_ttl_in_seconds"
NS_BACKLOG_QUOTA_MAP: Final = "backlog_quota_map"
NS_DEDUPLICATION: Final = "deduplicationEnabled"
NS_DELAYED_DELIVERY: Final = "delayed_delivery_policies"
NS_MAX_PRODUCERS: Final = "max_producers_per_topic"
NS_MAX_CONSUMERS: Final = "max_consumers_per_topic"
NS_MAX_CONSUMERS_PER_SUBSCRIPTION: Final = "max_consumers_per_subscription"
NS_ACK_HOLE_REDELIVERY: Final = "velamq_ack_hole_redelivery_ms"
NS_REPLICATION_CLUSTERS: Final = "replication_clusters"

# Topic-level keys: fields of Pulsar's TopicPolicies.
TOPIC_RETENTION: Final = "retentionPolicies"
TOPIC_MESSAGE_TTL: Final = "messageTTLInSeconds"
TOPIC_BACKLOG_QUOTA_MAP: Final = "backLogQuotaMap"
TOPIC_DEDUPLICATION: Final = "deduplicationEnabled"
TOPIC_MAX_MESSAGE_SIZE: Final = "maxMessageSize"
TOPIC_DELAYED_DELIVERY_ENABLED: Final = "delayedDeliveryEnabled"
TOPIC_DELAYED_DELIVERY_TICK_MS: Final = "delayedDeliveryTickTimeMillis"
TOPIC_MAX_PRODUCERS: Final = "maxProducerPerTopic"
TOPIC_MAX_CONSUMERS: Final = "maxConsumerPerTopic"
TOPIC_MAX_CONSUMERS_PER_SUBSCRIPTION: Final = "maxConsumersPerSubscription"
TOPIC_ACK_HOLE_REDELIVERY: Final = "velamq_ack_hole_redelivery_ms"
TOPIC_REPLICATION_CLUSTERS: Final = "replicationClusters"

# Pulsar's broker default for delayedDeliveryTickTimeMillis, shown when only `active` was given.
delayed_delivery_tick_ms_default: Final = 1000


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    limit_bytes: int = -1  # -1: no size limit
    limit_time_s: int = -1  # -1: no time limit
    policy: str = "producer_request_hold"  # | "producer_exception" | "consumer_backlog_eviction"

    @property
    def unlimited(self) -> bool:
        return self.limit_bytes < 0 and self.limit_time_s < 0


@dataclass(frozen=True, slots=True)
class Policies:
    retention_time_minutes: int = 0  # -1 = infinite
    retention_size_mb: int = 0  # -1 = infinite
    message_ttl_s: int = 0  # 0 = no TTL
    backlog_quota: BacklogQuota | None = None
    deduplication: bool = False
    delayed_delivery: bool = True
    max_message_bytes: int | None = None  # topic-level only; None = broker default
    max_producers: int = 0  # 0 = unlimited
    max_consumers: int = 0
    max_consumers_per_subscription: int = 0
    ack_hole_redelivery_ms: int = 0  # velamq's active redelivery of ack holes (BR-4); 0 = off
    replication_clusters: tuple[str, ...] = ()  # the clusters it replicates to, the local one included


# ---------------------------------------------------------------------------- JSON shapes


def retention_json(time_minutes: int, size_mb: int) -> dict[str, Any]:
    """Pulsar's RetentionPolicies."""
    return {"retentionTimeInMinutes": time_minutes, "retentionSizeInMB": size_mb}


def backlog_quota_json(limit_bytes: int, limit_time_s: int, policy: str) -> dict[str, Any]:
    """Pulsar's BacklogQuota; `limit` is the deprecated spelling of limitSize that older tools read."""
    return {"limit": limit_bytes, "limitSize": limit_bytes, "limitTime": limit_time_s, "policy": policy}


def delayed_delivery_json(active: bool, tick_ms: int, max_delay_ms: int = 0) -> dict[str, Any]:
    """Pulsar's DelayedDeliveryPolicies."""
    return {"active": active, "tickTime": tick_ms, "maxDeliveryDelayInMillis": max_delay_ms}


# ---------------------------------------------------------------------------- reading stored values


def int_at_least(value: Any, minimum: int) -> int | None:
    """`value` if it is an integer >= minimum (not a bool), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    return None


def stored_retention(value: Any) -> tuple[int, int] | None:
    """(minutes, MB) of a stored RetentionPolicies, or None if absent or malformed."""
    if not isinstance(value, Mapping):
        return None
    minutes = int_at_least(value.get("retentionTimeInMinutes"), -1)
    size_mb = int_at_least(value.get("retentionSizeInMB"), -1)
    if minutes is None or size_mb is None:
        return None
    return minutes, size_mb


def stored_backlog_quota(value: Any) -> BacklogQuota | None:
    """One entry of a stored backlog quota map, or None if absent or malformed."""
    if not isinstance(value, Mapping):
        return None
    policy = value.get("policy", BACKLOG_POLICIES[0])
    if policy not in BACKLOG_POLICIES:
        return None
    size = value.get("limitSize", value.get("limit", -1))
    limit_bytes = int_at_least(size, -1)
    limit_time_s = int_at_least(value.get("limitTime", -1), -1)
    if limit_bytes is None or limit_time_s is None:
        return None
    return BacklogQuota(limit_bytes, limit_time_s, policy)


def _quota_entry(quota_map: Any, quota_type: str) -> BacklogQuota | None:
    return stored_backlog_quota(quota_map.get(quota_type)) if isinstance(quota_map, Mapping) else None


def _resolve_backlog_quota(
    namespace: Mapping[str, Any], topic: Mapping[str, Any], default: BacklogQuota | None
) -> BacklogQuota | None:
    """Each quota type resolves on its own (topic, then namespace), as in Pulsar; then the size
    limit comes from the destination_storage entry and the time limit from the message_age entry
    (or, velamq's shorthand, from a destination_storage entry that carries both)."""
    size_quota = _quota_entry(topic.get(TOPIC_BACKLOG_QUOTA_MAP), DESTINATION_STORAGE) or _quota_entry(
        namespace.get(NS_BACKLOG_QUOTA_MAP), DESTINATION_STORAGE
    )
    time_quota = _quota_entry(topic.get(TOPIC_BACKLOG_QUOTA_MAP), MESSAGE_AGE) or _quota_entry(
        namespace.get(NS_BACKLOG_QUOTA_MAP), MESSAGE_AGE
    )
    if size_quota is None and time_quota is None:
        return default
    base = default or BacklogQuota()
    limit_bytes = size_quota.limit_bytes if size_quota is not None else base.limit_bytes
    if time_quota is not None:
        limit_time_s = time_quota.limit_time_s
    elif size_quota is not None and size_quota.limit_time_s >= 0:
        limit_time_s = size_quota.limit_time_s
    else:
        limit_time_s = base.limit_time_s
    policy = (size_quota or time_quota or base).policy
    return BacklogQuota(limit_bytes, limit_time_s, policy)


def _first(*values: Any) -> Any:
    """The first value that is not None (the last one is the default and may be None)."""
    for value in values[:-1]:
        if value is not None:
            return value
    return values[-1]


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _clusters(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(c, str) for c in value):
        return tuple(value)
    return None


def _delayed_active(value: Any) -> bool | None:
    return _bool(value.get("active")) if isinstance(value, Mapping) else None


def resolve_policies(namespace: Mapping[str, Any], topic: Mapping[str, Any] | None, defaults: Policies) -> Policies:
    """A topic's effective policies: topic overrides namespace overrides broker default, field by field.

    `namespace` is the namespace's stored policies (MetadataStore.get_policies), `topic` the
    topic's (MetadataStore.get_topic_policies) or None, `defaults` the broker's configuration.
    """
    ns: Mapping[str, Any] = namespace or {}
    tp: Mapping[str, Any] = topic or {}
    retention = _first(stored_retention(tp.get(TOPIC_RETENTION)), stored_retention(ns.get(NS_RETENTION)), None)
    max_message = int_at_least(tp.get(TOPIC_MAX_MESSAGE_SIZE), 1)  # 0 means "the broker's", as in Pulsar
    return Policies(
        retention_time_minutes=retention[0] if retention else defaults.retention_time_minutes,
        retention_size_mb=retention[1] if retention else defaults.retention_size_mb,
        message_ttl_s=_first(
            int_at_least(tp.get(TOPIC_MESSAGE_TTL), 0), int_at_least(ns.get(NS_MESSAGE_TTL), 0), defaults.message_ttl_s
        ),
        backlog_quota=_resolve_backlog_quota(ns, tp, defaults.backlog_quota),
        deduplication=_first(
            _bool(tp.get(TOPIC_DEDUPLICATION)), _bool(ns.get(NS_DEDUPLICATION)), defaults.deduplication
        ),
        delayed_delivery=_first(
            _bool(tp.get(TOPIC_DELAYED_DELIVERY_ENABLED)),
            _delayed_active(ns.get(NS_DELAYED_DELIVERY)),
            defaults.delayed_delivery,
        ),
        max_message_bytes=max_message if max_message is not None else defaults.max_message_bytes,
        max_producers=_first(
            int_at_least(tp.get(TOPIC_MAX_PRODUCERS), 0), int_at_least(ns.get(NS_MAX_PRODUCERS), 0),
            defaults.max_producers,
        ),
        max_consumers=_first(
            int_at_least(tp.get(TOPIC_MAX_CONSUMERS), 0), int_at_least(ns.get(NS_MAX_CONSUMERS), 0),
            defaults.max_consumers,
        ),
        max_consumers_per_subscription=_first(
            int_at_least(tp.get(TOPIC_MAX_CONSUMERS_PER_SUBSCRIPTION), 0),
            int_at_least(ns.get(NS_MAX_CONSUMERS_PER_SUBSCRIPTION), 0),
            defaults.max_consumers_per_subscription,
        ),
        ack_hole_redelivery_ms=_first(
            int_at_least(tp.get(TOPIC_ACK_HOLE_REDELIVERY), 0),
            int_at_least(ns.get(NS_ACK_HOLE_REDELIVERY), 0),
            defaults.ack_hole_redelivery_ms,
        ),
        replication_clusters=_first(
            _clusters(tp.get(TOPIC_REPLICATION_CLUSTERS)), _clusters(ns.get(NS_REPLICATION_CLUSTERS)),
            defaults.replication_clusters,
        ),
    )

