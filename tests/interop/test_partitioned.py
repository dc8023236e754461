"""WC-2, WC-3, PR-1, PR-3: partitioned topics created through the admin API, keyed routing by the official
client, one consumer over all partitions."""

from __future__ import annotations

import collections
import json
from typing import Any

import pulsar
import pytest
from interop_helpers import ack_all, assert_no_more, create_partitioned_topic, full_name, http, receive_n

from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(60)

n_partitions = 4


def test_create_partitioned_topic_via_admin(broker: BrokerProcess, client: Any, topic: str) -> None:
    assert create_partitioned_topic(broker.admin_url, topic, n_partitions) in (200, 204)
    # Creating it again is a conflict, which the official tests treat as success.
    assert create_partitioned_topic(broker.admin_url, topic, n_partitions) == 409
    status, text = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/partitions")
    assert status == 200 and json.loads(text)["partitions"] == n_partitions
    assert client.get_topic_partitions(topic) == [
        f"{full_name(topic)}-partition-{i}" for i in range(n_partitions)
    ]


def test_keyed_messages_stick_to_one_partition(broker: BrokerProcess, client: Any, topic: str) -> None:
    create_partitioned_topic(broker.admin_url, topic, n_partitions)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)

    keys = [f"user-{k}" for k in range(16)]
    rounds = 5
    sent_partition: dict[str, set[int]] = collections.defaultdict(set)
    for r in range(rounds):
        for k in keys:
            mid = producer.send(f"{k}:{r}".encode(), partition_key=k)
            sent_partition[k].add(mid.partition())
    for k, parts in sent_partition.items():
        assert len(parts) == 1, f"key {k} went to partitions {parts}"
    key_partition = {k: next(iter(p)) for k, p in sent_partition.items()}
    assert all(0 <= p < n_partitions for p in key_partition.values())
    assert len(set(key_partition.values())) > 1, "all keys hashed to one partition"

    msgs = receive_n(consumer, len(keys) * rounds)
    seen: dict[str, list[int]] = collections.defaultdict(list)
    for m in msgs:
        key, r = m.data().decode().split(":")
        p = m.message_id().partition()
        assert m.partition_key() == key
        assert p == key_partition[key], f"{key}: sent to {key_partition[key]}, received from {p}"
        assert m.topic_name() == f"{full_name(topic)}-partition-{p}"
        seen[key].append(int(r))
    # Order holds per partition, hence per key.
    assert {k: v for k, v in seen.items()} == {k: list(range(rounds)) for k in keys}
    ack_all(consumer, msgs)
    assert_no_more(consumer)


def test_unkeyed_round_robin_reaches_every_partition(broker: BrokerProcess, client: Any, topic: str) -> None:
    create_partitioned_topic(broker.admin_url, topic, n_partitions)
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(
        topic, batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    n = 40
    ids = [producer.send(b"rr-%d" % i) for i in range(n)]
    assert {i.partition() for i in ids} == set(range(n_partitions))
    msgs = receive_n(consumer, n)
    assert sorted(m.data() for m in msgs) == sorted(b"rr-%d" % i for i in range(n))
    by_partition = collections.Counter(m.message_id().partition() for m in msgs)
    assert by_partition == collections.Counter(i.partition() for i in ids)
    ack_all(consumer, msgs)


def test_partitioned_batched_and_reader(broker: BrokerProcess, client: Any, topic: str) -> None:
    create_partitioned_topic(broker.admin_url, topic, n_partitions)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=20,
                                      compression_type=pulsar.CompressionType.ZSTD)
    n = 200
    for i in range(n):
        producer.send_async(b"pb-%d" % i, None, partition_key=f"k{i % 10}")
    producer.flush()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(10_000) for _ in range(n)]
    assert sorted(m.data() for m in got) == sorted(b"pb-%d" % i for i in range(n))
    parts_per_key: dict[str, set[int]] = collections.defaultdict(set)
    for m in got:
        parts_per_key[m.partition_key()].add(m.message_id().partition())
    assert all(len(p) == 1 for p in parts_per_key.values()), parts_per_key
    reader.close()


def test_subscribe_to_single_partition(broker: BrokerProcess, client: Any, topic: str) -> None:
    create_partitioned_topic(broker.admin_url, topic, n_partitions)
    p2 = f"{full_name(topic)}-partition-2"
    consumer = client.subscribe(p2, "sub")
    producer = client.create_producer(p2)
    producer.send(b"direct")
    m = receive_n(consumer, 1)[0]
    assert m.data() == b"direct"
    assert m.topic_name() == p2
    # The broker puts the partition index of the topic it serves into MESSAGE ids (as Java does).
    assert m.message_id().partition() == 2
