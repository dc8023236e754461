"""CO-3: negative acknowledgement and redeliver_unacknowledged_messages with the official client."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from interop_helpers import ack_all, assert_no_more, datas, receive_n, wait_for_backlog

from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(60)


def produce(client: Any, topic: str, n: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(b"n-%d" % i)
    producer.close()


def test_negative_ack_redelivers_with_count_shared(client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=200)
    produce(client, topic, 3)
    m0, m1, m2 = receive_n(consumer, 3)
    assert [m.redelivery_count() for m in (m0, m1, m2)] == [0, 0, 0]
    consumer.acknowledge(m0)
    consumer.negative_acknowledge(m1)
    consumer.acknowledge(m2)
    again = receive_n(consumer, 1)[0]
    assert again.data() == b"n-1"
    assert again.message_id() == m1.message_id()
    assert again.redelivery_count() == 1
    # And again: the count keeps increasing.
    consumer.negative_acknowledge(again.message_id())
    third = receive_n(consumer, 1)[0]
    assert third.data() == b"n-1"
    assert third.redelivery_count() == 2
    consumer.acknowledge(third)
    assert_no_more(consumer, 1000)


def test_negative_ack_exclusive(client: Any, topic: str) -> None:
    """On Exclusive the client asks for every unacked message again (REDELIVER without ids)."""
    consumer = client.subscribe(topic, "sub", negative_ack_redelivery_delay_ms=300)
    produce(client, topic, 4)
    msgs = receive_n(consumer, 4)
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[3])
    consumer.negative_acknowledge(msgs[1])
    # msgs[2] is neither acked nor nacked: it comes back as well.
    again = receive_n(consumer, 2)
    assert datas(again) == [b"n-1", b"n-2"]
    ack_all(consumer, again)
    assert_no_more(consumer, 1000)


def test_redeliver_unacknowledged_messages_shared(broker: BrokerProcess, client: Any, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    produce(client, topic, 6)
    msgs = receive_n(consumer, 6)
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[4])
    # The grouped acks (100 ms) must have reached the broker before asking for redelivery.
    wait_for_backlog(broker.admin_url, topic, "sub", 4)
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 4)
    assert sorted(datas(again)) == [b"n-1", b"n-2", b"n-3", b"n-5"]
    ack_all(consumer, again)
    assert_no_more(consumer)


def test_redeliver_unacknowledged_messages_exclusive_in_order(broker: BrokerProcess, client: Any,
                                                              topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    produce(client, topic, 6)
    msgs = receive_n(consumer, 6)
    consumer.acknowledge_cumulative(msgs[1])
    wait_for_backlog(broker.admin_url, topic, "sub", 4)
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 4)
    assert datas(again) == [b"n-2", b"n-3", b"n-4", b"n-5"]
    ack_all(consumer, again)
    assert_no_more(consumer)


def test_unacked_redelivered_to_other_shared_consumer_on_close(client: Any, topic: str) -> None:
    c1 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=100)
    produce(client, topic, 5)
    msgs = receive_n(c1, 5)
    c1.acknowledge(msgs[2])
    c2 = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    c1.close()
    again = receive_n(c2, 4)
    assert sorted(datas(again)) == [b"n-0", b"n-1", b"n-3", b"n-4"]
    ack_all(c2, again)
    assert_no_more(c2)
