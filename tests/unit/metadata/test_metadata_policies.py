"""Policies: resolution topic > namespace > broker default, field by field (BR-3..BR-6, CH-5)."""

from __future__ import annotations

from typing import Any

import pytest

from velamq.metadata import BacklogQuota, Policies, resolve_policies
from velamq.metadata._policies import backlog_quota_json, delayed_delivery_json, retention_json

DEFAULTS = Policies(
    retention_time_minutes=5,
    retention_size_mb=10,
    message_ttl_s=3600,
    backlog_quota=BacklogQuota(1 << 30, -1, "producer_request_hold"),
    deduplication=False,
    delayed_delivery=True,
    max_message_bytes=None,
    max_producers=0,
    max_consumers=0,
    max_consumers_per_subscription=0,
    ack_hole_redelivery_ms=0,
)

NAMESPACE: dict[str, Any] = {
    "retention_policies": retention_json(60, 100),
    "message_ttl_in_seconds": 120,
    "backlog_quota_map": {"destination_storage": backlog_quota_json(2048, -1, "producer_exception")},
    "deduplicationEnabled": True,
    "delayed_delivery_policies": delayed_delivery_json(False, 1000),
    "max_producers_per_topic": 3,
    "max_consumers_per_topic": 4,
    "max_consumers_per_subscription": 5,
    "velamq_ack_hole_redelivery_ms": 30_000,
}

TOPIC: dict[str, Any] = {
    "retentionPolicies": retention_json(-1, -1),
    "messageTTLInSeconds": 0,
    "backLogQuotaMap": {"destination_storage": backlog_quota_json(4096, -1, "consumer_backlog_eviction")},
    "deduplicationEnabled": False,
    "maxMessageSize": 1024,
    "delayedDeliveryEnabled": True,
    "delayedDeliveryTickTimeMillis": 500,
    "maxProducerPerTopic": 7,
    "maxConsumerPerTopic": 8,
    "maxConsumersPerSubscription": 9,
    "velamq_ack_hole_redelivery_ms": 1_000,
}


def test_nothing_set_gives_the_broker_defaults() -> None:
    assert resolve_policies({}, None, DEFAULTS) == DEFAULTS
    assert resolve_policies({}, {}, Policies()) == Policies()


def test_namespace_overrides_defaults() -> None:
    assert resolve_policies(NAMESPACE, None, DEFAULTS) == Policies(
        retention_time_minutes=60,
        retention_size_mb=100,
        message_ttl_s=120,
        backlog_quota=BacklogQuota(2048, -1, "producer_exception"),
        deduplication=True,
        delayed_delivery=False,
        max_message_bytes=None,
        max_producers=3,
        max_consumers=4,
        max_consumers_per_subscription=5,
        ack_hole_redelivery_ms=30_000,
    )


def test_topic_overrides_namespace() -> None:
    assert resolve_policies(NAMESPACE, TOPIC, DEFAULTS) == Policies(
        retention_time_minutes=-1,
        retention_size_mb=-1,
        message_ttl_s=0,  # explicitly 0 on the topic: no TTL, even though the namespace has one
        backlog_quota=BacklogQuota(4096, -1, "consumer_backlog_eviction"),
        deduplication=False,
        delayed_delivery=True,
        max_message_bytes=1024,
        max_producers=7,
        max_consumers=8,
        max_consumers_per_subscription=9,
        ack_hole_redelivery_ms=1_000,
    )


@pytest.mark.parametrize("key", sorted(TOPIC))
def test_each_topic_field_overrides_alone(key: str) -> None:
    """Field by field: one topic setting changes only its own field (retention is one policy of two)."""
    base = resolve_policies(NAMESPACE, None, DEFAULTS)
    resolved = resolve_policies(NAMESPACE, {key: TOPIC[key]}, DEFAULTS)
    changed = {f for f in Policies.__slots__ if getattr(resolved, f) != getattr(base, f)}
    assert len(changed - {"retention_size_mb"}) <= 1, changed


def test_topic_max_message_size_zero_means_broker_default() -> None:
    assert resolve_policies({}, {"maxMessageSize": 0}, DEFAULTS).max_message_bytes is None
    assert resolve_policies({}, {"maxMessageSize": 0}, Policies(max_message_bytes=5)).max_message_bytes == 5


def test_malformed_values_count_as_unset() -> None:
    namespace = {
        "retention_policies": {"retentionTimeInMinutes": "x"},
        "message_ttl_in_seconds": -5,
        "backlog_quota_map": {"destination_storage": {"limitSize": 1, "policy": "nonsense"}},
        "deduplicationEnabled": "yes",
        "delayed_delivery_policies": [],
        "max_producers_per_topic": True,
        "max_consumers_per_topic": 1.5,
        "max_consumers_per_subscription": None,
        "velamq_ack_hole_redelivery_ms": {},
    }
    assert resolve_policies(namespace, {"retentionPolicies": 3, "backLogQuotaMap": []}, DEFAULTS) == DEFAULTS


def test_backlog_quota_size_and_time_entries_combine() -> None:
    ns = {"backlog_quota_map": {"destination_storage": backlog_quota_json(100, -1, "producer_exception")}}
    topic = {"backLogQuotaMap": {"message_age": backlog_quota_json(-1, 60, "producer_exception")}}
    assert resolve_policies(ns, topic, Policies()).backlog_quota == BacklogQuota(100, 60, "producer_exception")


def test_backlog_quota_one_entry_with_both_limits() -> None:
    """velamq's shorthand: one destination_storage entry carrying limitSize and limitTime."""
    ns = {"backlog_quota_map": {"destination_storage": backlog_quota_json(100, 30, "producer_request_hold")}}
    assert resolve_policies(ns, None, Policies()).backlog_quota == BacklogQuota(100, 30, "producer_request_hold")


def test_backlog_quota_old_limit_field_is_read() -> None:
    ns = {"backlog_quota_map": {"destination_storage": {"limit": 77, "policy": "producer_exception"}}}
    assert resolve_policies(ns, None, Policies()).backlog_quota == BacklogQuota(77, -1, "producer_exception")


def test_backlog_quota_default_fills_what_is_not_set() -> None:
    topic = {"backLogQuotaMap": {"message_age": backlog_quota_json(-1, 60, "consumer_backlog_eviction")}}
    quota = resolve_policies({}, topic, DEFAULTS).backlog_quota
    assert quota == BacklogQuota(1 << 30, 60, "consumer_backlog_eviction")
    assert resolve_policies({}, None, Policies()).backlog_quota is None
    assert BacklogQuota().unlimited and not BacklogQuota(limit_time_s=1).unlimited
