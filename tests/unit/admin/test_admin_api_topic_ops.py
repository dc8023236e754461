"""Topic operations and subscriptions over REST, against a real broker (WC-4, CO-5).

Messages are published with velamq's client; message ids come from its receipts.
"""

from __future__ import annotations

import json
import re
from typing import Any

from admin_harness import Admin, Reply
from wait_helpers import wait_until

from velamq.client import MessageId
from velamq.protocol import parse_batch

P = "/admin/v2/persistent/public/default"
T = f"{P}/t"
FULL = "persistent://public/default/t"
PT = f"{P}/pt"
PT_FULL = "persistent://public/default/pt"


def assert_error(reply: Reply, status: int, reason: str = "") -> None:
    assert reply.status == status, reply
    assert reason in reply.json()["reason"]


def publish(admin: Admin, topic: str, *payloads: bytes, **options: Any) -> list[MessageId]:
    producer = admin.client().create_producer(topic)
    ids = [producer.send(p, **options) for p in payloads]
    producer.close()
    return ids


def backlog(admin: Admin, subscription: str) -> int:
    return int(admin.request("GET", f"{T}/stats").json()["subscriptions"][subscription]["msgBacklog"])


def mark_delete(admin: Admin, subscription: str) -> str:
    return str(admin.request("GET", f"{T}/internalStats").json()["cursors"][subscription]["markDeletePosition"])


# ----------------------------------------------------------------------------- topics


def test_create_topic_goes_through_the_broker(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    assert admin.run(admin.metadata.topic_exists(FULL))
    assert_error(admin.request("PUT", T), 409)
    assert admin.request("PUT", f"{PT}/partitions", "2").status == 204
    assert_error(admin.request("PUT", PT), 409)  # the broker refuses a partitioned topic's name


def test_stats_and_internal_stats(admin: Admin) -> None:
    assert_error(admin.request("GET", f"{T}/stats"), 404)
    assert admin.request("PUT", T).status == 204
    (first,) = publish(admin, FULL, b"x")
    assert admin.request("PUT", f"{T}/subscription/s", "").status == 204
    stats = admin.request("GET", f"{T}/stats").json()
    assert stats["msgInCounter"] == 1 and stats["publishers"] == []
    sub = stats["subscriptions"]["s"]
    assert sub["msgBacklog"] == 0 and sub["consumers"] == [] and sub["type"] == "Exclusive"
    assert sub["markDeletePosition"] == f"{first.ledger_id}:{first.entry_id}"
    internal = admin.request("GET", f"{T}/internalStats").json()
    assert internal["entriesAddedCounter"] == 1 and internal["numberOfEntries"] == 1
    assert internal["lastConfirmedEntry"] == f"{first.ledger_id}:{first.entry_id}"
    assert internal["cursors"]["s"]["individuallyDeletedMessages"] == "[]"
    assert_error(admin.request("GET", "/admin/v2/persistent/public/nope/t/stats"), 404)


def test_stats_show_live_producers_and_consumers(admin: Admin) -> None:
    client = admin.client()
    consumer = client.subscribe(FULL, "live", subscription_type="key_shared", consumer_name="c1")
    producer = client.create_producer(FULL, producer_name="p1")
    producer.send(b"a")
    consumer.acknowledge(consumer.receive(10_000))
    stats = admin.request("GET", f"{T}/stats").json()
    (publisher,) = stats["publishers"]
    assert publisher["producerName"] == "p1" and publisher["accessMode"] == "Shared"
    assert publisher["connectedSince"].endswith("Z")
    (c,) = stats["subscriptions"]["live"]["consumers"]
    assert c["consumerName"] == "c1" and c["isActive"] is True and c["keyHashRanges"] == ["[0, 65535]"]
    assert stats["subscriptions"]["live"]["type"] == "Key_Shared"


def test_partitioned_stats(admin: Admin) -> None:
    assert admin.request("PUT", f"{PT}/partitions", "2").status == 204
    publish(admin, f"{PT_FULL}-partition-1", b"one")
    stats = admin.request("GET", f"{PT}/partitioned-stats").json()
    assert stats["metadata"] == {"partitions": 2}
    assert set(stats["partitions"]) == {f"{PT_FULL}-partition-0", f"{PT_FULL}-partition-1"}
    assert stats["msgInCounter"] == 1 and stats["partitions"][f"{PT_FULL}-partition-1"]["msgInCounter"] == 1
    assert admin.request("GET", f"{PT}/partitioned-stats?perPartition=false").json()["partitions"] == {}
    assert_error(admin.request("GET", f"{PT}/stats"), 404)  # no single ledger behind a partitioned name
    assert_error(admin.request("GET", f"{T}/partitioned-stats"), 404)
    internal = admin.request("GET", f"{PT}/partitioned-internalStats").json()
    assert internal["metadata"] == {"partitions": 2} and len(internal["partitions"]) == 2


def test_last_message_id(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    empty = admin.request("GET", f"{T}/lastMessageId").json()
    assert empty["entryId"] == -1 and empty["partitionIndex"] == -1
    (first,) = publish(admin, FULL, b"a")
    last = admin.request("GET", f"{T}/lastMessageId").json()
    assert last == {"ledgerId": first.ledger_id, "entryId": first.entry_id, "partitionIndex": -1}
    assert admin.request("PUT", f"{PT}/partitions", "2").status == 204
    assert_error(admin.request("GET", f"{PT}/lastMessageId"), 405)
    publish(admin, f"{PT_FULL}-partition-1", b"p")
    partition = admin.request("GET", f"{PT}-partition-1/lastMessageId").json()
    assert partition["partitionIndex"] == 1
    assert_error(admin.request("GET", f"{P}/ghost/lastMessageId"), 404)


def test_last_message_id_of_a_batch(admin: Admin) -> None:
    producer = admin.client().create_producer(FULL, batching_enabled=True, batching_max_publish_delay_ms=60_000)
    producer.send_async(b"a")
    producer.send_async(b"b")
    producer.flush()
    last = admin.request("GET", f"{T}/lastMessageId").json()
    assert last["batchIndex"] == 1


def test_unload_and_compaction(admin: Admin) -> None:
    assert admin.request("PUT", T).status == 204
    publish(admin, FULL, b"k", key="k")
    assert admin.request("PUT", f"{T}/unload").status == 204
    assert admin.request("GET", f"{T}/stats").json()["msgInCounter"] == 0  # loaded again: counters restart
    assert admin.request("GET", f"{T}/compaction").json() == {"status": "NOT_RUN", "lastError": ""}
    assert admin.request("PUT", f"{T}/compaction").status == 204
    wait_until(lambda: admin.request("GET", f"{T}/compaction").json()["status"] == "SUCCESS")
    assert admin.request("PUT", f"{PT}/partitions", "3").status == 204
    publish(admin, f"{PT_FULL}-partition-0", b"v", key="k")
    assert admin.request("PUT", f"{PT}/unload").status == 204  # the partitions in use
    assert admin.request("PUT", f"{PT}/compaction").status == 204
    wait_until(lambda: admin.request("GET", f"{PT}-partition-0/compaction").json()["status"] == "SUCCESS")
    assert_error(admin.request("GET", f"{PT}/compaction"), 405)
    assert_error(admin.request("PUT", f"{P}/ghost/unload"), 404)


# ----------------------------------------------------------------------------- subscriptions


def test_subscription_lifecycle(admin: Admin) -> None:
    ids = publish(admin, FULL, b"0", b"1", b"2")
    assert admin.request("GET", f"{T}/subscriptions").json() == []
    assert admin.request("PUT", f"{T}/subscription/a", "").status == 204
    assert admin.request("PUT", f"{T}/subscription/b", '{"ledgerId": -1, "entryId": -1}').status == 204
    big = 2**63 - 1
    body = json.dumps({"ledgerId": big, "entryId": big, "partitionIndex": -1})
    assert admin.request("PUT", f"{T}/subscription/c", body).status == 204
    at = json.dumps({"ledgerId": ids[1].ledger_id, "entryId": ids[1].entry_id})
    assert admin.request("PUT", f"{T}/subscription/d%20e", at).status == 204
    assert admin.request("GET", f"{T}/subscriptions").json() == ["a", "b", "c", "d e"]
    assert [backlog(admin, s) for s in ("a", "b", "c", "d e")] == [0, 3, 0, 2]  # latest, earliest, latest, at 1
    assert_error(admin.request("PUT", f"{T}/subscription/a", ""), 409)
    assert_error(admin.request("PUT", f"{T}/subscription/x", '{"ledgerId": "one"}'), 400)
    assert_error(admin.request("PUT", f"{T}/subscription/x", "[1]"), 400)

    admin.client().subscribe(FULL, "a")  # a connected consumer
    assert_error(admin.request("DELETE", f"{T}/subscription/a"), 412)
    assert admin.request("DELETE", f"{T}/subscription/a?force=true").status == 204
    assert admin.request("DELETE", f"{T}/subscription/b").status == 204
    assert_error(admin.request("DELETE", f"{T}/subscription/b"), 404)
    assert "b" not in admin.request("GET", f"{T}/subscriptions").json()
    assert_error(admin.request("GET", f"{P}/ghost/subscriptions"), 404)


def test_skip_expire_reset(admin: Admin) -> None:
    ids = publish(admin, FULL, *(b"m%d" % i for i in range(5)))
    assert admin.request("PUT", f"{T}/subscription/s", '{"ledgerId": -1, "entryId": -1}').status == 204
    assert admin.request("POST", f"{T}/subscription/s/skip/2", "").status == 204
    assert backlog(admin, "s") == 3
    assert admin.request("POST", f"{T}/subscription/s/skip_all", "").status == 204
    assert backlog(admin, "s") == 0
    at_1 = json.dumps({"ledgerId": ids[1].ledger_id, "entryId": ids[1].entry_id})
    assert admin.request("POST", f"{T}/subscription/s/resetcursor", at_1).status == 204
    assert backlog(admin, "s") == 4
    assert mark_delete(admin, "s") == f"{ids[0].ledger_id}:{ids[0].entry_id}"
    assert admin.request("POST", f"{T}/subscription/s/expireMessages/3600", "").status == 204
    assert backlog(admin, "s") == 4  # nothing is an hour old
    assert admin.request("POST", f"{T}/subscription/s/expireMessages/0", "").status == 204
    assert backlog(admin, "s") == 0  # everything was published before now
    assert admin.request("POST", f"{T}/subscription/s/resetcursor/0", "").status == 204
    assert backlog(admin, "s") == 5  # before the first publish time
    assert admin.request("POST", f"{T}/subscription/s/skip_all", "").status == 204
    assert admin.request("POST", f"{T}/subscription/s/resetcursor", '{"ledgerId": -1, "entryId": -1}').status == 204
    assert backlog(admin, "s") == 5
    assert admin.request("POST", f"{T}/all_subscription/expireMessages/0", "").status == 204
    assert backlog(admin, "s") == 0
    assert_error(admin.request("POST", f"{T}/subscription/s/skip/-1", ""), 400)
    assert_error(admin.request("POST", f"{T}/subscription/s/expireMessages/soon", ""), 400)
    assert_error(admin.request("POST", f"{T}/subscription/s/resetcursor", ""), 400)
    assert_error(admin.request("POST", f"{T}/subscription/s/resetcursor",
                               '{"ledgerId": 7, "entryId": 1, "isExcluded": true}'), 501)
    assert_error(admin.request("POST", f"{T}/subscription/nope/skip/1", ""), 404)


def test_reset_cursor_redelivers_to_a_connected_consumer(admin: Admin) -> None:
    client = admin.client()
    consumer = client.subscribe(FULL, "s", initial_position="earliest")
    publish(admin, FULL, b"a", b"b")
    for expected in (b"a", b"b"):
        message = consumer.receive(10_000)
        assert message.data() == expected
        consumer.acknowledge(message)
    wait_until(lambda: backlog(admin, "s") == 0)
    assert admin.request("POST", f"{T}/subscription/s/resetcursor/0", "").status == 204
    # As Pulsar does: the consumer is disconnected, subscribes again and gets everything again.
    assert consumer.receive(10_000).data() == b"a"


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
    producer = admin.client().create_producer(FULL, producer_name="p")
    first = producer.send(b"hello", key="key-1", event_time=1_700_000_000_500, sequence_id=3,
                          properties={"k1": "v1", "bad key": "é"})
    producer.send(b"second")
    assert admin.request("PUT", f"{T}/subscription/s", '{"ledgerId": -1, "entryId": -1}').status == 204
    reply = admin.request("GET", f"{T}/subscription/s/position/1")
    assert reply.status == 200 and reply.body == b"hello"
    h = reply.headers
    assert h["x-pulsar-message-id"] == f"{first.ledger_id}:{first.entry_id}"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", h["x-pulsar-publish-time"])
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
    producer = admin.client().create_producer(FULL, batching_enabled=True, batching_max_publish_delay_ms=60_000,
                                              compression_type="zlib")
    producer.send_async(b"one", key="a")
    producer.send_async(b"two", properties={"x": "y"})
    producer.flush()
    assert admin.request("PUT", f"{T}/subscription/s", '{"ledgerId": -1, "entryId": -1}').status == 204
    whole = admin.request("GET", f"{T}/subscription/s/position/1")
    assert whole.headers["x-pulsar-num-batch-message"] == "2"
    assert whole.headers["x-pulsar-compression"] == "ZLIB"
    assert whole.headers["x-pulsar-batch-size"] == str(len(whole.body))
    # Decompressed, whole, as Pulsar returns it: the serialized batch.
    assert [payload for _, payload in parse_batch(whole.body, 2)] == [b"one", b"two"]
    one = admin.request("GET", f"{T}/subscription/s/position/1?batchIndex=1")
    assert one.body == b"two"
    assert one.headers["x-pulsar-batch-index"] == "1" and one.headers["x-pulsar-property-x"] == "y"
    assert "x-pulsar-num-batch-message" not in one.headers
    assert admin.request("GET", f"{T}/subscription/s/position/1?batchIndex=0").headers["x-pulsar-partition-key"] == "a"
    assert_error(admin.request("GET", f"{T}/subscription/s/position/1?batchIndex=2"), 404)
