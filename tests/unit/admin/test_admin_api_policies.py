"""Namespace and topic policies over REST: paths, shapes, status codes, storage and resolution (WC-4, BR-3..BR-6)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from admin_harness import Admin, Reply

from velamq._bundles import NamespaceBundles
from velamq._topic_name import TopicName
from velamq.metadata import Policies

NS = "/admin/v2/namespaces/public/default"
T = "/admin/v2/persistent/public/default/t"
FULL = "persistent://public/default/t"


def assert_error(reply: Reply, status: int, reason: str = "") -> None:
    assert reply.status == status, reply
    assert reason in reply.json()["reason"]


def post(admin: Admin, path: str, value: Any) -> Reply:
    return admin.request("POST", path, json.dumps(value))


def loaded_topic_policies(admin: Admin) -> tuple[Policies, Policies]:
    """(the policies the broker's loaded topic t works with, the policies resolved from the store
    now); loads the topic if it is not."""
    broker = admin.broker.server.broker

    async def read() -> tuple[Policies, Policies]:
        topic = await broker.get_topic(TopicName.parse(FULL), create=False)
        return topic.policies, await broker.policies_for(topic.name)

    return admin.run(read())


# (namespace path, stored key, value to set, REST value read back)
NAMESPACE_CASES = [
    ("retention", "retention_policies", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024},
     {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024}),
    ("messageTTL", "message_ttl_in_seconds", 3600, 3600),
    ("deduplication", "deduplicationEnabled", True, True),
    ("delayedDelivery", "delayed_delivery_policies", {"active": False, "tickTime": 500},
     {"active": False, "tickTime": 500, "maxDeliveryDelayInMillis": 0}),
    ("maxProducersPerTopic", "max_producers_per_topic", 3, 3),
    ("maxConsumersPerTopic", "max_consumers_per_topic", 4, 4),
    ("maxConsumersPerSubscription", "max_consumers_per_subscription", 5, 5),
    ("ackHoleRedelivery", "velamq_ack_hole_redelivery_ms", 30000, 30000),
]


@pytest.mark.parametrize(("path", "key", "value", "shown"), NAMESPACE_CASES)
def test_namespace_policy_get_set_remove(admin: Admin, path: str, key: str, value: Any, shown: Any) -> None:
    assert admin.request("PUT", T).status == 204
    before, _ = loaded_topic_policies(admin)
    assert admin.request("GET", f"{NS}/{path}").status == 204  # never set: null, as Pulsar answers
    assert post(admin, f"{NS}/{path}", value).status == 204
    assert admin.request("GET", f"{NS}/{path}").json() == shown
    assert admin.policy(key) == shown  # stored under Pulsar's Policies name
    assert admin.request("GET", NS).json()[key] == shown  # and shown in the namespace's policies
    live, resolved = loaded_topic_policies(admin)
    assert live == resolved != before  # the broker was told: its loaded topic works with the new value
    assert admin.request("DELETE", f"{NS}/{path}").status == 204
    assert admin.request("GET", f"{NS}/{path}").status == 204
    assert admin.policy(key) is None
    assert loaded_topic_policies(admin)[0] == before


@pytest.mark.parametrize("path", [case[0] for case in NAMESPACE_CASES])
def test_namespace_policy_unknown_namespace_is_404(admin: Admin, path: str) -> None:
    assert_error(admin.request("GET", f"/admin/v2/namespaces/public/nope/{path}"), 404)
    value = next(case[2] for case in NAMESPACE_CASES if case[0] == path)
    assert_error(post(admin, f"/admin/v2/namespaces/public/nope/{path}", value), 404)
    assert_error(admin.request("DELETE", f"/admin/v2/namespaces/public/nope/{path}"), 404)


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 0}, 412),  # one limit 0
        ("retention", {"retentionTimeInMinutes": -2, "retentionSizeInMB": 5}, 412),
        ("retention", {"retentionTimeInMinutes": "x"}, 400),
        ("retention", 5, 400),
        ("messageTTL", -1, 412),
        ("messageTTL", "soon", 400),
        ("maxProducersPerTopic", -1, 412),
        ("maxConsumersPerTopic", 1.5, 400),
        ("deduplication", "maybe", 400),
        ("delayedDelivery", {"active": "sure"}, 400),
        ("delayedDelivery", {"active": True, "tickTime": -5}, 412),
        ("ackHoleRedelivery", -10, 412),
    ],
)
def test_namespace_policy_bad_values(admin: Admin, path: str, body: Any, status: int) -> None:
    assert_error(post(admin, f"{NS}/{path}", body), status)


def test_namespace_policy_needs_a_body(admin: Admin) -> None:
    assert_error(admin.request("POST", f"{NS}/messageTTL", ""), 400)


def test_retention_accepts_infinite_and_disabled(admin: Admin) -> None:
    assert post(admin, f"{NS}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).status == 204
    assert post(admin, f"{NS}/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}).status == 204
    assert post(admin, f"{NS}/messageTTL", "60").status == 204  # a string of digits, as Jackson takes
    assert admin.policy("message_ttl_in_seconds") == 60


# ----------------------------------------------------------------------------- backlog quota


def test_namespace_backlog_quota(admin: Admin) -> None:
    assert admin.request("GET", f"{NS}/backlogQuotaMap").json() == {}
    quota = {"limitSize": 10 << 30, "limitTime": 3600, "policy": "producer_exception"}
    assert post(admin, f"{NS}/backlogQuota", quota).status == 204
    shown = {"limit": 10 << 30, "limitSize": 10 << 30, "limitTime": 3600, "policy": "producer_exception"}
    assert admin.request("GET", f"{NS}/backlogQuotaMap").json() == {"destination_storage": shown}
    age = {"limitTime": 60, "policy": "consumer_backlog_eviction"}
    assert post(admin, f"{NS}/backlogQuota?backlogQuotaType=message_age", age).status == 204
    assert set(admin.request("GET", f"{NS}/backlogQuotaMap").json()) == {"destination_storage", "message_age"}
    assert admin.request("DELETE", f"{NS}/backlogQuota").status == 204
    assert set(admin.request("GET", f"{NS}/backlogQuotaMap").json()) == {"message_age"}
    assert admin.request("DELETE", f"{NS}/backlogQuota?backlogQuotaType=message_age").status == 204
    assert admin.request("GET", f"{NS}/backlogQuotaMap").json() == {}
    assert admin.policy("backlog_quota_map") is None


def test_backlog_quota_errors(admin: Admin) -> None:
    assert_error(post(admin, f"{NS}/backlogQuota", {"limitSize": 1, "policy": "drop_everything"}), 400)
    assert_error(post(admin, f"{NS}/backlogQuota?backlogQuotaType=weekly", {"limitSize": 1}), 400)
    assert_error(post(admin, f"{NS}/backlogQuota", {"limitSize": -7}), 412)
    assert_error(post(admin, "/admin/v2/namespaces/public/nope/backlogQuota", {"limitSize": 1}), 404)
    assert_error(admin.request("GET", "/admin/v2/namespaces/public/nope/backlogQuotaMap"), 404)


def test_retention_must_exceed_backlog_quota(admin: Admin) -> None:
    assert post(admin, f"{NS}/backlogQuota", {"limitSize": 2 << 20, "policy": "producer_request_hold"}).status == 204
    reply = post(admin, f"{NS}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1})
    assert_error(reply, 412, "Retention Quota must exceed configured backlog quota")
    assert post(admin, f"{NS}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": 3}).status == 204
    assert_error(post(admin, f"{NS}/backlogQuota", {"limitSize": 4 << 20}), 412, "Backlog Quota exceeds")


# ----------------------------------------------------------------------------- namespace creation


def test_create_namespace_with_policies_checks_them(admin: Admin) -> None:
    body = {"message_ttl_in_seconds": 30, "retention_policies": {"retentionTimeInMinutes": 5, "retentionSizeInMB": 5},
            "backlog_quota_map": {"destination_storage": {"limitSize": 100, "policy": "producer_exception"}},
            "bundles": {"numBundles": 8}}
    assert admin.request("PUT", "/admin/v2/namespaces/public/withp", json.dumps(body)).status == 204
    stored = admin.run(admin.metadata.get_policies("public/withp"))
    assert stored["message_ttl_in_seconds"] == 30
    assert stored["backlog_quota_map"]["destination_storage"]["limitSize"] == 100
    assert stored["bundles"] == NamespaceBundles.even(8).to_policy()  # Pulsar's BundlesData, boundaries filled in
    bad = {"message_ttl_in_seconds": -4}
    assert_error(admin.request("PUT", "/admin/v2/namespaces/public/bad", json.dumps(bad)), 412)
    assert_error(admin.request("PUT", "/admin/v2/namespaces/public/bad2", '{"backlog_quota_map": {"x": {}}}'), 400)
    assert admin.request("GET", "/admin/v2/namespaces/public").json() == ["public/default", "public/withp"]


# ----------------------------------------------------------------------------- topic level


# (topic path, TopicPolicies keys stored, value to set, REST value read back, applied value with nothing set)
TOPIC_CASES = [
    ("retention", {"retentionPolicies"}, {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1},
     {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}, {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}),
    ("messageTTL", {"messageTTLInSeconds"}, 10, 10, 0),
    ("deduplicationEnabled", {"deduplicationEnabled"}, True, True, False),
    ("delayedDelivery", {"delayedDeliveryEnabled", "delayedDeliveryTickTimeMillis", "delayedDeliveryMaxDelayInMillis"},
     {"active": False, "tickTime": 100}, {"active": False, "tickTime": 100, "maxDeliveryDelayInMillis": 0},
     {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}),
    ("maxMessageSize", {"maxMessageSize"}, 1024, 1024, 5 << 20),
    ("maxProducers", {"maxProducerPerTopic"}, 2, 2, 0),
    ("maxConsumers", {"maxConsumerPerTopic"}, 3, 3, 0),
    ("maxConsumersPerSubscription", {"maxConsumersPerSubscription"}, 1, 1, 0),
    ("ackHoleRedelivery", {"velamq_ack_hole_redelivery_ms"}, 500, 500, 0),
]


@pytest.mark.parametrize(("path", "keys", "value", "shown", "default"), TOPIC_CASES)
def test_topic_policy_get_set_remove(
    admin: Admin, path: str, keys: set[str], value: Any, shown: Any, default: Any
) -> None:
    assert admin.request("PUT", T).status == 204
    before, _ = loaded_topic_policies(admin)
    assert admin.request("GET", f"{T}/{path}").status == 204
    assert admin.request("GET", f"{T}/{path}?applied=true").json() == default  # the broker's
    assert post(admin, f"{T}/{path}", value).status == 204
    assert admin.request("GET", f"{T}/{path}").json() == shown
    assert admin.request("GET", f"{T}/{path}?applied=true").json() == shown
    assert set(admin.run(admin.metadata.get_topic_policies(FULL))) == keys
    live, resolved = loaded_topic_policies(admin)
    assert live == resolved != before
    assert admin.request("DELETE", f"{T}/{path}").status == 204
    assert admin.request("GET", f"{T}/{path}").status == 204
    assert admin.run(admin.metadata.get_topic_policies(FULL)) == {}


def test_topic_message_ttl_as_query_parameter(admin: Admin) -> None:
    """Pulsar's Java client sends the topic TTL as ?messageTTL=N with an empty body."""
    assert admin.request("PUT", T).status == 204
    assert admin.request("POST", f"{T}/messageTTL?messageTTL=42", "").status == 204
    assert admin.request("GET", f"{T}/messageTTL").json() == 42


def test_applied_values_fall_back_to_the_namespace(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    assert post(admin, f"{NS}/messageTTL", 77).status == 204
    assert post(admin, f"{NS}/maxProducersPerTopic", 9).status == 204
    assert admin.request("GET", f"{T}/messageTTL").status == 204
    assert admin.request("GET", f"{T}/messageTTL?applied=true").json() == 77
    assert admin.request("GET", f"{T}/maxProducers?applied=true").json() == 9
    assert post(admin, f"{T}/messageTTL", 0).status == 204  # 0 on the topic wins over the namespace
    assert admin.request("GET", f"{T}/messageTTL?applied=true").json() == 0


def test_topic_policies_of_a_partitioned_topic_and_its_partitions(admin: Admin) -> None:
    assert admin.request("PUT", "/admin/v2/persistent/public/default/pt/partitions", "3").status == 204
    assert post(admin, "/admin/v2/persistent/public/default/pt/maxConsumers", 5).status == 204
    # A partition reads (and writes) its partitioned topic's policies, as in Pulsar.
    assert admin.request("GET", "/admin/v2/persistent/public/default/pt-partition-2/maxConsumers").json() == 5
    assert_error(admin.request("GET", "/admin/v2/persistent/public/default/pt-partition-3/maxConsumers"), 404)


def test_topic_backlog_quota(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    assert admin.request("GET", f"{T}/backlogQuotaMap").json() == {}
    assert post(admin, f"{NS}/backlogQuota", {"limitSize": 100, "policy": "producer_exception"}).status == 204
    applied = admin.request("GET", f"{T}/backlogQuotaMap?applied=true").json()
    assert applied["destination_storage"]["limitSize"] == 100
    assert post(admin, f"{T}/backlogQuota", {"limitSize": 50, "policy": "consumer_backlog_eviction"}).status == 204
    assert admin.request("GET", f"{T}/backlogQuotaMap").json()["destination_storage"]["limitSize"] == 50
    applied = admin.request("GET", f"{T}/backlogQuotaMap?applied=true").json()
    assert applied["destination_storage"]["policy"] == "consumer_backlog_eviction"
    assert admin.request("DELETE", f"{T}/backlogQuota").status == 204
    assert admin.run(admin.metadata.get_topic_policies(FULL)) == {}


def test_topic_policy_errors(admin: Admin) -> None:
    assert_error(admin.request("GET", f"{T}/retention"), 404)  # no such topic
    assert_error(post(admin, f"{T}/messageTTL", 5), 404)
    assert_error(admin.request("GET", "/admin/v2/persistent/public/nope/t/retention"), 404)
    assert_error(admin.request("GET", "/admin/v2/persistent/public/default/a%2Fb/retention"), 412)
    assert admin.request("PUT", T).status == 204
    assert_error(post(admin, f"{T}/maxMessageSize", -1), 412)
    assert_error(post(admin, f"{T}/maxMessageSize", 10 << 20), 412)  # above the broker's 5 MiB
    assert_error(post(admin, f"{T}/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 5}), 412)
    assert_error(admin.request("POST", f"{T}/messageTTL?messageTTL=abc", ""), 400)
    assert_error(admin.request("PUT", f"{T}/retention", "{}"), 405)


def test_deleting_a_topic_removes_its_policies(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    assert post(admin, f"{T}/messageTTL", 5).status == 204
    assert admin.request("DELETE", T).status == 204
    assert admin.run(admin.metadata.list_topic_policies("public/default")) == []
