"""CO-2, BR-2: individual, cumulative and batch-index acks persist across consumer reconnects and broker
restarts (clean stop and kill -9); unacked messages come back, acked ones do not."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from interop_helpers import ack_all, assert_no_more, close_after_kill, datas, drain, http, receive_n, receive_timeout_ms

from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(120)

n_messages = 10


def expected(indexes: list[int]) -> list[bytes]:
    return [b"m-%d" % i for i in indexes]


def ack_scenario(client: Any, topic: str) -> None:
    """Three subscriptions on one topic, each acked differently, then all consumers closed."""
    subs = {
        name: client.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Exclusive)
        for name in ("individual", "cumulative", "mixed")
    }
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n_messages):
        producer.send(b"m-%d" % i)
    producer.close()

    received = {name: receive_n(c, n_messages) for name, c in subs.items()}
    for msgs in received.values():
        assert datas(msgs) == expected(list(range(n_messages)))

    # individual: every even message
    for m in received["individual"][0::2]:
        subs["individual"].acknowledge(m)
    # cumulative: everything up to and including m-5
    subs["cumulative"].acknowledge_cumulative(received["cumulative"][5])
    # mixed: m-7 individually, then cumulatively up to m-3
    subs["mixed"].acknowledge(received["mixed"][7])
    subs["mixed"].acknowledge_cumulative(received["mixed"][3].message_id())
    # Closing a consumer flushes its grouped acks before the close request.
    for c in subs.values():
        c.close()


def check_after(client: Any, topic: str) -> None:
    want = {
        "individual": expected([1, 3, 5, 7, 9]),
        "cumulative": expected([6, 7, 8, 9]),
        "mixed": expected([4, 5, 6, 8, 9]),
    }
    for name, data in want.items():
        c = client.subscribe(topic, name, consumer_type=pulsar.ConsumerType.Exclusive)
        msgs = receive_n(c, len(data))
        assert datas(msgs) == data, f"subscription {name!r}"
        assert_no_more(c)
        c.close()


def test_acks_survive_consumer_reconnect(client: Any, topic: str) -> None:
    ack_scenario(client, topic)
    check_after(client, topic)


def test_acks_survive_clean_restart(fresh_broker: BrokerProcess, make_client: Any, topic: str) -> None:
    client = make_client(fresh_broker.service_url)
    ack_scenario(client, topic)
    client.close()
    assert fresh_broker.stop() == 0, fresh_broker.output[-2000:]
    fresh_broker.start()
    check_after(make_client(fresh_broker.service_url), topic)


def test_acks_survive_kill_9(fresh_broker: BrokerProcess, make_client: Any, topic: str) -> None:
    client = make_client(fresh_broker.service_url)
    ack_scenario(client, topic)
    client.close()
    # Cursors are persisted "at a bounded rate and on close" (docs/storage.md); a crash may redeliver,
    # never lose. Unloading the topic closes it, and answers once its cursors are written: from
    # then on a kill -9 must not bring an acknowledged message back.
    status, text = http("PUT", f"{fresh_broker.admin_url}/admin/v2/persistent/public/default/{topic}/unload")
    assert status in (200, 204), f"unload: HTTP {status} {text[:200]}"
    fresh_broker.kill()
    fresh_broker.start()
    check_after(make_client(fresh_broker.service_url), topic)


def test_unacked_come_back_after_kill_9_without_grace(fresh_broker: BrokerProcess, make_client: Any,
                                                     topic: str) -> None:
    """Killed right after the acks: acked messages may come back (at-least-once), unacked ones must."""
    client = make_client(fresh_broker.service_url)
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n_messages):
        producer.send(b"m-%d" % i)
    msgs = receive_n(consumer, n_messages)
    ack_all(consumer, msgs[:5])
    fresh_broker.kill()
    # Shut the client down before the broker comes back, so its consumer cannot reconnect and take
    # the messages.
    close_after_kill(client)
    fresh_broker.start()
    c2 = make_client(fresh_broker.service_url).subscribe(topic, "sub")
    # Redelivered in order, so the last message comes last (an idle time is no proof of the end while
    # the restarted broker recovers); then whatever follows it would be a duplicate.
    got = [c2.receive(receive_timeout_ms).data()]
    while got[-1] != expected([n_messages - 1])[0]:
        got.append(c2.receive(receive_timeout_ms).data())
    got += datas(drain(c2))
    assert set(expected(list(range(5, 10)))) <= set(got), got
    assert len(got) == len(set(got)), f"duplicates: {got}"
    assert got == sorted(got, key=lambda d: int(d.split(b"-")[1])), "redelivered out of order"


def test_batch_index_ack_survives_reconnect(client: Any, topic: str) -> None:
    """Acking two messages of a five-message batch: only the other three come back."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=100,
                                      batching_max_publish_delay_ms=10_000)
    consumer = client.subscribe(topic, "sub", batch_index_ack_enabled=True)
    for i in range(5):
        producer.send_async(b"b-%d" % i, None)
    producer.flush()
    msgs = receive_n(consumer, 5)
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs}) == 1
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[1])
    consumer.close()
    consumer = client.subscribe(topic, "sub", batch_index_ack_enabled=True)
    again = receive_n(consumer, 3)
    assert datas(again) == [b"b-2", b"b-3", b"b-4"]
    assert [m.message_id().batch_index() for m in again] == [2, 3, 4]
    assert_no_more(consumer, 1000)


def test_whole_batch_acked_does_not_come_back(client: Any, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=100,
                                      batching_max_publish_delay_ms=10_000)
    consumer = client.subscribe(topic, "sub")
    for i in range(5):
        producer.send_async(b"b-%d" % i, None)
    producer.flush()
    # A separate, unbatched producer: a sync send on the batching one would wait out the publish delay.
    client.create_producer(topic, batching_enabled=False).send(b"after")
    msgs = receive_n(consumer, 6)
    ack_all(consumer, msgs[:5])
    consumer.close()
    consumer = client.subscribe(topic, "sub")
    assert datas(receive_n(consumer, 1)) == [b"after"]
    assert_no_more(consumer)
