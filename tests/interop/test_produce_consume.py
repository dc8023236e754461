"""WC-1, WC-3, CO-1: plain produce and consume with the official client, message fields round-trip."""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest
from interop_helpers import (
    SendTracker,
    ack_all,
    assert_no_more,
    datas,
    full_name,
    receive_n,
)

pytestmark = pytest.mark.timeout(60)


def test_sync_send_receive_ids_and_fields(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, producer_name=f"prod-{topic}")
    t0 = int(time.time() * 1000)
    ids = [producer.send(b"msg-%d" % i) for i in range(20)]
    t1 = int(time.time() * 1000)

    msgs = receive_n(consumer, 20)
    assert datas(msgs) == [b"msg-%d" % i for i in range(20)]
    assert [m.message_id() for m in msgs] == ids
    # A new topic's entries start at 0 and are dense; no partition, no batch index.
    assert [i.entry_id() for i in ids] == list(range(20))
    assert {i.ledger_id() for i in ids} == {ids[0].ledger_id()}
    assert all(i.partition() == -1 and i.batch_index() == -1 for i in ids)
    for m in msgs:
        assert m.topic_name() == full_name(topic)
        assert m.producer_name() == f"prod-{topic}"
        assert t0 - 1000 <= m.publish_timestamp() <= t1 + 1000
        assert m.event_timestamp() == 0
        assert m.redelivery_count() == 0
        assert m.properties() == {}
        assert not m.has_null_value()
    ack_all(consumer, msgs)
    assert_no_more(consumer)
    assert producer.last_sequence_id() == 19


def test_send_async_callbacks(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    n = 300
    tracker = SendTracker(n)
    for i in range(n):
        producer.send_async(b"async-%d" % i, tracker.callback(i))
    producer.flush()
    tracker.wait()
    assert all(r == pulsar.Result.Ok for r in tracker.results), set(map(str, tracker.results))
    # Callbacks of one producer fire in send order, with increasing message ids.
    assert tracker.order == list(range(n))
    assert all(tracker.ids[i] < tracker.ids[i + 1] for i in range(n - 1))

    msgs = receive_n(consumer, n)
    assert datas(msgs) == [b"async-%d" % i for i in range(n)]
    assert [m.message_id() for m in msgs] == tracker.ids
    ack_all(consumer, msgs)
    assert_no_more(consumer)


def test_properties_keys_event_time(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    props = {"a": "1", "b": "", "unicode-ключ": "значение ✓", "long": "x" * 2000}
    producer.send(b"with-everything", properties=props, partition_key="key-1", ordering_key="ord-1",
                  event_timestamp=1_700_000_000_123)
    producer.send(b"key-only", partition_key="key-2")
    producer.send(b"nothing")

    m1, m2, m3 = receive_n(consumer, 3)
    assert m1.data() == b"with-everything"
    assert m1.properties() == props
    assert m1.partition_key() == "key-1"
    assert m1.ordering_key() == "ord-1"
    assert m1.event_timestamp() == 1_700_000_000_123

    assert m2.data() == b"key-only"
    assert m2.partition_key() == "key-2"
    assert m2.properties() == {}
    assert m2.event_timestamp() == 0

    assert m3.data() == b"nothing"
    assert m3.partition_key() == ""
    assert m3.ordering_key() == ""
    ack_all(consumer, [m1, m2, m3])


def test_null_and_empty_values(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"")
    producer.send(None, partition_key="tombstone-key")
    producer.send(None, properties={"p": "v"})
    producer.send(b"\x00" * 10)

    m1, m2, m3, m4 = receive_n(consumer, 4)
    assert m1.data() == b"" and not m1.has_null_value()
    assert m2.has_null_value() and m2.data() == b"" and m2.partition_key() == "tombstone-key"
    assert m3.has_null_value() and m3.properties() == {"p": "v"}
    assert m4.data() == b"\x00" * 10 and not m4.has_null_value()
    ack_all(consumer, [m1, m2, m3, m4])


def test_binary_payload_sizes(client: Any, topic: str) -> None:
    """Payloads of every awkward size up to ~1 MiB arrive byte for byte."""
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    sizes = [1, 2, 3, 255, 256, 65_535, 65_536, 65_537, 1_000_000]
    payloads = [bytes((i * 7 + s) % 256 for i in range(s)) for s in sizes]
    for p in payloads:
        producer.send(p)
    msgs = receive_n(consumer, len(sizes))
    assert [len(m.data()) for m in msgs] == sizes
    assert datas(msgs) == payloads
    ack_all(consumer, msgs)


def test_initial_position_earliest_and_latest(client: Any, topic: str) -> None:
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(b"before-%d" % i)
    latest = client.subscribe(topic, "latest-sub", initial_position=pulsar.InitialPosition.Latest)
    earliest = client.subscribe(topic, "earliest-sub", initial_position=pulsar.InitialPosition.Earliest)
    for i in range(3):
        producer.send(b"after-%d" % i)

    assert datas(receive_n(earliest, 8)) == [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(3)]
    assert datas(receive_n(latest, 3)) == [b"after-%d" % i for i in range(3)]
    assert_no_more(latest)
    assert_no_more(earliest)


def test_message_listener(client: Any, topic: str) -> None:
    import threading

    got: list[bytes] = []
    done = threading.Event()

    def listener(consumer: Any, msg: Any) -> None:
        got.append(msg.data())
        consumer.acknowledge(msg)
        if len(got) == 10:
            done.set()

    client.subscribe(topic, "sub", message_listener=listener)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(b"l-%d" % i)
    assert done.wait(10), got
    assert got == [b"l-%d" % i for i in range(10)]


def test_unsubscribe_then_resubscribe_starts_fresh(client: Any, topic: str) -> None:
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"one")
    assert receive_n(consumer, 1)[0].data() == b"one"
    consumer.unsubscribe()
    producer.send(b"two")
    # The subscription is gone: a Latest subscription created now sees only what comes after it.
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"three")
    assert receive_n(consumer, 1)[0].data() == b"three"
    assert_no_more(consumer)
