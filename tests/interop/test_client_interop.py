"""WC-3: messages written by velamq's client are read correctly by the official client and the
reverse: unbatched, batched with every codec, keys, properties, event time, delayed delivery and
12 MiB chunked messages; and the same key lands in the same partition with either client."""

from __future__ import annotations

import hashlib
import random
import string
import threading
from typing import Any

import pulsar
import pytest
from interop_helpers import create_partitioned_topic, receive_n

from velamq.client import Client, MessageId, ProducerMessage, boost_hash, sign_safe_mod
from velamq.client.producer._routing import PartitionChooser
from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(180)

receive_timeout_ms = 15_000
codec_cases = [("none", False)] + [(codec, True) for codec in ("none", "lz4", "zlib", "zstd", "snappy")]
official_codecs = {"none": pulsar.CompressionType.NONE, "lz4": pulsar.CompressionType.LZ4,
                   "zlib": pulsar.CompressionType.ZLib, "zstd": pulsar.CompressionType.ZSTD,
                   "snappy": pulsar.CompressionType.SNAPPY}
count = 25


def expected(i: int) -> tuple[bytes, str, dict[str, str], int]:
    return b"payload-%d-" % i + b"x" * (i * 7), f"key-{i % 5}", {"i": str(i), "kind": "interop"}, 1_700_000_000_000 + i


@pytest.fixture(scope="module")
def ours(broker: BrokerProcess) -> Any:
    with Client(broker.service_url, operation_timeout_s=15) as c:
        yield c


@pytest.mark.parametrize(("codec", "batching"), codec_cases)
def test_velamq_producer_to_official_consumer(ours: Any, client: Any, topic: str, codec: str, batching: bool) -> None:
    consumer = client.subscribe(topic, "official")
    producer = ours.create_producer(topic, compression_type=codec, batching_enabled=batching)
    futures = []
    for i in range(count):
        value, key, props, event_time = expected(i)
        futures.append(producer.send_async(value, key=key, properties=props, event_time=event_time))
    ids = [f.result(30) for f in futures]
    got = receive_n(consumer, count)
    for i, m in enumerate(got):
        value, key, props, event_time = expected(i)
        assert (m.data(), m.partition_key(), m.properties(), m.event_timestamp()) == (value, key, props, event_time)
        # The official client reads our ids, and we read its ids, byte for byte.
        assert MessageId.deserialize(m.message_id().serialize()) == ids[i]
        assert pulsar.MessageId.deserialize(ids[i].serialize()) == m.message_id()
        consumer.acknowledge(m)
    producer.close()


@pytest.mark.parametrize(("codec", "batching"), codec_cases)
def test_official_producer_to_velamq_consumer(ours: Any, client: Any, topic: str, codec: str, batching: bool) -> None:
    consumer = ours.subscribe(topic, "ours")
    producer = client.create_producer(topic, compression_type=official_codecs[codec], batching_enabled=batching)
    for i in range(count):
        value, key, props, event_time = expected(i)
        producer.send_async(value, None, partition_key=key, properties=props, event_timestamp=event_time)
    producer.flush()
    for i in range(count):
        m = consumer.receive(receive_timeout_ms)
        assert (m.value, m.key, dict(m.properties), m.event_time) == expected(i)
        assert m.publish_time > 0 and m.producer_name == producer.producer_name()
        consumer.acknowledge(m)
    producer.close()


def test_delayed_delivery_both_ways(ours: Any, client: Any, topic: str) -> None:
    # The delayed message is sent first and must arrive after the one sent right behind it.
    official_consumer = client.subscribe(f"{topic}-a", "s", consumer_type=pulsar.ConsumerType.Shared)
    our_producer = ours.create_producer(f"{topic}-a", batching_enabled=True)
    our_producer.send(b"delayed", deliver_after=1500)
    our_producer.send(b"now")
    assert [m.data() for m in receive_n(official_consumer, 2)] == [b"now", b"delayed"]

    import datetime
    our_consumer = ours.subscribe(f"{topic}-b", "s", subscription_type="shared")
    official_producer = client.create_producer(f"{topic}-b")
    official_producer.send(b"delayed", deliver_after=datetime.timedelta(milliseconds=1500))
    official_producer.send(b"now")
    assert [our_consumer.receive(receive_timeout_ms).value for _ in range(2)] == [b"now", b"delayed"]


def test_chunked_12_mib_both_ways(ours: Any, client: Any, topic: str) -> None:
    data = random.Random(7).randbytes(12 * 1024 * 1024)
    official_consumer = client.subscribe(f"{topic}-a", "s")
    our_producer = ours.create_producer(f"{topic}-a", chunking_enabled=True)
    mid = our_producer.send(data, key="big")
    assert mid.first_chunk is not None
    m = official_consumer.receive(60_000)
    assert hashlib.sha256(m.data()).digest() == hashlib.sha256(data).digest() and m.partition_key() == "big"

    our_consumer = ours.subscribe(f"{topic}-b", "s")
    official_producer = client.create_producer(f"{topic}-b", chunking_enabled=True, batching_enabled=False)
    official_producer.send(data, partition_key="big")
    got = our_consumer.receive(60_000)
    assert hashlib.sha256(got.value).digest() == hashlib.sha256(data).digest() and got.key == "big"
    assert got.message_id.first_chunk is not None and got.message_id.first_chunk < got.message_id


def _random_keys(n: int) -> list[str]:
    rnd = random.Random(2024)
    alphabet = string.ascii_letters + string.digits + "-_:./ éßü✓漢字"
    return [f"{i}-" + "".join(rnd.choices(alphabet, k=rnd.randint(0, 40))) for i in range(n)]


def test_same_key_same_partition_as_the_official_client(ours: Any, client: Any, broker: BrokerProcess,
                                                          topic: str) -> None:
    keys = _random_keys(10_000)
    # In process: every partition count 1..64, our router against the BoostHash rule.
    chooser = PartitionChooser("round_robin", "boost", batching_enabled=True, batching_max_publish_delay_ms=10,
                               partition_switch_frequency=10)
    for key in keys:
        h = boost_hash(key)
        for n in range(1, 65):
            assert chooser.choose(ProducerMessage(b"", key=key), n) == sign_safe_mod(h, n)

    # End to end: the official producer routes all 10 000 keys over partitioned topics of several
    # sizes; each message id says which partition it chose, and velamq's producer chooses the same.
    sizes = [1, 2, 3, 7, 16, 31, 64]
    for n in sizes:
        create_partitioned_topic(broker.admin_url, f"{topic}-{n}", n)
    official = {n: client.create_producer(f"{topic}-{n}", batching_enabled=True, batching_max_publish_delay_ms=5,
                                         block_if_queue_full=True, max_pending_messages=5000)
                for n in sizes}
    chosen: dict[int, int] = {}
    lock = threading.Lock()
    done = threading.Event()

    def callback(i: int) -> Any:
        def cb(res: Any, msg_id: Any) -> None:
            # Never raise here: this runs on the official client's own thread.
            with lock:
                chosen[i] = msg_id.partition() if res == pulsar.Result.Ok else -2
                if len(chosen) == len(keys):
                    done.set()
        return cb

    for i, key in enumerate(keys):
        official[sizes[i % len(sizes)]].send_async(b"k", callback(i), partition_key=key)
    for p in official.values():
        p.flush()
    assert done.wait(120), f"{len(chosen)} of {len(keys)} receipts"
    mismatches = [(k, sizes[i % len(sizes)], chosen[i]) for i, k in enumerate(keys)
                  if chosen[i] != sign_safe_mod(boost_hash(k), sizes[i % len(sizes)])]
    assert mismatches == []

    ours_by_size = {n: ours.create_producer(f"{topic}-{n}", batching_enabled=True) for n in sizes}
    sample = list(range(0, len(keys), 25))
    futures = {i: ours_by_size[sizes[i % len(sizes)]].send_async(b"k", key=keys[i]) for i in sample}
    assert {i: f.result(60).partition for i, f in futures.items()} == \
        {i: chosen[i] if sizes[i % len(sizes)] > 0 else -1 for i in sample}
