"""velamq's client against a real velamq broker: produce, consume, acknowledge, redeliver, read,
seek, chunk (PR-*, CH-*, CO-* client side). One broker for the module; each test its own topics."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from typing import Any

import pytest
from client_helpers import run_with_client as run
from wait_helpers import until

from velamq.client import (
    AsyncClient,
    Client,
    ConsumerConfig,
    DeadLetterPolicy,
    Message,
    MessageId,
    MessageTooBigError,
    OperationTimeoutError,
    ProducerInterceptor,
    ProducerMessage,
)
from velamq.testing import BrokerProcess

receive_timeout_ms = 10_000
quiet_ms = 500


def create_partitioned_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/partitions"
    req = urllib.request.Request(url, data=json.dumps(partitions).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status in (200, 204)


async def receive_n(consumer: Any, n: int, ack: bool = True) -> list[Message]:
    out = []
    for _ in range(n):
        m = await consumer.receive(receive_timeout_ms)
        out.append(m)
        if ack:
            await consumer.acknowledge(m)
    return out


async def assert_quiet(consumer: Any) -> None:
    with pytest.raises(OperationTimeoutError):
        m = await consumer.receive(quiet_ms)
        raise AssertionError(f"unexpected message {m}")


@pytest.mark.parametrize("batching", [False, True])
def test_every_codec_round_trips_with_keys_properties_and_event_time(broker: BrokerProcess, topic: str,
                                                                     batching: bool) -> None:
    async def body(client: AsyncClient) -> None:
        for codec in ("none", "lz4", "zlib", "zstd", "snappy"):
            t = f"{topic}-{codec}"
            consumer = await client.subscribe(t, "s", initial_position="earliest")
            producer = await client.create_producer(t, batching_enabled=batching, compression_type=codec)
            futures = [await producer.send_async(b"v%d" % i * 20, key=f"k{i % 4}", properties={"i": str(i)},
                                                 event_time=1000 + i) for i in range(30)]
            ids = await asyncio.gather(*futures)
            assert ids == sorted(ids) and len(set(ids)) == 30
            got = await receive_n(consumer, 30)
            assert [m.value for m in got] == [b"v%d" % i * 20 for i in range(30)]
            assert [m.key for m in got] == [f"k{i % 4}" for i in range(30)]
            assert [m.properties for m in got] == [{"i": str(i)} for i in range(30)]
            assert [m.event_time for m in got] == [1000 + i for i in range(30)]
            assert [m.message_id for m in got] == ids
            assert all(m.topic.endswith(t) and m.publish_time > 0 for m in got)
            if batching:
                assert ids[0].batch_index == 0 and ids[0].batch_size > 1
            await producer.close()
            await consumer.close()

    run(broker, body)


def test_shared_and_key_shared_split_the_work(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        for sub_type in ("shared", "key_shared"):
            t = f"{topic}-{sub_type}"
            c1 = await client.subscribe(t, "s", subscription_type=sub_type, receiver_queue_size=10)
            c2 = await client.subscribe(t, "s", subscription_type=sub_type, receiver_queue_size=10)
            producer = await client.create_producer(t)
            await asyncio.gather(*[await producer.send_async(b"%d" % i, key=f"key-{i % 10}") for i in range(100)])
            got: dict[int, list[Message]] = {0: [], 1: []}

            async def drain(i: int, c: Any, got: dict[int, list[Message]] = got) -> None:
                # Until both together have all 100 (a receive that times out is no proof that the
                # broker is done dispatching on a loaded machine).
                while len(got[0]) + len(got[1]) < 100:
                    try:
                        m = await c.receive(200)
                    except OperationTimeoutError:
                        continue
                    got[i].append(m)
                    await c.acknowledge(m)

            await asyncio.gather(drain(0, c1), drain(1, c2))
            values = sorted(int(m.value) for m in got[0] + got[1])
            assert values == list(range(100))
            assert got[0] and got[1]
            if sub_type == "key_shared":
                keys0, keys1 = {m.key for m in got[0]}, {m.key for m in got[1]}
                assert not keys0 & keys1
            await asyncio.gather(c1.close(), c2.close(), producer.close())

    run(broker, body)


def test_negative_ack_ack_timeout_and_redelivery_count(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        consumer = await client.subscribe(topic, "s", subscription_type="shared",
                                          negative_ack_redelivery_delay_ms=100, ack_timeout_ms=1000,
                                          ack_timeout_tick_ms=100)
        producer = await client.create_producer(topic)
        await producer.send(b"a")
        m = await consumer.receive(receive_timeout_ms)
        assert m.redelivery_count == 0
        await consumer.negative_acknowledge(m)
        m = await consumer.receive(receive_timeout_ms)
        assert (m.value, m.redelivery_count) == (b"a", 1)
        # Not acknowledged: the ack timeout brings it back.
        m = await consumer.receive(receive_timeout_ms)
        assert (m.value, m.redelivery_count) == (b"a", 2)
        await consumer.acknowledge(m)
        await assert_quiet(consumer)

    run(broker, body)


def test_dead_letter_topic_after_max_redeliveries(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        dlq = f"{topic}-dlq"
        consumer = await client.subscribe(topic, "s", subscription_type="shared",
                                          dead_letter_policy=DeadLetterPolicy(2, dlq))
        dlq_consumer = await client.subscribe(dlq, "d", subscription_type="shared")
        producer = await client.create_producer(topic)
        for i in range(3):
            await producer.send(b"m%d" % i, properties={"p": "v"})
        for _ in range(3):  # delivered with redelivery counts 0, 1, 2; then dead-lettered
            await receive_n(consumer, 3, ack=False)
            await consumer.redeliver_unacknowledged_messages()
        await assert_quiet(consumer)
        dead = await receive_n(dlq_consumer, 3)
        assert sorted(m.value for m in dead) == [b"m0", b"m1", b"m2"]
        assert all(m.properties["p"] == "v" and m.properties["REAL_TOPIC"].endswith(topic) for m in dead)
        assert all("ORIGIN_MESSAGE_ID" in m.properties for m in dead)

    run(broker, body)


def test_cumulative_and_batch_index_acks(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                                batching_max_publish_delay_ms=50)
        consumer = await client.subscribe(topic, "s", batch_index_ack_enabled=True, ack_grouping_time_ms=10)
        await asyncio.gather(*[await producer.send_async(b"%d" % i) for i in range(20)])
        got = await receive_n(consumer, 20, ack=False)
        assert got[0].message_id.batch_size == 10
        await consumer.acknowledge(got[3])  # one index of the first batch
        await consumer.acknowledge_cumulative(got[12])  # first batch and 3 of the second
        await consumer.close()
        again = await client.subscribe(topic, "s", batch_index_ack_enabled=True)
        rest = await receive_n(again, 7)
        assert [int(m.value) for m in rest] == list(range(13, 20))
        await assert_quiet(again)

    run(broker, body)


def test_partitioned_topic_routing_and_multi_topic_pattern(broker: BrokerProcess, topic: str) -> None:
    create_partitioned_topic(broker, topic, 4)

    async def body(client: AsyncClient) -> None:
        assert len(await client.get_topic_partitions(topic)) == 4
        consumer = await client.subscribe(topic, "s", subscription_type="shared")
        producer = await client.create_producer(topic)
        ids = [await producer.send(b"%d" % i, key=f"k{i % 8}") for i in range(40)]
        assert {mid.partition for mid in ids} <= set(range(4))
        by_key = {}
        for i, mid in enumerate(ids):
            assert by_key.setdefault(f"k{i % 8}", mid.partition) == mid.partition
        rr = [await producer.send(b"x") for _ in range(8)]
        assert {mid.partition for mid in rr} == set(range(4))  # round robin, unbatched
        got = await receive_n(consumer, 48)
        assert sorted(m.value for m in got) == sorted([b"%d" % i for i in range(40)] + [b"x"] * 8)
        assert all(m.partition == m.message_id.partition >= 0 for m in got)

        lazy = await client.create_producer(topic, lazy_start_partitioned_producers=True)
        assert lazy.partition_producers == []
        mid = await lazy.send(b"lazy", key="k0")
        assert [p.partition for p in lazy.partition_producers] == [mid.partition]
        await receive_n(consumer, 1)

        other = f"{topic}-other"
        p2 = await client.create_producer(other)
        multi = await client.subscribe([topic, other], "multi", initial_position="earliest")
        pattern = await client.subscribe(None, "pat", topics_pattern=re.compile(f"public/default/{topic}.*"),
                                         initial_position="earliest")
        await p2.send(b"other")
        for c in (multi, pattern):
            values = [m.value for m in await receive_n(c, 50)]
            assert values.count(b"other") == 1 and values.count(b"lazy") == 1

    run(broker, body)


def test_reader_start_positions_and_has_message_available(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=5)
        ids = await asyncio.gather(*[await producer.send_async(b"%d" % i) for i in range(10)])
        latest = await client.create_reader(topic, "latest")
        assert not await latest.has_message_available()
        earliest = await client.create_reader(topic, "earliest")
        assert await earliest.has_message_available()
        assert [m.value for m in [await earliest.read_next(receive_timeout_ms) for _ in range(10)]] == \
            [b"%d" % i for i in range(10)]
        assert not await earliest.has_message_available()
        exclusive = await client.create_reader(topic, ids[6])
        assert (await exclusive.read_next(receive_timeout_ms)).value == b"7"
        inclusive = await client.create_reader(topic, ids[6], start_message_id_inclusive=True)
        assert (await inclusive.read_next(receive_timeout_ms)).value == b"6"
        from_bytes = await client.create_reader(topic, ids[2].serialize(), start_message_id_inclusive=True)
        assert (await from_bytes.read_next(receive_timeout_ms)).value == b"2"
        await producer.send(b"10")
        assert await latest.has_message_available()
        assert (await latest.read_next(receive_timeout_ms)).value == b"10"

    run(broker, body)


def test_seek_by_id_and_by_time(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        producer = await client.create_producer(topic)
        consumer = await client.subscribe(topic, "s", initial_position="earliest")
        ids = [await producer.send(b"%d" % i) for i in range(10)]
        got = await receive_n(consumer, 10)
        await consumer.seek(ids[4])
        assert [m.value for m in await receive_n(consumer, 6)] == [b"%d" % i for i in range(4, 10)]
        await consumer.seek(got[7].publish_time)
        first = await consumer.receive(receive_timeout_ms)
        assert int(first.value) <= 7
        await consumer.seek(MessageId.earliest)
        assert (await consumer.receive(receive_timeout_ms)).value == b"0"

    run(broker, body)


def test_chunked_messages_and_seek_to_a_chunked_id(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        producer = await client.create_producer(topic, chunking_enabled=True, chunk_max_message_bytes=4096,
                                                compression_type="zstd")
        other = await client.create_producer(topic, chunking_enabled=True, chunk_max_message_bytes=4096)
        consumer = await client.subscribe(topic, "s", initial_position="earliest")
        big = bytes(range(256)) * 200  # zstd keeps it above one chunk? random-ish: use os.urandom below
        import os
        payloads = [os.urandom(20_000), big, os.urandom(9000)]
        futures = [await producer.send_async(payloads[0]), await other.send_async(payloads[2]),
                   await producer.send_async(payloads[1]), await producer.send_async(b"small")]
        ids = await asyncio.gather(*futures)
        assert ids[0].first_chunk is not None and ids[0].first_chunk < ids[0]
        assert ids[3].first_chunk is None
        got = await receive_n(consumer, 4)
        assert [m.value for m in got] == [payloads[0], payloads[2], payloads[1], b"small"]
        assert got[0].message_id == ids[0] and got[0].message_id.first_chunk == ids[0].first_chunk
        await consumer.seek(ids[0])
        again = await consumer.receive(receive_timeout_ms)
        assert again.value == payloads[0]
        reader = await client.create_reader(topic, ids[0])
        assert (await reader.read_next(receive_timeout_ms)).value == payloads[2]
        unchunked = await client.create_producer(f"{topic}-plain", chunk_max_message_bytes=None)
        with pytest.raises(MessageTooBigError):
            await unchunked.send(b"x" * (6 * 1024 * 1024))

    run(broker, body)


def test_interceptors_see_and_change_messages(broker: BrokerProcess, topic: str) -> None:
    acks: list[tuple[bytes, MessageId | None]] = []

    class Tag(ProducerInterceptor):
        def before_send(self, producer: Any, message: ProducerMessage) -> ProducerMessage:
            import dataclasses
            return dataclasses.replace(message, properties={**message.properties, "tagged": "yes"})

        def on_acknowledgement(self, producer: Any, message: ProducerMessage, message_id: MessageId | None,
                               error: BaseException | None) -> None:
            acks.append((message.value, message_id))

    async def body(client: AsyncClient) -> None:
        consumer = await client.subscribe(topic, "s")
        producer = await client.create_producer(topic, interceptors=[Tag()])
        mid = await producer.send(b"a", properties={"x": "1"})
        m = await consumer.receive(receive_timeout_ms)
        assert m.properties == {"x": "1", "tagged": "yes"}
        assert acks == [(b"a", mid)]

    run(broker, body)


def test_failover_active_consumer_change(broker: BrokerProcess, topic: str) -> None:
    events: list[bool] = []

    async def body(client: AsyncClient) -> None:
        config = ConsumerConfig(subscription_type="failover", consumer_event_listener=lambda c, a: events.append(a))
        c1 = await client.subscribe(topic, "s", config, consumer_name="a")
        c2 = await client.subscribe(topic, "s", config, consumer_name="b")
        producer = await client.create_producer(topic)
        await producer.send(b"x")
        first = await asyncio.wait_for(asyncio.shield(_first_of(c1, c2)), 10)
        assert first.value == b"x"
        # ACTIVE_CONSUMER_CHANGE tells the first consumer it is the active one.
        await until(lambda: True in events, "an ACTIVE_CONSUMER_CHANGE naming a consumer active")
        assert c1.children[0].is_active is True and c2.children[0].is_active is not True
        await c1.close()
        await c2.close()

    run(broker, body)


async def _first_of(*consumers: Any) -> Message:
    tasks = [asyncio.ensure_future(c.receive()) for c in consumers]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    return next(iter(done)).result()  # type: ignore[no-any-return]


def test_blocking_client_has_the_same_calls(broker: BrokerProcess, topic: str) -> None:
    with Client(broker.service_url) as client:
        consumer = client.subscribe(topic, "s", subscription_type="shared")
        producer = client.create_producer(topic, batching_enabled=True)
        results: list[Any] = []
        futures = [producer.send_async(b"%d" % i, callback=lambda mid, err: results.append((mid, err)))
                   for i in range(10)]
        ids = [f.result(10) for f in futures]
        assert producer.send(b"last") > ids[-1]
        got = [consumer.receive(receive_timeout_ms) for _ in range(11)]
        for m in got:
            consumer.acknowledge(m)
        assert [m.value for m in got] == [b"%d" % i for i in range(10)] + [b"last"]
        assert len(results) == 10 and all(err is None for _, err in results)
        reader = client.create_reader(topic, "earliest")
        assert reader.read_next(receive_timeout_ms).value == b"0"
        assert reader.has_message_available()
