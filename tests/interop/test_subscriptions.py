"""CO-1: subscription types Exclusive, Shared, Failover and Key_Shared with the official client."""

from __future__ import annotations

import collections
from typing import Any

import pulsar
import pytest
from interop_helpers import (
    SendTracker,
    ack_all,
    assert_no_more,
    collect_concurrently,
    datas,
    receive_n,
    subscription_stats,
)
from wait_helpers import wait_until

from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(90)


def produce(client: Any, topic: str, payloads: list[bytes], keys: list[str] | None = None) -> None:
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    tracker = SendTracker(len(payloads))
    for i, p in enumerate(payloads):
        if keys is None:
            producer.send_async(p, tracker.callback(i))
        else:
            producer.send_async(p, tracker.callback(i), partition_key=keys[i])
    producer.flush()
    tracker.wait()
    assert all(r == pulsar.Result.Ok for r in tracker.results)
    producer.close()


def test_exclusive_second_consumer_is_busy(client: Any, topic: str) -> None:
    first = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    # A consumer of another type cannot join an Exclusive subscription either.
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    # The first consumer is unaffected.
    produce(client, topic, [b"x-%d" % i for i in range(5)])
    msgs = receive_n(first, 5)
    assert datas(msgs) == [b"x-%d" % i for i in range(5)]
    ack_all(first, msgs)
    first.close()
    # Once it is gone the subscription accepts a new exclusive consumer.
    second = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    produce(client, topic, [b"y"])
    assert receive_n(second, 1)[0].data() == b"y"


def test_shared_each_message_once_across_consumers(client: Any, topic: str) -> None:
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                          receiver_queue_size=10, consumer_name="c1")
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                          receiver_queue_size=10, consumer_name="c2")
    n = 300
    expected = [b"shared-%d" % i for i in range(n)]
    produce(client, topic, expected)
    got = collect_concurrently([c1, c2], n)
    all_data = datas(got[0]) + datas(got[1])
    assert len(all_data) == n, f"c1 got {len(got[0])}, c2 got {len(got[1])}"
    assert sorted(all_data) == sorted(expected)
    assert got[0] and got[1], f"one consumer got nothing: c1={len(got[0])}, c2={len(got[1])}"
    # Each consumer sees its share in publish order.
    for part in got:
        idx = [int(m.data().split(b"-")[1]) for m in part]
        assert idx == sorted(idx)
    assert_no_more(c1)
    assert_no_more(c2)


def test_failover_single_active_consumer_and_takeover(broker: BrokerProcess, client: Any, topic: str) -> None:
    a = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    b = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")

    def one_of_two_active() -> bool:
        stats = subscription_stats(broker.admin_url, topic, "sub")
        consumers = stats["consumers"] if stats else []
        return len(consumers) == 2 and sum(bool(c.get("isActive")) for c in consumers) == 1

    wait_until(one_of_two_active, "both consumers on the broker, one of them active")
    first = [b"first-%d" % i for i in range(20)]
    produce(client, topic, first)

    got_a, got_b = collect_concurrently([a, b], len(first), timeout_s=60, ack=False)
    assert bool(got_a) != bool(got_b), f"a got {len(got_a)}, b got {len(got_b)}: expected one active consumer"
    active, standby, got = (a, b, got_a) if got_a else (b, a, got_b)
    assert datas(got) == first

    # The active consumer acks 15 of 20, then goes away: the standby takes over from the first unacked.
    ack_all(active, got[:15])
    active.close()
    second = [b"second-%d" % i for i in range(10)]
    produce(client, topic, second)
    msgs = receive_n(standby, 15)
    assert datas(msgs) == first[15:] + second
    ack_all(standby, msgs)
    assert_no_more(standby)


def test_key_shared_order_per_key_and_spread(client: Any, topic: str) -> None:
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared,
                          receiver_queue_size=50, consumer_name="k1")
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared,
                          receiver_queue_size=50, consumer_name="k2")
    n_keys, per_key = 32, 12
    keys = [f"key-{i % n_keys}" for i in range(n_keys * per_key)]
    payloads = [f"{k}:{i // n_keys}".encode() for i, k in enumerate(keys)]
    produce(client, topic, payloads, keys)

    got = collect_concurrently([c1, c2], len(payloads))
    assert sum(map(len, got)) == len(payloads), [len(g) for g in got]

    owner: dict[str, int] = {}
    seqs: dict[str, list[int]] = collections.defaultdict(list)
    for ci, msgs in enumerate(got):
        for m in msgs:
            key, seq = m.data().decode().split(":")
            assert m.partition_key() == key
            assert owner.setdefault(key, ci) == ci, f"{key} delivered to both consumers"
            seqs[key].append(int(seq))
    for key, s in seqs.items():
        assert s == list(range(per_key)), f"{key} out of order or incomplete: {s}"
    assert len(seqs) == n_keys
    assert set(owner.values()) == {0, 1}, "all keys went to one consumer"
    assert_no_more(c1)
    assert_no_more(c2)


def test_key_shared_ordering_key(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared)
    producer = client.create_producer(topic)
    producer.send(b"ordered-hello", ordering_key="random-ordering-key")
    m = receive_n(consumer, 1)[0]
    assert m.data() == b"ordered-hello"
    assert m.ordering_key() == "random-ordering-key"
    consumer.acknowledge(m)
