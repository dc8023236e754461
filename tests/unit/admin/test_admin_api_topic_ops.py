"""Topic operations and subscriptions over REST, against the fake broker operations (WC-4, CO-5)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_harness import Admin, Reply, start_admin

from velamq.protocol import build_batch, build_entry, compress, pb

P = "/admin/v2/persistent/public/default"
T = f"{P}/t"
FULL = "persistent://public/default/t"
PT = f"{P}/pt"
PT_FULL = "persistent://public/default/pt"


def assert_error(reply: Reply, status: int, reason: str = "") -> None:
    assert reply.status == status, reply
    assert reason in reply.json()["reason"]


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Admin]:
    """A broker that has none of BrokerOperations yet."""
    yield from start_admin(tmp_path, operations=False)


def message(payload: bytes, **fields: object) -> bytes:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1_700_000_000_123, **fields)
    return build_entry(meta, payload)


# ----------------------------------------------------------------------------- topics


def test_create_topic_goes_through_the_broker(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    assert ("create_topic", FULL) in admin.broker.calls
    assert_error(admin.request("PUT", T), 409)


def test_stats_and_internal_stats(admin: Admin) -> None:
    assert_error(admin.request("GET", f"{T}/stats"), 404)
    assert admin.request("PUT", T).status == 204
    admin.broker.append(FULL, message(b"x"))
    assert admin.request("PUT", f"{T}/subscription/s", "").status == 204
    assert admin.request("GET", f"{T}/stats").json()["subscriptions"] == {"s": {"msgBacklog": 0, "consumers": []}}
    internal = admin.request("GET", f"{T}/internalStats").json()
    assert internal["entriesAddedCounter"] == 1 and "s" in internal["cursors"]
    assert_error(admin.request("GET", "/admin/v2/persistent/public/nope/t/stats"), 404)


def test_partitioned_stats(admin: Admin) -> None:
    assert admin.request("PUT", f"{PT}/partitions", "2").status == 204
    stats = admin.request("GET", f"{PT}/partitioned-stats").json()
    assert set(stats["partitions"]) == {f"{PT_FULL}-partition-0", f"{PT_FULL}-partition-1"}
    assert admin.request("GET", f"{PT}/partitioned-stats?perPartition=false").json()["partitions"] == {}
    assert_error(admin.request("GET", f"{PT}/stats"), 404)  # no single ledger behind a partitioned name
    assert_error(admin.request("GET", f"{T}/partitioned-stats"), 404)
    internal = admin.request("GET", f"{PT}/partitioned-internalStats").json()
    assert internal["metadata"] == {"partitions": 2} and len(internal["partitions"]) == 2


def test_last_message_id(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    assert admin.request("GET", f"{T}/lastMessageId").json() == {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
    admin.broker.append(FULL, message(b"a"))
    assert admin.request("GET", f"{T}/lastMessageId").json() == {"ledgerId": 7, "entryId": 0, "partitionIndex": -1}
    assert admin.request("PUT", f"{PT}/partitions", "2").status == 204
    assert_error(admin.request("GET", f"{PT}/lastMessageId"), 405)
    partition = admin.request("GET", f"{PT}-partition-1/lastMessageId").json()
    assert partition["partitionIndex"] == 1
    assert_error(admin.request("GET", f"{P}/ghost/lastMessageId"), 404)


def test_unload_and_compaction(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    assert admin.request("PUT", f"{T}/unload").status == 204
    assert admin.request("GET", f"{T}/compaction").json() == {"status": "NOT_RUN", "lastError": ""}
    assert admin.request("PUT", f"{T}/compaction").status == 204
    assert admin.request("GET", f"{T}/compaction").json()["status"] == "RUNNING"
    assert_error(admin.request("PUT", f"{T}/compaction"), 409)
    assert admin.request("PUT", f"{PT}/partitions", "3").status == 204
    assert admin.request("PUT", f"{PT}/unload").status == 204
    assert admin.request("PUT", f"{PT}/compaction").status == 204
    unloaded = [c[1] for c in admin.broker.calls if c[0] == "unload"]
    assert unloaded == [FULL] + [f"{PT_FULL}-partition-{i}" for i in range(3)]
    assert_error(admin.request("GET", f"{PT}/compaction"), 405)
    assert_error(admin.request("PUT", f"{P}/ghost/unload"), 404)


def test_without_broker_operations_routes_answer_501(bare: Admin) -> None:
    assert bare.request("PUT", T).status == 204  # created in the metadata store directly
    for method, path in [("GET", f"{T}/stats"), ("GET", f"{T}/internalStats"), ("PUT", f"{T}/unload"),
                         ("PUT", f"{T}/compaction"), ("GET", f"{T}/subscriptions"), ("PUT", f"{T}/subscription/s"),
                         ("GET", f"{T}/subscription/s/position/1")]:
        assert_error(bare.request(method, path, ""), 501)
    # Policies need no live topic: they work, and the missing notification is no error.
    assert bare.request("POST", f"{T}/messageTTL", "5").status == 204


# ----------------------------------------------------------------------------- subscriptions


def test_subscription_lifecycle(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    assert admin.request("GET", f"{T}/subscriptions").json() == []
    assert admin.request("PUT", f"{T}/subscription/a", "").status == 204
    assert admin.request("PUT", f"{T}/subscription/b", '{"ledgerId": -1, "entryId": -1}').status == 204
    big = 2**63 - 1
    body = json.dumps({"ledgerId": big, "entryId": big, "partitionIndex": -1})
    assert admin.request("PUT", f"{T}/subscription/c", body).status == 204
    assert admin.request("PUT", f"{T}/subscription/d%20e", '{"ledgerId": 7, "entryId": 3}').status == 204
    created = [c[2:] for c in admin.broker.calls if c[0] == "create_subscription"]
    assert created == [("a", "latest"), ("b", "earliest"), ("c", "latest"), ("d e", (7, 3))]
    assert admin.request("GET", f"{T}/subscriptions").json() == ["a", "b", "c", "d e"]
    assert_error(admin.request("PUT", f"{T}/subscription/a", ""), 409)
    assert_error(admin.request("PUT", f"{T}/subscription/x", '{"ledgerId": "one"}'), 400)
    assert_error(admin.request("PUT", f"{T}/subscription/x", "[1]"), 400)

    admin.broker.topics[FULL].busy.add("a")
    assert_error(admin.request("DELETE", f"{T}/subscription/a"), 412)
    assert admin.request("DELETE", f"{T}/subscription/a?force=true").status == 204
    assert admin.request("DELETE", f"{T}/subscription/b").status == 204
    assert_error(admin.request("DELETE", f"{T}/subscription/b"), 404)
    assert_error(admin.request("GET", f"{P}/ghost/subscriptions"), 404)


def test_skip_expire_reset(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    for i in range(5):
        admin.broker.append(FULL, message(b"m%d" % i))
    assert admin.request("PUT", f"{T}/subscription/s", '{"ledgerId": -1, "entryId": -1}').status == 204
    assert admin.request("POST", f"{T}/subscription/s/skip/2", "").status == 204
    assert admin.broker.topics[FULL].cursors["s"] == 2
    assert admin.request("POST", f"{T}/subscription/s/skip_all", "").status == 204
    assert admin.broker.topics[FULL].cursors["s"] == 5
    assert admin.request("POST", f"{T}/subscription/s/expireMessages/60", "").status == 204
    assert admin.request("POST", f"{T}/all_subscription/expireMessages/30", "").status == 204
    assert admin.request("POST", f"{T}/subscription/s/resetcursor/1700000000000", "").status == 204
    assert admin.request("POST", f"{T}/subscription/s/resetcursor", '{"ledgerId": 7, "entryId": 1}').status == 204
    assert admin.request("POST", f"{T}/subscription/s/resetcursor", '{"ledgerId": -1, "entryId": -1}').status == 204
    calls = [c for c in admin.broker.calls if c[0] in ("skip", "expire", "reset")]
    assert calls == [
        ("skip", FULL, "s", 2), ("skip", FULL, "s", None),
        ("expire", FULL, "s", 60), ("expire", FULL, "s", 30),
        ("reset", FULL, "s", 1_700_000_000_000, None), ("reset", FULL, "s", None, (7, 1)),
        ("reset", FULL, "s", 0, None),
    ]
    assert_error(admin.request("POST", f"{T}/subscription/s/skip/-1", ""), 400)
    assert_error(admin.request("POST", f"{T}/subscription/s/expireMessages/soon", ""), 400)
    assert_error(admin.request("POST", f"{T}/subscription/s/resetcursor", ""), 400)
    assert_error(admin.request("POST", f"{T}/subscription/s/resetcursor",
                               '{"ledgerId": 7, "entryId": 1, "isExcluded": true}'), 501)
    assert_error(admin.request("POST", f"{T}/subscription/nope/skip/1", ""), 404)


def test_partitioned_topic_subscriptions_fan_out(admin: Admin) -> None:
    assert admin.request("PUT", f"{PT}/partitions", "3").status == 204
    assert admin.request("PUT", f"{PT}/subscription/s", "").status == 204
    assert admin.request("GET", f"{PT}/subscriptions").json() == ["s"]
    assert admin.request("GET", f"{PT}-partition-2/subscriptions").json() == ["s"]
    assert_error(admin.request("PUT", f"{PT}/subscription/s", ""), 409)
    assert admin.request("POST", f"{PT}/subscription/s/skip_all", "").status == 204
    assert admin.request("POST", f"{PT}/subscription/s/resetcursor/5", "").status == 204
    assert_error(admin.request("POST", f"{PT}/subscription/s/skip/1", ""), 405)
    assert_error(admin.request("POST", f"{PT}/subscription/s/resetcursor", '{"ledgerId":1,"entryId":1}'), 405)
    assert_error(admin.request("GET", f"{PT}/subscription/s/position/1"), 405)
    assert admin.request("DELETE", f"{PT}-partition-0/subscription/s").status == 204
    assert admin.request("DELETE", f"{PT}/subscription/s").status == 204  # the partitions that have it
    assert_error(admin.request("DELETE", f"{PT}/subscription/s"), 404)  # none has it


# ----------------------------------------------------------------------------- peek


def test_peek_a_single_message(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    props = [pb.KeyValue(key="k1", value="v1"), pb.KeyValue(key="bad key", value="é")]
    admin.broker.append(FULL, message(b"hello", partition_key="key-1", event_time=1_700_000_000_500,
                                      properties=props))
    admin.broker.append(FULL, message(b"second"))
    assert admin.request("PUT", f"{T}/subscription/s", '{"ledgerId": -1, "entryId": -1}').status == 204
    reply = admin.request("GET", f"{T}/subscription/s/position/1")
    assert reply.status == 200 and reply.body == b"hello"
    h = reply.headers
    assert h["x-pulsar-message-id"] == "7:0"
    assert h["x-pulsar-publish-time"] == "2023-11-14T22:13:20.123Z"
    assert h["x-pulsar-event-time"] == "2023-11-14T22:13:20.500Z"
    assert h["x-pulsar-partition-key"] == "key-1"
    assert h["x-pulsar-producer-name"] == "p" and h["x-pulsar-sequence-id"] == "3"
    assert h["x-pulsar-property-k1"] == "v1"
    assert json.loads(h["x-pulsar-property"]) == {"k1": "v1", "bad key": "é"}
    assert "x-pulsar-num-batch-message" not in h
    assert admin.request("GET", f"{T}/subscription/s/position/2").body == b"second"
    assert_error(admin.request("GET", f"{T}/subscription/s/position/3"), 404)
    assert_error(admin.request("GET", f"{T}/subscription/s/position/0"), 412)
    assert_error(admin.request("GET", f"{T}/subscription/nope/position/1"), 404)


def test_peek_a_compressed_batch(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    batch = build_batch([(pb.SingleMessageMetadata(partition_key="a"), b"one"),
                         (pb.SingleMessageMetadata(properties=[pb.KeyValue(key="x", value="y")]), b"two")])
    compressed = compress(pb.ZLIB, batch)
    admin.broker.append(FULL, message(compressed, num_messages_in_batch=2, compression=pb.ZLIB,
                                      uncompressed_size=len(batch)))
    assert admin.request("PUT", f"{T}/subscription/s", '{"ledgerId": -1, "entryId": -1}').status == 204
    whole = admin.request("GET", f"{T}/subscription/s/position/1")
    assert whole.body == batch  # decompressed, whole, as Pulsar returns it
    assert whole.headers["x-pulsar-num-batch-message"] == "2"
    assert whole.headers["x-pulsar-compression"] == "ZLIB"
    one = admin.request("GET", f"{T}/subscription/s/position/1?batchIndex=1")
    assert one.body == b"two"
    assert one.headers["x-pulsar-batch-index"] == "1" and one.headers["x-pulsar-property-x"] == "y"
    assert "x-pulsar-num-batch-message" not in one.headers
    assert admin.request("GET", f"{T}/subscription/s/position/1?batchIndex=0").headers["x-pulsar-partition-key"] == "a"
    assert_error(admin.request("GET", f"{T}/subscription/s/position/1?batchIndex=2"), 404)
