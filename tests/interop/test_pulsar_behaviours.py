"""Pulsar behaviours that real applications hit (issue 21), with the official client (pulsar-client
3.13.0) against an in-process broker: automatic topic creation and its namespace policy, Key_Shared
out-of-order joins, dead-letter initial subscriptions, topic termination, producer and consumer
metadata in stats, and per-topic metrics by default. Each test asserts what Pulsar documents; the
source is cited beside it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pulsar
import pytest
from interop_helpers import assert_no_more, http, receive_n
from wait_helpers import wait_until

from velamq.broker import BrokerConfig
from velamq.cli._main import main as cli_main
from velamq.client import Client as VelamqClient
from velamq.testing import BrokerThread, run_broker_in_thread

pytestmark = pytest.mark.timeout(120)

NS = "public/default"
TOPICS = "/admin/v2/persistent/public/default"

BrokerFactory = Callable[..., AbstractContextManager[BrokerThread]]


@pytest.fixture
def start(tmp_path: Path) -> BrokerFactory:
    """`with start(**config) as broker:` an in-process broker over tmp_path/data (the same data dir
    each time, so a second `start` is a restart)."""

    def factory(**config: Any) -> AbstractContextManager[BrokerThread]:
        return run_broker_in_thread(tmp_path / "data", config=BrokerConfig(**config))

    return factory


@pytest.fixture
def broker(start: BrokerFactory) -> Iterator[BrokerThread]:
    with start() as b:
        yield b


def rest(broker: BrokerThread, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    status, text = http(method, broker.admin_url + path, None if body is None else json.dumps(body))
    try:
        return status, json.loads(text) if text else None
    except json.JSONDecodeError:
        return status, text


def partitions(broker: BrokerThread, topic_path: str) -> int:
    status, body = rest(broker, "GET", f"{topic_path}/partitions")
    assert status == 200, body
    return int(body["partitions"])


def cli(broker: BrokerThread, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = cli_main(["admin", "--admin-url", broker.admin_url, *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out) if out.strip() else None


# ---------------------------------------------------------------------------- automatic topic creation


def test_broker_keys_create_missing_topics_partitioned(start: BrokerFactory, make_client: Any, topic: str) -> None:
    # broker.conf reference: allowAutoTopicCreationType "partitioned" with defaultNumPartitions: an
    # automatically created topic is a partitioned topic with that many partitions.
    with start(auto_topic_creation_type="partitioned", default_num_partitions=3) as broker:
        client = make_client(broker.service_url)
        producer = client.create_producer(topic)
        producer.send(b"first")
        assert partitions(broker, f"{TOPICS}/{topic}") == 3
        assert sorted(client.get_topic_partitions(topic)) == [
            f"persistent://public/default/{topic}-partition-{i}" for i in range(3)
        ]


def test_broker_key_off_refuses_missing_topics(start: BrokerFactory, make_client: Any, topic: str) -> None:
    # allowAutoTopicCreation=false: a producer of a topic that does not exist fails (TopicNotFound).
    with start(allow_auto_topic_creation=False) as broker:
        client = make_client(broker.service_url)
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(topic)


def test_namespace_policy_overrides_the_broker(broker: BrokerThread, make_client: Any) -> None:
    # Pulsar's admin API, namespaces autoTopicCreation (AutoTopicCreationOverride): the namespace's
    # setting overrides allowAutoTopicCreation / allowAutoTopicCreationType / defaultNumPartitions;
    # GET answers nothing once it is removed, and the broker's settings apply again.
    client = make_client(broker.service_url)
    assert rest(broker, "PUT", "/admin/v2/namespaces/public/auto", {})[0] in (200, 204)
    policy = "/admin/v2/namespaces/public/auto/autoTopicCreation"
    assert rest(broker, "GET", policy)[0] == 204

    assert rest(broker, "POST", policy, {"allowAutoTopicCreation": False})[0] == 204
    assert rest(broker, "GET", policy) == (200, {"allowAutoTopicCreation": False})
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://public/auto/refused")

    body = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2}
    assert rest(broker, "POST", policy, body)[0] == 204
    assert rest(broker, "GET", policy) == (200, body)
    client.create_producer("persistent://public/auto/made-partitioned").send(b"x")
    assert partitions(broker, "/admin/v2/persistent/public/auto/made-partitioned") == 2

    assert rest(broker, "DELETE", policy)[0] == 204
    assert rest(broker, "GET", policy)[0] == 204
    client.create_producer("persistent://public/auto/plain").send(b"x")
    assert partitions(broker, "/admin/v2/persistent/public/auto/plain") == 0
    status, topics = rest(broker, "GET", "/admin/v2/persistent/public/auto")
    assert status == 200 and "persistent://public/auto/plain" in topics


@pytest.mark.parametrize("body", [
    {"allowAutoTopicCreation": True, "topicType": "partitioned"},  # no defaultNumPartitions
    {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 0},
    {"allowAutoTopicCreation": True, "topicType": "non-partitioned", "defaultNumPartitions": 2},
    {"allowAutoTopicCreation": True, "topicType": "sharded"},
])
def test_invalid_namespace_policy_is_refused(broker: BrokerThread, body: dict[str, Any]) -> None:
    # AutoTopicCreationOverrideImpl.validateOverride's rules; NamespacesBase answers 412.
    status, reason = rest(broker, "POST", f"/admin/v2/namespaces/{NS}/autoTopicCreation", body)
    assert status == 412, reason
    assert rest(broker, "GET", f"/admin/v2/namespaces/{NS}/autoTopicCreation")[0] == 204


def test_auto_topic_creation_verbs(broker: BrokerThread, capsys: pytest.CaptureFixture[str]) -> None:
    # pulsar-admin namespaces set-auto-topic-creation --enable --type partitioned --num-partitions N
    cli(broker, capsys, "namespaces", "set-auto-topic-creation", NS, "--enable", "--type", "partitioned",
        "--num-partitions", "4")
    shown = cli(broker, capsys, "namespaces", "get-auto-topic-creation", NS)
    assert shown == {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 4}
    cli(broker, capsys, "namespaces", "remove-auto-topic-creation", NS)
    assert cli(broker, capsys, "namespaces", "get-auto-topic-creation", NS) is None


# ---------------------------------------------------------------------------- Key_Shared out of order


def _key_shared(client: Any, topic: str, out_of_order: bool) -> Any:
    policy = pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=out_of_order)
    return client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, key_shared_policy=policy)


def _send_keyed(producer: Any, start: int, n: int) -> None:
    for i in range(start, start + n):
        producer.send(b"m%d" % i, partition_key=f"key-{i % 20}")


@pytest.mark.parametrize("out_of_order", [True, False])
def test_key_shared_joining_consumer(broker: BrokerThread, make_client: Any, topic: str, out_of_order: bool) -> None:
    # KeySharedPolicy.setAllowOutOfOrderDelivery (Pulsar's javadoc and "Key_Shared" in the messaging
    # concepts): by default a consumer that joins gets nothing of its keys until the messages sent
    # before it joined are acknowledged (ordering is kept); with allowOutOfOrderDelivery it gets
    # them at once.
    client = make_client(broker.service_url)
    producer = client.create_producer(topic, batching_enabled=False)
    first = _key_shared(client, topic, out_of_order)
    _send_keyed(producer, 0, 40)
    held = receive_n(first, 40)  # all out at the first consumer, none acknowledged
    second = _key_shared(client, topic, out_of_order)
    _send_keyed(producer, 40, 40)
    joining = [c.get("readPositionWhenJoining") for c in
               rest(broker, "GET", f"{TOPICS}/{topic}/stats")[1]["subscriptions"]["ks"]["consumers"]]
    if out_of_order:
        assert joining == [None, None]
        assert second.receive(10_000).data().startswith(b"m")
    else:
        # ConsumerStats.readPositionWhenJoining: where the held-back consumer joined.
        assert joining[0] is None and joining[1] is not None
        assert_no_more(second)
        for message in held:
            first.acknowledge(message)
        assert second.receive(10_000).data().startswith(b"m")


def test_key_shared_out_of_order_setting_must_match(broker: BrokerThread, make_client: Any, topic: str) -> None:
    # PersistentSubscription: "Subscription is of different type" (SubscriptionBusyException ->
    # ConsumerBusy) for a consumer whose allowOutOfOrderDelivery differs from the subscription's.
    client = make_client(broker.service_url)
    _key_shared(client, topic, True)
    with pytest.raises(pulsar.ConsumerBusy):
        _key_shared(client, topic, False)


# ---------------------------------------------------------------------------- dead-letter initial subscription


def test_dead_letter_initial_subscription_keeps_dead_letters(
    broker: BrokerThread, make_client: Any, topic: str
) -> None:
    # DeadLetterPolicy.initialSubscriptionName: the subscription is created on the dead-letter topic
    # with its producer (ServerCnx.handleProducer: from the earliest message), so a consumer of it
    # that comes later, at the default initial position (latest), still gets the dead letters.
    client = make_client(broker.service_url)
    dlq = f"{topic}-DLQ"
    policy = pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=1, dead_letter_topic=dlq,
                                             initial_subscription_name="keeper")
    consumer = client.subscribe(topic, "work", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100, dead_letter_policy=policy)
    client.create_producer(topic, batching_enabled=False).send(b"poison")

    def dead_lettered() -> bool:
        try:
            consumer.negative_acknowledge(consumer.receive(300))
        except pulsar.Timeout:
            pass
        status, stats = rest(broker, "GET", f"{TOPICS}/{dlq}/stats")
        return status == 200 and stats["subscriptions"].get("keeper", {}).get("msgBacklog") == 1

    wait_until(dead_lettered)
    late = client.subscribe(dlq, "keeper")
    assert late.receive(10_000).data() == b"poison"


def test_velamq_client_dead_letter_initial_subscription(broker: BrokerThread, topic: str) -> None:
    # velamq's client offers the same: its producer sends initial_subscription_name.
    client = VelamqClient(broker.service_url)
    try:
        producer = client.create_producer(f"{topic}-dlq", initial_subscription_name="keeper")
        producer.send(b"kept")
        status, subscriptions = rest(broker, "GET", f"{TOPICS}/{topic}-dlq/subscriptions")
        assert (status, subscriptions) == (200, ["keeper"])
        assert client.subscribe(f"{topic}-dlq", "keeper").receive(10_000).data() == b"kept"
    finally:
        client.close()


# ---------------------------------------------------------------------------- terminate


def _message_id(msg_id: Any) -> dict[str, int]:
    return {"ledgerId": msg_id.ledger_id(), "entryId": msg_id.entry_id(), "partitionIndex": -1}


def test_terminate_refuses_producers_and_survives_restart(
    start: BrokerFactory, make_client: Any, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # pulsar-admin topics terminate / POST .../terminate (PersistentTopicsBase.internalTerminate):
    # it answers the last message id; the topic accepts no more messages (producers get
    # TopicTerminated); consumers still get what was published before; it stays terminated.
    with start() as broker:
        client = make_client(broker.service_url)
        consumer = client.subscribe(topic, "before", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        last = [producer.send(b"m%d" % i) for i in range(3)][-1]
        status, body = rest(broker, "POST", f"{TOPICS}/{topic}/terminate")
        assert (status, body) == (200, _message_id(last))
        with pytest.raises(pulsar.TopicTerminated):
            producer.send(b"after")
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
        assert [m.data() for m in receive_n(consumer, 3)] == [b"m0", b"m1", b"m2"]
        assert rest(broker, "POST", f"{TOPICS}/{topic}/terminate") == (200, _message_id(last))  # again: the same
        client.close()
    with start() as broker:
        client = make_client(broker.service_url)
        with pytest.raises(pulsar.TopicTerminated):
            client.create_producer(topic)
        assert cli(broker, capsys, "topics", "terminate", topic) == _message_id(last)


def test_terminate_leaves_the_official_clients_connection_alone(
    broker: BrokerThread, make_client: Any, topic: str
) -> None:
    # The C++ library under pulsar-client has no handler for REACHED_END_OF_TOPIC and closes its
    # connection on it (pulsar-client-cpp ClientConnection::handleIncomingCommand): velamq does not
    # send it to that library, so a drained consumer's connection stays up (see _end_of_topic.py).
    client = make_client(broker.service_url)
    consumer = client.subscribe(topic, "drained", initial_position=pulsar.InitialPosition.Earliest)
    client.create_producer(topic).send(b"only")
    consumer.acknowledge(consumer.receive(10_000))
    wait_until(lambda: rest(broker, "GET", f"{TOPICS}/{topic}/stats")[1]["subscriptions"]["drained"]["msgBacklog"] == 0)
    opened = broker.server.broker.connections_opened_total
    assert rest(broker, "POST", f"{TOPICS}/{topic}/terminate")[0] == 200
    consumer.get_last_message_id()  # a round trip on the same connection, after the termination
    assert consumer.is_connected()
    assert broker.server.broker.connections_opened_total == opened


def test_terminate_partitioned_topic(broker: BrokerThread, make_client: Any, topic: str) -> None:
    # A partitioned topic is terminated through .../terminate/partitions (each partition);
    # .../terminate on it is not allowed (405), nor on a non-persistent topic.
    assert rest(broker, "PUT", f"{TOPICS}/{topic}/partitions", 2)[0] in (200, 204)
    assert rest(broker, "POST", f"{TOPICS}/{topic}/terminate")[0] == 405
    status, ids = rest(broker, "POST", f"{TOPICS}/{topic}/terminate/partitions")
    assert status == 200 and sorted(ids) == ["0", "1"]
    assert all(mid["entryId"] == -1 for mid in ids.values())  # nothing was published
    with pytest.raises(pulsar.TopicTerminated):
        make_client(broker.service_url).create_producer(topic)
    assert rest(broker, "POST", f"/admin/v2/non-persistent/public/default/{topic}/terminate")[0] == 405


def test_velamq_client_learns_the_end_of_topic(broker: BrokerThread, topic: str) -> None:
    # Consumer.hasReachedEndOfTopic / Reader.hasReachedEndOfTopic (CommandReachedEndOfTopic): true
    # once the topic is terminated and everything in it was consumed; velamq's is_end_of_topic().
    client = VelamqClient(broker.service_url)
    try:
        consumer = client.subscribe(topic, "sub", initial_position="earliest")
        reader = client.create_reader(topic, "earliest")
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(b"m%d" % i)
        assert rest(broker, "POST", f"{TOPICS}/{topic}/terminate")[0] == 200
        assert not consumer.is_end_of_topic()
        for _ in range(2):
            consumer.acknowledge(consumer.receive(10_000))
        assert not consumer.is_end_of_topic()  # one left
        consumer.acknowledge(consumer.receive(10_000))
        wait_until(consumer.is_end_of_topic)
        assert [reader.read_next(10_000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
        wait_until(reader.is_end_of_topic)
        consumer.close()
        again = client.subscribe(topic, "sub")  # joins a subscription that consumed it all already
        wait_until(again.is_end_of_topic)
    finally:
        client.close()


# ---------------------------------------------------------------------------- stats


def test_stats_show_producer_and_consumer_metadata(broker: BrokerThread, make_client: Any, topic: str) -> None:
    # TopicStats (admin API, topics stats): publishers[].metadata and consumers[].metadata are the
    # properties the producer and consumer were created with; clientVersion, lastAckedTimestamp,
    # lastConsumedTimestamp and msgRateRedeliver as in ConsumerStats / PublisherStats.
    client = make_client(broker.service_url)
    consumer = client.subscribe(topic, "s", properties={"host": "h1"}, consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic, properties={"app": "orders", "team": "a"})
    producer.send(b"x")
    consumer.negative_acknowledge(consumer.receive(10_000))
    consumer.acknowledge(consumer.receive(10_000))

    def stats() -> dict[str, Any]:
        status, body = rest(broker, "GET", f"{TOPICS}/{topic}/stats")
        assert status == 200
        return dict(body)

    wait_until(lambda: stats()["subscriptions"]["s"]["consumers"][0]["lastAckedTimestamp"] > 0)
    body = stats()
    publisher = body["publishers"][0]
    consumer_stats = body["subscriptions"]["s"]["consumers"][0]
    assert publisher["metadata"] == {"app": "orders", "team": "a"}
    assert consumer_stats["metadata"] == {"host": "h1"}
    assert publisher["clientVersion"].startswith("Pulsar-")
    assert consumer_stats["clientVersion"] == publisher["clientVersion"]
    assert consumer_stats["lastConsumedTimestamp"] > 0
    assert consumer_stats["lastConsumedFlowTimestamp"] > 0
    wait_until(lambda: stats()["subscriptions"]["s"]["consumers"][0]["msgRateRedeliver"] > 0)  # sampled every 5 s


# ---------------------------------------------------------------------------- per-topic metrics


def _topic_labels(broker: BrokerThread) -> set[str]:
    status, text = http("GET", f"{broker.admin_url}/metrics")
    assert status == 200
    return {line.split('topic="', 1)[1].split('"', 1)[0]
            for line in text.splitlines() if line.startswith("pulsar_in_messages_total{") and 'topic="' in line}


def test_topic_level_metrics_by_default(broker: BrokerThread, make_client: Any, topic: str) -> None:
    # broker.conf: exposeTopicLevelMetricsInPrometheus=true by default (per-topic series, what the
    # usual Grafana dashboards read).
    make_client(broker.service_url).create_producer(topic).send(b"x")
    assert f"persistent://public/default/{topic}" in _topic_labels(broker)


def test_topic_level_metrics_fall_back_above_the_cap(
    start: BrokerFactory, make_client: Any, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    # velamq's bound (topicLevelMetricsMaxTopics): above it, namespace series, said in one log line.
    with start(topic_level_metrics_max_topics=2) as broker:
        client = make_client(broker.service_url)
        for i in range(3):
            client.create_producer(f"{topic}-{i}").send(b"x")
        with caplog.at_level(logging.WARNING, logger="velamq"):
            assert _topic_labels(broker) == set()
            assert _topic_labels(broker) == set()
        warnings = [r for r in caplog.records if "topicLevelMetricsMaxTopics=2" in r.getMessage()]
        assert len(warnings) == 1
