"""velamq's bulk paths against a real broker (issue 12): send_many and batch_receive give the same
messages as single sends and receives, in both directions with the official client, for every
codec, with keys, properties, event times and chunked messages interleaved; acknowledging a whole
batch leaves exactly the right backlog; the Arrow forms carry the same messages."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pyarrow as pa
import pytest
from client_helpers import run_with_client as run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from interop_helpers import wait_for_backlog

from velamq.client import AsyncClient, AvroSchema, BatchReceivePolicy, Client, Message, Messages, StringSchema
from velamq.client import schema as vs
from velamq.testing import BrokerProcess, run_broker

max_message_bytes = 64 * 1024  # small, so that chunked messages are small too
COMPRESSIONS = ["none", "lz4", "zlib", "zstd", "snappy"]
OFFICIAL_COMPRESSION = {"none": pulsar.CompressionType.NONE, "lz4": pulsar.CompressionType.LZ4,
                        "zlib": pulsar.CompressionType.ZLib, "zstd": pulsar.CompressionType.ZSTD,
                        "snappy": pulsar.CompressionType.SNAPPY}

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8)
_messages = st.lists(st.fixed_dictionaries({
    "value": st.binary(max_size=200),
    "key": st.none() | _text,
    "properties": st.dictionaries(_text, _text, max_size=2),
    "event_time": st.none() | st.integers(min_value=1, max_value=(1 << 45)),
}), min_size=1, max_size=40)
_hypothesis = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with run_broker(extra_args=["--max-message-size", str(max_message_bytes)]) as b:
        yield b


def fields(m: Any) -> tuple[Any, ...]:
    """What a message carries, for either client's Message."""
    if isinstance(m, Message):
        return (m.value, m.key or None, dict(m.properties), m.event_time or None)
    return (m.data(), m.partition_key() or None, dict(m.properties()), m.event_timestamp() or None)


def sent(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(m["value"], m["key"], m["properties"], m["event_time"]) for m in messages]


async def receive_bulk(consumer: Any, n: int) -> list[Message]:
    out: list[Message] = []
    while len(out) < n:
        batch = await consumer.batch_receive(timeout_ms=10_000)
        assert len(batch), f"only {len(out)} of {n} messages came"
        out.extend(batch)
        await consumer.acknowledge(batch)
    return out


@pytest.mark.parametrize("compression", COMPRESSIONS)
@_hypothesis
@given(messages=_messages)
def test_send_many_makes_what_single_sends_make_for_the_official_consumer(
        broker: BrokerProcess, make_client: Any, compression: str, messages: list[dict[str, Any]]) -> None:
    # velamq -> official: one topic written by send_many, one by send_async per message.
    bulk_topic, single_topic = f"bulk-{uuid.uuid4().hex[:8]}", f"single-{uuid.uuid4().hex[:8]}"
    settings_ = {"batching_enabled": True, "batching_max_messages": 7, "compression_type": compression,
                 "block_if_queue_full": True}

    async def body(client: AsyncClient) -> None:
        bulk = await client.create_producer(bulk_topic, **settings_)
        ids = await bulk.send_many([m["value"] for m in messages], keys=[m["key"] for m in messages],
                                   properties=[m["properties"] for m in messages],
                                   event_times=[m["event_time"] for m in messages])
        single = await client.create_producer(single_topic, **settings_)
        futures = [await single.send_async(m["value"], key=m["key"], properties=m["properties"],
                                           event_time=m["event_time"]) for m in messages]
        single_ids = await asyncio.gather(*futures)
        assert [(i.entry_id, i.batch_index, i.batch_size) for i in ids] == \
            [(i.entry_id, i.batch_index, i.batch_size) for i in single_ids]

    official = make_client(broker.service_url)
    consumers = [official.subscribe(t, "s", initial_position=pulsar.InitialPosition.Earliest)
                 for t in (bulk_topic, single_topic)]
    run(broker, body)
    got = [[fields(c.receive(10_000)) for _ in messages] for c in consumers]
    assert got[0] == got[1] == sent(messages)


@pytest.mark.parametrize("compression", COMPRESSIONS)
@_hypothesis
@given(messages=_messages, chunk_every=st.integers(min_value=2, max_value=10))
def test_batch_receive_reads_what_receive_reads_from_the_official_producer(
        broker: BrokerProcess, make_client: Any, compression: str, messages: list[dict[str, Any]],
        chunk_every: int) -> None:
    # official -> velamq: batches of one producer with chunked messages of another interleaved,
    # read by two subscriptions, one with receive(), one with batch_receive().
    topic = f"mixed-{uuid.uuid4().hex[:8]}"
    official = make_client(broker.service_url)
    batched = official.create_producer(topic, batching_enabled=True, batching_max_messages=5,
                                       compression_type=OFFICIAL_COMPRESSION[compression])
    chunked = official.create_producer(topic, batching_enabled=False, chunking_enabled=True,
                                       compression_type=OFFICIAL_COMPRESSION[compression])
    expected = []
    for i, m in enumerate(messages):
        kwargs: dict[str, Any] = {"properties": m["properties"]}
        if m["key"] is not None:
            kwargs["partition_key"] = m["key"]
        if m["event_time"] is not None:
            kwargs["event_timestamp"] = m["event_time"]
        if i % chunk_every == chunk_every - 1:
            batched.flush()  # order: what was batched before goes first
            big = m["value"] + os.urandom(2 * max_message_bytes)  # above the max message size: chunked
            chunked.send(big, **kwargs)
            expected.append((big, m["key"], m["properties"], m["event_time"]))
        else:
            batched.send_async(m["value"], None, **kwargs)
            expected.append((m["value"], m["key"], m["properties"], m["event_time"]))
    batched.flush()

    async def body(client: AsyncClient) -> tuple[list[Any], list[Any]]:
        one = await client.subscribe(topic, "one", initial_position="earliest")
        bulk = await client.subscribe(topic, "bulk", initial_position="earliest")
        singles = []
        for _ in messages:
            m = await one.receive(10_000)
            singles.append(fields(m))
            await one.acknowledge(m)
        return singles, [fields(m) for m in await receive_bulk(bulk, len(messages))]

    singles, bulk = run(broker, body)
    assert singles == bulk == expected


def test_acknowledging_whole_batches_leaves_the_right_backlog(broker: BrokerProcess, topic: str) -> None:
    # 10 entries of 100 messages. Ack 3 whole batch_receive results (300 messages = 3 entries), then
    # a list of the messages of one more entry but one: that entry stays, so 7 entries of backlog
    # become 7 (the partly acknowledged entry still counts), then its last message: 6.
    async def body(client: AsyncClient) -> None:
        consumer = await client.subscribe(topic, "s", initial_position="earliest", receiver_queue_size=1000,
                                          ack_grouping_time_ms=0)
        producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=100,
                                                batching_max_publish_delay_ms=1000)
        await producer.send_many([b"%d" % i for i in range(1000)])
        for _ in range(3):
            batch = await consumer.batch_receive(100, 10_000)
            assert len(batch) == 100 and len(batch.ranges) == 1
            await consumer.acknowledge(batch)
        await asyncio.to_thread(wait_for_backlog, broker.admin_url, topic, "s", 7)
        partial = await consumer.batch_receive(100, 10_000)
        await consumer.acknowledge(list(partial)[:99])
        await asyncio.sleep(0)
        await asyncio.to_thread(wait_for_backlog, broker.admin_url, topic, "s", 7)
        await consumer.acknowledge(partial[99])
        await asyncio.to_thread(wait_for_backlog, broker.admin_url, topic, "s", 6)
        rest = await consumer.batch_receive(600, 10_000)
        assert len(rest) == 600
        await consumer.acknowledge_cumulative(rest)
        await asyncio.to_thread(wait_for_backlog, broker.admin_url, topic, "s", 0)

    run(broker, body)


def test_batch_receive_policy_limits(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        consumer = await client.subscribe(
            topic, "s", initial_position="earliest",
            batch_receive_policy=BatchReceivePolicy(max_num_messages=50, max_num_bytes=1000, timeout_ms=10_000))
        producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=100)
        await producer.send_many([b"x" * 30] * 100)
        by_bytes = await consumer.batch_receive()
        assert len(by_bytes) == 33 and by_bytes.value_bytes == 990  # 1000 bytes: 33 of 30
        by_count = await consumer.batch_receive(max_bytes=0)
        assert len(by_count) == 50
        big = await consumer.batch_receive(max_messages=1000, max_bytes=10, timeout_ms=10_000)
        assert len(big) == 1  # one message even when it is larger than max_bytes
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        rest = await consumer.batch_receive(max_messages=1000, max_bytes=0, timeout_ms=200)
        assert len(rest) == 16 and loop.time() - t0 >= 0.2  # the timeout ends a batch that is not full
        await consumer.acknowledge_cumulative(rest)

    run(broker, body)


def test_arrow_forms(broker: BrokerProcess, topic: str) -> None:
    table = pa.table({"value": pa.array([b"a", b"bb", None], pa.binary()), "key": ["k1", None, "k3"],
                      "properties": pa.array([[("p", "1")], [], None], pa.map_(pa.string(), pa.string())),
                      "eventTime": pa.array([1_700_000_000_000, None, 5], pa.timestamp("ms", tz="UTC"))})

    async def body(client: AsyncClient) -> None:
        producer = await client.create_producer(topic, batching_enabled=True)
        ids = await producer.send_many(table)
        consumer = await client.subscribe(topic, "s", initial_position="earliest")
        messages = await consumer.batch_receive(3, 10_000)
        assert [fields(m) for m in messages] == [(b"a", "k1", {"p": "1"}, 1_700_000_000_000),
                                                 (b"bb", None, {}, None), (b"", "k3", {}, 5)]
        batch = messages.to_arrow()
        assert batch.column("value").to_pylist() == [b"a", b"bb", b""]
        assert batch.column("key").to_pylist() == ["k1", None, "k3"]
        assert batch.column("properties").to_pylist() == [[("p", "1")], [], []]
        assert [m.message_id for m in messages] == list(ids)
        assert batch.column("messageId").to_pylist() == [i.serialize() for i in ids]
        assert batch.column("publishTime").to_pylist()[0] is not None
        assert batch.column("eventTime").cast(pa.int64()).to_pylist() == [1_700_000_000_000_000, None, 5000]
        assert set(batch.column("topic").to_pylist()) == {f"persistent://public/default/{topic}"}
        await consumer.acknowledge(messages)

    run(broker, body)


def test_partitioned_send_many_routes_keys_as_single_sends(broker: BrokerProcess, topic: str) -> None:
    from interop_helpers import create_partitioned_topic

    create_partitioned_topic(broker.admin_url, topic, 4)
    keys = [f"key-{i % 13}" for i in range(200)]

    async def body(client: AsyncClient) -> None:
        producer = await client.create_producer(topic, batching_enabled=True)
        ids = await producer.send_many([b"%d" % i for i in range(200)], keys=keys)
        singles = [await producer.send(b"x", key=k) for k in keys[:13]]
        partition_of = {k: s.partition for k, s in zip(keys[:13], singles, strict=True)}
        assert [i.partition for i in ids] == [partition_of[k] for k in keys]
        consumer = await client.subscribe(topic, "s", initial_position="earliest")
        got = await receive_bulk(consumer, 213)
        for key in set(keys):  # per key, the values in the order sent
            values = [m.value for m in got if m.key == key and m.value != b"x"]
            assert values == [b"%d" % i for i in range(200) if keys[i] == key]

    run(broker, body)


def test_blocking_client_bulk_and_handed_over_acks(broker: BrokerProcess, topic: str) -> None:
    with Client(broker.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=50)
        ids = producer.send_many([b"%d" % i for i in range(500)])
        assert len(ids) == 500
        consumer = client.subscribe(topic, "s", initial_position="earliest", receiver_queue_size=100)
        first = [consumer.receive(10_000) for _ in range(200)]
        for m in first:
            consumer.acknowledge(m)  # handed over without waiting
        rest = consumer.batch_receive(300, 10_000)
        while len(rest) < 300:
            more = consumer.batch_receive(300 - len(rest), 10_000)
            assert len(more)
            rest = Messages(rest.ranges + more.ranges)
        assert [m.value for m in first] + rest.values() == [b"%d" % i for i in range(500)]
        consumer.acknowledge(rest)
        consumer.close()  # the handed-over acks go first
        wait_for_backlog(broker.admin_url, topic, "s", 0)


def test_the_bulk_example_of_the_docs_runs(broker: BrokerProcess) -> None:
    import runpy
    from pathlib import Path

    example = Path(__file__).parents[2] / "examples" / "bulk_client.py"
    main = runpy.run_path(str(example))["main"]
    assert main(["--service-url", broker.service_url, "-n", "5000"]) == 0


def test_blocking_acks_reach_the_broker_when_only_the_client_is_closed(broker: BrokerProcess, topic: str) -> None:
    with Client(broker.service_url) as client:
        client.create_producer(topic, batching_enabled=True).send_many([b"x"] * 100)
        consumer = client.subscribe(topic, "s", initial_position="earliest")
        for _ in range(100):
            consumer.acknowledge(consumer.receive(10_000))
    wait_for_backlog(broker.admin_url, topic, "s", 0)


class Reading(vs.Record):
    sensor = vs.String()
    value = vs.Integer()


def test_bulk_paths_with_schemas(broker: BrokerProcess, topic: str) -> None:
    # send_many encodes with the producer's schema; batch_receive's messages decode with the
    # consumer's (the writer's version fetched first), as receive() does; values() stays the bytes.
    readings = [Reading(sensor=f"s{i % 3}", value=i) for i in range(50)]

    async def body(client: AsyncClient) -> None:
        producer = await client.create_producer(topic, schema=AvroSchema(Reading), batching_enabled=True)
        await producer.send_many(readings)
        strings = await client.create_producer(f"{topic}-s", schema=StringSchema(), batching_enabled=True)
        await strings.send_many(["a", "b", "c"])
        consumer = await client.subscribe(topic, "s", schema=AvroSchema(Reading), initial_position="earliest")
        got = await consumer.batch_receive(50, 10_000)
        assert [(m.value.sensor, m.value.value) for m in got] == [(r.sensor, r.value) for r in readings]
        assert got.values() == [m.data() for m in got]
        single = await client.subscribe(topic, "one", schema=AvroSchema(Reading), initial_position="earliest")
        first = await single.receive(10_000)
        assert (first.value.sensor, first.value.value) == ("s0", 0)
        text = await client.subscribe(f"{topic}-s", "s", schema=StringSchema(), initial_position="earliest")
        assert [m.value for m in await text.batch_receive(3, 10_000)] == ["a", "b", "c"]

    run(broker, body)

    with Client(broker.service_url) as client:  # the blocking prefetch decodes too
        consumer = client.subscribe(topic, "blocking", schema=AvroSchema(Reading), initial_position="earliest")
        assert [consumer.receive(10_000).value.value for _ in range(3)] == [0, 1, 2]
