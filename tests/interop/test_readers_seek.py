"""CO-5: readers (earliest, latest, from a message id inclusive and exclusive), has_message_available,
reader and consumer seek by message id and by publish time, get_last_message_id, zero receiver queue."""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest
from interop_helpers import SendTracker, ack_all, assert_no_more, datas, read_n, read_to_end, receive_n

pytestmark = pytest.mark.timeout(60)

MessageId = pulsar.MessageId


def produce(client: Any, topic: str, n: int, distinct_times: bool = False) -> list[Any]:
    """n messages; with distinct_times each is published in a later millisecond than the one before
    (the client stamps publish time when send() is called), so a seek by time can tell them apart."""
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    sent_ms = 0
    for i in range(n):
        if distinct_times:
            while time.time_ns() // 1_000_000 <= sent_ms:
                time.sleep(0.001)
        ids.append(producer.send(b"r-%d" % i))
        sent_ms = time.time_ns() // 1_000_000
    producer.close()
    return ids


def expect(indexes: range | list[int]) -> list[bytes]:
    return [b"r-%d" % i for i in indexes]


def test_reader_from_earliest(client: Any, topic: str) -> None:
    ids = produce(client, topic, 10)
    reader = client.create_reader(topic, MessageId.earliest)
    msgs = read_n(reader, 10)
    assert datas(msgs) == expect(range(10))
    assert [m.message_id() for m in msgs] == ids
    assert not reader.has_message_available()
    with pytest.raises(pulsar.Timeout):
        reader.read_next(300)
    reader.close()


def test_reader_from_message_id_exclusive(client: Any, topic: str) -> None:
    ids = produce(client, topic, 10)
    reader = client.create_reader(topic, ids[4])
    assert datas(read_n(reader, 5)) == expect(range(5, 10))
    assert not reader.has_message_available()


def test_reader_from_message_id_inclusive(client: Any, topic: str) -> None:
    ids = produce(client, topic, 10)
    reader = client.create_reader(topic, ids[4], start_message_id_inclusive=True)
    assert datas(read_n(reader, 6)) == expect(range(4, 10))
    assert not reader.has_message_available()


def test_reader_from_user_built_message_id(client: Any, topic: str) -> None:
    ids = produce(client, topic, 10)
    mid = MessageId(ledger_id=ids[6].ledger_id(), entry_id=ids[6].entry_id())
    reader = client.create_reader(topic, mid)
    assert datas(read_n(reader, 3)) == expect(range(7, 10))


def test_reader_from_latest_has_message_available(client: Any, topic: str) -> None:
    produce(client, topic, 3)  # already there: a latest reader must not see them
    reader = client.create_reader(topic, MessageId.latest)
    assert not reader.has_message_available()
    producer = client.create_producer(topic)
    for i in range(3, 8):
        producer.send(b"r-%d" % i)
    assert reader.has_message_available()
    assert datas(read_n(reader, 5)) == expect(range(3, 8))
    assert not reader.has_message_available()
    producer.send(b"r-8")
    assert reader.has_message_available()
    assert datas(read_n(reader, 1)) == expect([8])


def test_reader_inside_a_batch(client: Any, topic: str) -> None:
    """A reader started at a batched message id resumes at the next index of that batch."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1000)
    tracker = SendTracker(10)
    for i in range(10):
        producer.send_async(b"r-%d" % i, tracker.callback(i))
    producer.flush()
    tracker.wait()
    reader1 = client.create_reader(topic, MessageId.earliest)
    first = read_n(reader1, 5)
    assert datas(first) == expect(range(5))
    assert first[4].message_id().batch_index() >= 0
    reader2 = client.create_reader(topic, first[4].message_id())
    assert datas(read_n(reader2, 5)) == expect(range(5, 10))
    reader3 = client.create_reader(topic, first[4].message_id(), start_message_id_inclusive=True)
    assert datas(read_n(reader3, 6)) == expect(range(4, 10))


def test_reader_seek(client: Any, topic: str) -> None:
    ids = produce(client, topic, 10)
    exclusive = client.create_reader(topic, MessageId.latest)
    inclusive = client.create_reader(topic, MessageId.latest, start_message_id_inclusive=True)
    exclusive.seek(ids[3])
    inclusive.seek(ids[3])
    assert datas(read_n(exclusive, 1)) == expect([4])
    assert datas(read_n(inclusive, 1)) == expect([3])
    exclusive.seek(MessageId.earliest)
    assert datas(read_n(exclusive, 10)) == expect(range(10))
    assert not exclusive.has_message_available()


def test_reader_seek_by_timestamp(client: Any, topic: str) -> None:
    produce(client, topic, 10, distinct_times=True)
    reader = client.create_reader(topic, MessageId.earliest)
    msgs = read_n(reader, 10)
    reader.seek(msgs[6].publish_timestamp())
    assert datas(read_to_end(reader)) == expect(range(6, 10))


def test_consumer_seek_by_message_id_and_timestamp(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    produce(client, topic, 30, distinct_times=True)
    msgs = receive_n(consumer, 30)
    assert datas(msgs) == expect(range(30))
    ids = [m.message_id() for m in msgs]
    stamps = [m.publish_timestamp() for m in msgs]
    ack_all(consumer, msgs)

    consumer.seek(MessageId.earliest)
    assert datas(receive_n(consumer, 1)) == expect([0])

    consumer.seek(ids[20])  # exclusive: resumes after the id
    assert datas(receive_n(consumer, 1)) == expect([21])

    consumer.seek(MessageId(ledger_id=ids[25].ledger_id(), entry_id=ids[25].entry_id()))
    assert datas(receive_n(consumer, 1)) == expect([26])

    consumer.seek(stamps[12])  # by publish time: first message published at or after the timestamp
    got = receive_n(consumer, 18)
    assert datas(got) == expect(range(12, 30))
    ack_all(consumer, got)

    consumer.seek(MessageId.latest)
    assert_no_more(consumer)


def test_consumer_seek_inclusive(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                start_message_id_inclusive=True)
    produce(client, topic, 10)
    msgs = receive_n(consumer, 10)
    ack_all(consumer, msgs)
    consumer.seek(msgs[5].message_id())
    assert datas(receive_n(consumer, 5)) == expect(range(5, 10))


def test_seek_rewinds_the_durable_subscription(client: Any, topic: str) -> None:
    """After a seek, a reconnecting consumer starts from the seek position, not from the old acks.

    As in Java, the broker resets the cursor *to* the message id (the seeking consumer itself skips that
    message client-side when start_message_id_inclusive is false); a new consumer starts at it.
    """
    consumer = client.subscribe(topic, "sub")
    ids = produce(client, topic, 10)
    ack_all(consumer, receive_n(consumer, 10))
    consumer.seek(ids[4])
    consumer.close()
    consumer = client.subscribe(topic, "sub")
    assert datas(receive_n(consumer, 6)) == expect(range(4, 10))
    assert_no_more(consumer)


def test_get_last_message_id(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    ids = produce(client, topic, 5)
    assert consumer.get_last_message_id() == ids[-1]

    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1000)
    tracker = SendTracker(4)
    for i in range(4):
        producer.send_async(b"b-%d" % i, tracker.callback(i))
    producer.flush()
    tracker.wait()
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (tracker.ids[3].ledger_id(), tracker.ids[3].entry_id())
    assert last.batch_index() == 3
    assert last > ids[-1]


def test_receiver_queue_size_zero(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=0, initial_position=pulsar.InitialPosition.Earliest)
    produce(client, topic, 5)
    msgs = []
    for _ in range(5):
        m = consumer.receive()  # the client refuses a receive timeout with a zero queue
        consumer.acknowledge(m)
        msgs.append(m)
    assert datas(msgs) == expect(range(5))
    # Nothing is prefetched: a second consumer on the subscription gets everything produced from now on.
    other = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    produce_more = client.create_producer(topic)
    for i in range(5, 10):
        produce_more.send(b"r-%d" % i)
    assert datas(receive_n(other, 5)) == expect(range(5, 10))
    assert_no_more(other)
