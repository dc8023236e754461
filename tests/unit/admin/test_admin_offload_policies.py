"""Namespace offload policies through the admin API (TS-7): each setting's GET / PUT / DELETE with
Pulsar's "not set" answers, a setting alone and its offloadPolicies field kept as one, refusals,
and the policy each topic gets from its namespace over the broker's settings (what storage's
offload check asks the broker for)."""

from __future__ import annotations

import json
from pathlib import Path

from admin_harness import Admin

from velamq.broker.service._offload_policies import TopicOffloadPolicies
from velamq.metadata import MetadataStore
from velamq.metadata import _offload_policies as O
from velamq.storage import OffloadPolicy

NS = "/admin/v2/namespaces/public/default"


def value(admin: Admin, path: str) -> object:
    reply = admin.request("GET", f"{NS}/{path}")
    assert reply.status in (200, 204), reply
    return reply.json() if reply.status == 200 else None


def put(admin: Admin, path: str, body: object, method: str = "PUT") -> int:
    return admin.request(method, f"{NS}/{path}", json.dumps(body)).status


def test_each_setting_alone_with_pulsars_not_set(admin: Admin) -> None:
    assert value(admin, "offloadThreshold") == -1
    assert value(admin, "offloadThresholdInSeconds") == -1
    assert value(admin, "offloadDeletionLagMs") is None
    assert value(admin, "offloadPolicies") is None
    assert put(admin, "offloadThreshold", 1 << 30) == 204
    assert put(admin, "offloadThresholdInSeconds", "3600", method="POST") == 204  # digits as Jackson takes them
    assert put(admin, "offloadDeletionLagMs", -1) == 204  # negative: local copies kept
    assert (value(admin, "offloadThreshold"), value(admin, "offloadThresholdInSeconds")) == (1 << 30, 3600)
    assert value(admin, "offloadDeletionLagMs") == -1
    assert admin.policy(O.NS_OFFLOAD_THRESHOLD) == 1 << 30
    assert admin.request("DELETE", f"{NS}/offloadDeletionLagMs").status == 204
    assert value(admin, "offloadDeletionLagMs") is None
    assert admin.request("DELETE", f"{NS}/offloadThreshold").status == 204
    assert value(admin, "offloadThreshold") == -1
    assert put(admin, "offloadThreshold", 1.5) == 400
    assert admin.request("PUT", f"{NS}/offloadThreshold").status == 400
    assert admin.request("GET", "/admin/v2/namespaces/public/nothing/offloadThreshold").status == 404


def test_offload_policies_need_an_offload_driver_on_the_broker(admin: Admin) -> None:
    reply = admin.request("POST", f"{NS}/offloadPolicies", json.dumps({"managedLedgerOffloadDriver": "filesystem"}))
    assert reply.status == 412 and b"not configured" in reply.body
    reply = admin.request("POST", f"{NS}/offloadPolicies", "null")
    assert reply.status == 412 and b"must be specified" in reply.body
    reply = admin.request("POST", f"{NS}/offloadPolicies", json.dumps({"managedLedgerOffloadDriver": "azureblob",
                                                                       "managedLedgerOffloadBucket": "b"}))
    assert reply.status == 412 and b"filesystem and aws-s3" in reply.body
    assert admin.request("DELETE", f"{NS}/removeOffloadPolicies").status == 204
    topic = "/admin/v2/persistent/public/default/has-policies"
    assert admin.request("GET", f"{topic}/offloadPolicies").status == 404  # no such topic
    assert admin.request("PUT", topic).status == 204
    assert admin.request("GET", f"{topic}/offloadPolicies").status == 204
    reply = admin.request("POST", f"{topic}/offloadPolicies", json.dumps({"managedLedgerOffloadDriver": "filesystem"}))
    assert reply.status == 412 and b"not configured" in reply.body
    assert admin.request("DELETE", f"{topic}/offloadPolicies").status == 204
    assert admin.request("GET", "/admin/v2/non-persistent/public/default/np/offloadPolicies").status == 405


def test_each_topic_gets_its_namespace_policy_over_the_brokers(tmp_path: Path) -> None:
    import asyncio

    broker = OffloadPolicy(threshold_bytes=-1, threshold_s=-1, deletion_lag_ms=14_400_000)

    async def main() -> dict[str, OffloadPolicy]:
        store = MetadataStore(tmp_path / "metadata.db")
        await store.start()
        try:
            for ns in ("public/a", "public/b", "public/c"):
                await store.create_namespace(ns)
            await store.set_policy("public/a", O.NS_OFFLOAD_THRESHOLD, 0)
            await store.set_policy("public/a", O.NS_OFFLOAD_DELETION_LAG, -1)
            # b: the offloadPolicies field wins over the older field; -1 there is a value (no offload)
            await store.set_policy("public/b", O.NS_OFFLOAD_THRESHOLD, 10)
            await store.set_policy("public/b", O.NS_OFFLOAD_POLICIES, {
                O.DRIVER: "filesystem", O.THRESHOLD_BYTES: -1, O.THRESHOLD_S: 60})
            await store.set_policy("public/c", O.NS_OFFLOAD_THRESHOLD, -1)  # Pulsar's "not set"
            # A topic's own: its fields over its namespace's, for its partitions too.
            await store.create_partitioned_topic("persistent://public/a/own", 2)
            await store.set_topic_policy("persistent://public/a/own", O.TOPIC_OFFLOAD_POLICIES, {
                O.DRIVER: "filesystem", O.THRESHOLD_S: 30})
            source = TopicOffloadPolicies(store, broker)
            return await source([
                "persistent://public/a/t", "persistent://public/a/u-partition-3", "persistent://public/b/t",
                "persistent://public/a/own-partition-1",
                "persistent://public/c/t", "persistent://public/gone/t", "not a topic name",
            ])
        finally:
            await store.close()

    policies = asyncio.run(main())
    assert policies == {
        "persistent://public/a/t": OffloadPolicy(0, -1, -1),
        "persistent://public/a/u-partition-3": OffloadPolicy(0, -1, -1),
        "persistent://public/b/t": OffloadPolicy(-1, 60, 14_400_000),
        "persistent://public/a/own-partition-1": OffloadPolicy(0, 30, -1),
    }
