"""Non-persistent topics with the official client (pulsar-client 3.13.0), as Pulsar documents them.

Pulsar's documentation, "Messaging > Non-persistent topics" (concepts-messaging.md), which each test
below cites by its sentences:

  [D1] "In non-persistent topics, brokers immediately deliver messages to all connected subscribers
       without persisting them in BookKeeper. If a subscriber is disconnected, the broker will not
       be able to deliver those in-transit messages, and subscribers will never be able to receive
       those messages again."
  [D2] "Non-persistent topics support all subscription types" ("Client API": "Producers and
       consumers can connect to non-persistent topics in the same way as persistent topics").
  [D3] Non-persistent messaging cookbook (cookbooks-non-persistent.md): "pulsar-admin
       non-persistent" / "topics" commands give stats, internal stats, list and delete
       non-persistent topics; the stats carry `msgDropRate` (NonPersistentTopicStats,
       NonPersistentSubscriptionStats: "msgDropRate: the rate of messages dropped by the broker").
  [D4] Regex subscriptions: RegexSubscriptionMode PersistentOnly (the default), NonPersistentOnly,
       AllTopics pick the topics of the matching kind (concepts-messaging.md, "Multi-topic
       subscriptions").

None of these asserts a time: messages that must not arrive are shown absent by a marker sent after
them on the same producer (the first message a consumer gets is the marker, so nothing older came).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from interop_helpers import datas, http, receive_n
from wait_helpers import wait_until

from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(120)

NP = "non-persistent://public/default/"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Rates (msgDropRate among them) are sampled every half second here, not every 5 s."""
    config = tmp_path_factory.mktemp("np-config") / "broker.conf"
    config.write_text("policyCheckIntervalSeconds=0.5\n")
    with run_broker(config_file=config) as b:
        yield b


def np_topic(topic: str) -> str:
    return NP + topic


def send(producer: Any, payloads: list[bytes], **kwargs: Any) -> None:
    for payload in payloads:
        producer.send(payload, **kwargs)


def stats(broker: BrokerProcess, topic: str) -> dict[str, Any]:
    status, text = http("GET", f"{broker.admin_url}/admin/v2/non-persistent/public/default/{topic}/stats")
    assert status == 200, f"stats: HTTP {status} {text[:200]}"
    result: dict[str, Any] = json.loads(text)
    return result


# ---- delivery ------------------------------------------------------------------------------------


def test_late_subscriber_gets_nothing_published_before_it(client: Any, topic: str) -> None:
    # [D1]: messages are delivered to the subscribers connected when they are published; the
    # topic keeps nothing for a subscriber that comes later, whatever position it asks for.
    producer = client.create_producer(np_topic(topic), batching_enabled=False)
    send(producer, [b"old-%d" % i for i in range(5)])
    consumer = client.subscribe(np_topic(topic), "late", initial_position=pulsar.InitialPosition.Earliest)
    reader = client.create_reader(np_topic(topic), pulsar.MessageId.earliest)
    send(producer, [b"marker"])
    assert receive_n(consumer, 1)[0].data() == b"marker"
    assert reader.read_next(10_000).data() == b"marker"


def test_nothing_is_replayed_after_a_reconnect(client: Any, topic: str) -> None:
    # [D1]: "If a subscriber is disconnected, the broker will not be able to deliver those
    # in-transit messages, and subscribers will never be able to receive those messages again."
    producer = client.create_producer(np_topic(topic), batching_enabled=False)
    consumer = client.subscribe(np_topic(topic), "sub")
    send(producer, [b"a", b"b", b"c"])
    got = receive_n(consumer, 3)
    assert datas(got) == [b"a", b"b", b"c"]
    consumer.close()  # never acknowledged: the official client sends no acks on these topics
    send(producer, [b"while-away-%d" % i for i in range(3)])
    again = client.subscribe(np_topic(topic), "sub")
    send(producer, [b"d", b"e"])
    assert datas(receive_n(again, 2)) == [b"d", b"e"]


def test_exclusive_delivers_to_its_one_consumer(client: Any, topic: str) -> None:
    # [D2] Exclusive: one consumer; a second is refused as on a persistent topic.
    consumer = client.subscribe(np_topic(topic), "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(np_topic(topic), "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(np_topic(topic), batching_enabled=False)
    send(producer, [b"m-%d" % i for i in range(10)])
    assert datas(receive_n(consumer, 10)) == [b"m-%d" % i for i in range(10)]


def test_failover_delivers_to_the_active_consumer_only(client: Any, topic: str) -> None:
    # [D2] Failover: every message goes to the active consumer; the standby gets none while the
    # active one is connected, and takes over when it leaves.
    first = client.subscribe(np_topic(topic), "sub", consumer_type=pulsar.ConsumerType.Failover,
                             consumer_name="a")
    second = client.subscribe(np_topic(topic), "sub", consumer_type=pulsar.ConsumerType.Failover,
                              consumer_name="b")
    producer = client.create_producer(np_topic(topic), batching_enabled=False)
    send(producer, [b"m-%d" % i for i in range(10)])
    # The active one is the first by name (priority levels equal): "a".
    assert datas(receive_n(first, 10)) == [b"m-%d" % i for i in range(10)]
    first.close()
    send(producer, [b"after"])
    assert receive_n(second, 1)[0].data() == b"after"  # and nothing of the ten before it


def test_shared_spreads_each_message_to_one_consumer(client: Any, topic: str) -> None:
    # [D2] Shared: each message to one of the consumers, round robin.
    consumers = [client.subscribe(np_topic(topic), "sub", consumer_type=pulsar.ConsumerType.Shared,
                                  consumer_name=f"c{i}") for i in range(2)]
    producer = client.create_producer(np_topic(topic), batching_enabled=False)
    payloads = [b"m-%d" % i for i in range(20)]
    send(producer, payloads)
    got = [receive_n(c, 10) for c in consumers]  # round robin over two consumers with permits
    assert sorted(datas(got[0] + got[1])) == sorted(payloads)


def test_key_shared_keeps_each_key_on_one_consumer(client: Any, topic: str) -> None:
    # [D2] Key_Shared: the messages of one key go to one consumer.
    consumers = [client.subscribe(np_topic(topic), "sub", consumer_type=pulsar.ConsumerType.KeyShared,
                                  consumer_name=f"c{i}") for i in range(2)]
    producer = client.create_producer(np_topic(topic), batching_enabled=False)
    keys = [f"key-{i}" for i in range(20)]
    for round_ in range(3):
        for key in keys:
            producer.send(f"{key}/{round_}".encode(), partition_key=key)
    owner: dict[str, int] = {}
    received = 0
    while received < 60:
        for index, consumer in enumerate(consumers):
            try:
                message = consumer.receive(100)
            except pulsar.Timeout:
                continue
            received += 1
            key = message.partition_key()
            assert owner.setdefault(key, index) == index, f"{key} went to two consumers"
    assert set(owner) == set(keys)
    assert set(owner.values()) == {0, 1}  # 20 keys over two halves of the hash range: both get some


def test_a_consumer_that_stops_receiving_gets_its_queue_and_the_rest_is_dropped(
    client: Any, topic: str, broker: BrokerProcess
) -> None:
    # [D1], [D3]: what the consumer has no permits for is not kept for it but dropped, and the
    # subscription's stats count it in msgDropRate.
    consumer = client.subscribe(np_topic(topic), "sub", receiver_queue_size=5)
    producer = client.create_producer(np_topic(topic), batching_enabled=False, block_if_queue_full=True)
    send(producer, [b"first-%d" % i for i in range(5)])
    stop = threading.Event()

    def keep_publishing() -> None:  # so that every sampling interval sees drops
        while not stop.is_set():
            producer.send(b"dropped")

    publisher = threading.Thread(target=keep_publishing, daemon=True)
    publisher.start()
    try:
        wait_until(lambda: stats(broker, topic)["subscriptions"]["sub"]["msgDropRate"] > 0,
                   "msgDropRate > 0 on the subscription")
        topic_stats = stats(broker, topic)
        assert topic_stats["msgDropRate"] > 0
        assert topic_stats["subscriptions"]["sub"]["msgBacklog"] == 0  # nothing kept
        assert all(p["msgDropRate"] == 0 for p in topic_stats["publishers"])
    finally:
        stop.set()
        publisher.join()
    # The five it had permits for came; what follows the marker is the marker, not what was dropped.
    assert datas(receive_n(consumer, 5)) == [b"first-%d" % i for i in range(5)]


def test_read_compacted_is_refused(client: Any, topic: str) -> None:
    # Pulsar's NonPersistentTopic.subscribe: "readCompacted only valid on persistent topics" (a
    # non-persistent topic has no compacted view).
    with pytest.raises(pulsar.PulsarException):
        client.subscribe(np_topic(topic), "sub", is_read_compacted=True)
    assert client.subscribe(np_topic(topic), "sub") is not None  # the same subscription without it


# ---- partitioned topics, discovery --------------------------------------------------------------


def test_partitioned_non_persistent_topic(client: Any, topic: str, broker: BrokerProcess) -> None:
    # [D2], [D3]: "pulsar-admin topics create-partitioned-topic non-persistent://..." makes a
    # partitioned non-persistent topic; producers and consumers use it as a persistent one.
    url = f"{broker.admin_url}/admin/v2/non-persistent/public/default/{topic}/partitions"
    status, text = http("PUT", url, "3")
    assert status in (200, 204), text
    assert client.get_topic_partitions(np_topic(topic)) == [f"{np_topic(topic)}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(np_topic(topic), "sub")
    producer = client.create_producer(np_topic(topic), batching_enabled=False,
                                      message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    payloads = [b"p-%d" % i for i in range(30)]
    send(producer, payloads)
    got = receive_n(consumer, 30)
    assert sorted(datas(got)) == sorted(payloads)
    assert {m.message_id().partition() for m in got} == {0, 1, 2}
    # A subscription made now gets none of them (D1), on any partition.
    late = client.subscribe(np_topic(topic), "late")
    send(producer, [b"marker-%d" % i for i in range(3)])  # one per partition, round robin
    assert sorted(datas(receive_n(late, 3))) == [b"marker-0", b"marker-1", b"marker-2"]
    status, text = http("GET", f"{url[: -len('/partitions')]}/partitioned-stats")
    assert status == 200, text
    partitioned = json.loads(text)
    assert partitioned["metadata"]["partitions"] == 3
    assert partitioned["msgInCounter"] == 33
    assert "msgDropRate" in partitioned["subscriptions"]["sub"]


def test_regex_subscription_modes_tell_the_two_kinds_apart(client: Any, broker: BrokerProcess) -> None:
    # [D4]: PersistentOnly reads only persistent topics, NonPersistentOnly only non-persistent
    # ones, AllTopics both.
    prefix = f"rx{uuid.uuid4().hex[:8]}"
    persistent = f"persistent://public/default/{prefix}-p"
    non_persistent = f"non-persistent://public/default/{prefix}-np"
    producers = {t: client.create_producer(t, batching_enabled=False) for t in (persistent, non_persistent)}
    pattern = re.compile(f"persistent://public/default/{prefix}-.*")
    modes = {
        "persistent": pulsar.RegexSubscriptionMode.PersistentOnly,
        "non-persistent": pulsar.RegexSubscriptionMode.NonPersistentOnly,
        "all": pulsar.RegexSubscriptionMode.AllTopics,
    }
    consumers = {name: client.subscribe(pattern, f"sub-{name}", regex_subscription_mode=mode)
                 for name, mode in modes.items()}
    producers[persistent].send(b"to-persistent")
    producers[non_persistent].send(b"to-non-persistent")
    assert datas(receive_n(consumers["persistent"], 1)) == [b"to-persistent"]
    assert datas(receive_n(consumers["non-persistent"], 1)) == [b"to-non-persistent"]
    assert sorted(datas(receive_n(consumers["all"], 2))) == [b"to-non-persistent", b"to-persistent"]
    # Neither single-kind subscription gets the other kind's message: a second message of its own
    # kind is the next it receives.
    producers[persistent].send(b"persistent-2")
    producers[non_persistent].send(b"non-persistent-2")
    assert datas(receive_n(consumers["persistent"], 1)) == [b"persistent-2"]
    assert datas(receive_n(consumers["non-persistent"], 1)) == [b"non-persistent-2"]


# ---- admin: stats, list, delete ------------------------------------------------------------------


def test_admin_stats_list_and_delete(client: Any, topic: str, broker: BrokerProcess) -> None:
    # [D3]: stats with msgDropRate per publisher and subscription and no backlog; the topic is
    # listed among the namespace's non-persistent topics only; deleting it while in use needs force.
    producer = client.create_producer(np_topic(topic), producer_name="np-producer", batching_enabled=False)
    consumer = client.subscribe(np_topic(topic), "sub", consumer_type=pulsar.ConsumerType.Shared)
    send(producer, [b"x"] * 4)
    receive_n(consumer, 4)
    s = stats(broker, topic)
    assert s["msgInCounter"] == 4
    assert s["storageSize"] == 0
    assert [p["producerName"] for p in s["publishers"]] == ["np-producer"]
    assert "msgDropRate" in s["publishers"][0]
    sub = s["subscriptions"]["sub"]
    assert (sub["type"], sub["msgBacklog"], sub["msgDropRate"], len(sub["consumers"])) == ("Shared", 0, 0.0, 1)
    assert sub["msgOutCounter"] == 4

    base = f"{broker.admin_url}/admin/v2"
    status, text = http("GET", f"{base}/non-persistent/public/default")
    assert status == 200 and np_topic(topic) in json.loads(text)
    status, text = http("GET", f"{base}/persistent/public/default")
    assert status == 200 and np_topic(topic) not in json.loads(text)
    status, text = http("GET", f"{base}/namespaces/public/default/topics?mode=NON_PERSISTENT")
    assert status == 200 and np_topic(topic) in json.loads(text)

    status, _ = http("DELETE", f"{base}/non-persistent/public/default/{topic}")
    assert status == 412  # producers and consumers are connected
    status, text = http("DELETE", f"{base}/non-persistent/public/default/{topic}?force=true")
    assert status in (200, 204), text
    status, _ = http("GET", f"{base}/non-persistent/public/default/{topic}/stats")
    assert status == 404
    status, text = http("GET", f"{base}/non-persistent/public/default")
    assert np_topic(topic) not in json.loads(text)


def test_a_broker_with_non_persistent_topics_disabled_refuses_them(
    tmp_path_factory: pytest.TempPathFactory, make_client: Any
) -> None:
    # [D3] "To use non-persistent topics, you need to enable them in your Pulsar broker
    # configuration" (enableNonPersistentTopics): a broker that has them off refuses them.
    config = tmp_path_factory.mktemp("np-off") / "broker.conf"
    config.write_text("enableNonPersistentTopics=false\n")
    with run_broker(config_file=config) as off:
        client = make_client(off.service_url)
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(np_topic("refused"))
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(np_topic("refused"), "sub")
        producer = client.create_producer("persistent://public/default/still-served")
        producer.send(b"persistent topics are unaffected")


def test_batched_messages_arrive_whole_and_in_order(client: Any, topic: str) -> None:
    # [D2] the client API is the same as for persistent topics, batching included.
    consumer = client.subscribe(np_topic(topic), "sub")
    producer = client.create_producer(np_topic(topic), batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=50)
    for i in range(100):
        producer.send_async(b"b-%d" % i, None)
    producer.flush()
    got = receive_n(consumer, 100)
    assert datas(got) == [b"b-%d" % i for i in range(100)]
    assert {m.message_id().batch_index() for m in got} > {0}  # they came as batches
