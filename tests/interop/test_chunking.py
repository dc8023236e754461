"""CH-1, CH-2, WC-3: a message larger than maxMessageSize, chunked by the official producer, arrives intact
at a consumer and at a reader; a reader started inclusively at the chunked message id gets it whole."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pulsar
import pytest
from interop_helpers import assert_no_more, receive_n

pytestmark = pytest.mark.timeout(120)

chunked_bytes = 12 * 1024 * 1024


def big_payload(seed: int) -> bytes:
    return random.Random(seed).randbytes(chunked_bytes)


def digest(b: bytes) -> str:
    return f"{len(b)} bytes sha256={hashlib.sha256(b).hexdigest()[:16]}"


def test_chunked_message_consumer_and_reader(client: Any, topic: str) -> None:
    data = big_payload(1)
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    mid = producer.send(data, properties={"kind": "chunked"}, partition_key="big")
    producer.send(b"small-after")

    m = receive_n(consumer, 1, timeout_ms=60_000)[0]
    assert digest(m.data()) == digest(data)
    assert m.properties() == {"kind": "chunked"}
    assert m.partition_key() == "big"
    small = receive_n(consumer, 1)[0]
    assert small.data() == b"small-after"
    consumer.acknowledge(m)
    consumer.acknowledge(small)
    assert_no_more(consumer)

    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    r = reader.read_next(60_000)
    assert digest(r.data()) == digest(data)
    assert reader.read_next(10_000).data() == b"small-after"
    reader.close()

    # CH-2: the chunked message id names the whole message; reading from it inclusively gets it again.
    inclusive = client.create_reader(topic, mid, start_message_id_inclusive=True)
    again = inclusive.read_next(60_000)
    assert digest(again.data()) == digest(data)
    inclusive.close()


def test_two_chunked_messages_in_a_row(client: Any, topic: str) -> None:
    a, b = big_payload(2)[: 6 * 1024 * 1024], big_payload(3)[: 7 * 1024 * 1024]
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    producer.send_async(a, None)
    producer.send_async(b, None)
    producer.flush()
    got = receive_n(consumer, 2, timeout_ms=60_000)
    assert [digest(m.data()) for m in got] == [digest(a), digest(b)]
    for m in got:
        consumer.acknowledge(m)
