"""Batch reads and writes through the `velamq` Spark data source (SP-1, SP-3, SP-5).

One SparkSession for the module. The format is used without velamq.spark.register: the installed
top-level module pyspark_velamq registers it, which these tests therefore also check.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any

import pulsar
import pytest
from spark_helpers import admin, create_partitioned, payload, produce, source_options

from velamq.client import MessageId
from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(600)


def _read(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    return spark.read.format("velamq").options(**source_options(broker, **options)).load()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_batch_read_of_100k_messages_across_4_partitions(spark: Any, broker: BrokerProcess) -> None:
    topic = _name("batch100k")
    create_partitioned(broker.admin_url, topic, 4)
    n = 100_000
    produce(broker.service_url, topic, range(n), properties=True)

    df = _read(spark, broker, topic=topic)
    assert df.columns == ["key", "value", "topic", "partition", "messageId", "publishTime", "eventTime",
                          "properties"]
    rows = df.collect()
    assert len(rows) == n
    values = sorted(r.value for r in rows)
    assert values == [payload(i) for i in range(n)]  # every message once, nothing else
    assert {r.partition for r in rows} == {0, 1, 2, 3}
    full = f"persistent://public/default/{topic}"
    for r in rows[:: n // 500]:
        i = int(r.value[2:])
        assert r.key == f"k{i}" and r.topic == full and r.properties == {"i": str(i)}
        assert int(r.eventTime.timestamp() * 1000) == 1_700_000_000_000 + i
        mid = MessageId.deserialize(r.messageId)
        assert mid.partition == r.partition and mid.ledger_id >= 0
        assert pulsar.MessageId.deserialize(r.messageId).partition() == r.partition
    # Within a partition the ids are strictly increasing in the order of the range.
    by_partition: dict[int, list[Any]] = {}
    for r in rows:
        by_partition.setdefault(r.partition, []).append(MessageId.deserialize(r.messageId))
    for ids in by_partition.values():
        assert all(a < b for a, b in itertools.pairwise(ids))

    # A bounded range (start, end] on one partition, ids given in both accepted forms.
    p0 = by_partition[0]
    start, end = p0[100], p0[300]
    names = [f"{full}-partition-{i}" for i in range(4)]
    starting = {names[0]: list(start.serialize())}
    ending = {names[0]: {"ledgerId": end.ledger_id, "entryId": end.entry_id, "batchIndex": end.batch_index},
              **{name: "earliest" for name in names[1:]}}
    ranged = _read(spark, broker, topic=topic, startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending))
    got = [MessageId.deserialize(r.messageId) for r in ranged.orderBy("messageId").collect()]
    assert sorted(got) == p0[101:301]


def test_starting_time_and_latest(spark: Any, broker: BrokerProcess) -> None:
    topic = _name("bytime")
    produce(broker.service_url, topic, range(100))
    # Publish times are stamped by the producing client: the first 100 are at or before sent_ms, the
    # boundary is a later millisecond, and the rest are published after it was taken.
    sent_ms = time.time_ns() // 1_000_000
    while (boundary_ms := time.time_ns() // 1_000_000) <= sent_ms:
        time.sleep(0.001)
    produce(broker.service_url, topic, range(100, 250))
    got = sorted(r.value for r in _read(spark, broker, topic=topic, startingTime=str(boundary_ms)).collect())
    assert got == [payload(i) for i in range(100, 250)]
    assert _read(spark, broker, topic=topic, startingOffsets="latest").count() == 0
    assert _read(spark, broker, topics=f"{topic},{_name('missing')}", includeProperties="false").count() == 250


def test_topics_pattern(spark: Any, broker: BrokerProcess) -> None:
    prefix = _name("pat")
    create_partitioned(broker.admin_url, f"{prefix}-a", 2)
    produce(broker.service_url, f"{prefix}-a", range(30))
    produce(broker.service_url, f"{prefix}-b", range(30, 50))
    produce(broker.service_url, f"other-{prefix}", range(50, 60))
    df = _read(spark, broker, topicsPattern=f"persistent://public/default/{prefix}-.*")
    assert sorted(r.value for r in df.collect()) == [payload(i) for i in range(50)]


def test_reads_what_the_official_client_wrote_and_the_official_client_reads_the_sink(
        spark: Any, broker: BrokerProcess) -> None:
    source, sink = _name("official-in"), _name("official-out")
    create_partitioned(broker.admin_url, source, 3)
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(source, batching_enabled=True, batching_max_messages=50,
                                          compression_type=pulsar.CompressionType.LZ4)
        for i in range(300):
            producer.send_async(payload(i), None, partition_key=f"k{i}", properties={"n": str(i)},
                                event_timestamp=1_600_000_000_000 + i)
        producer.send(payload(300), partition_key="k300")  # an unbatched-sized tail, then wait for all
        producer.flush()

        rows = _read(spark, broker, topic=source).collect()
        assert sorted(r.value for r in rows) == [payload(i) for i in range(301)]
        one = next(r for r in rows if r.value == payload(7))
        assert one.key == "k7" and one.properties == {"n": "7"}
        assert int(one.eventTime.timestamp() * 1000) == 1_600_000_000_007

        # Read and write back as it is: extra columns (partition, messageId ...) are ignored.
        _read(spark, broker, topic=source).write.format("velamq").options(
            **source_options(broker, topic=sink)).mode("append").save()
        consumer = client.subscribe(sink, "check", initial_position=pulsar.InitialPosition.Earliest)
        got: dict[bytes, Any] = {}
        for _ in range(301):
            message = consumer.receive(10_000)
            got[message.data()] = message
        assert sorted(got) == [payload(i) for i in range(301)]
        m = got[payload(42)]
        assert m.partition_key() == "k42" and m.properties() == {"n": "42"}
        assert m.event_timestamp() == 1_600_000_000_042
        assert m.producer_name().startswith("velamq-spark-")
        with pytest.raises(pulsar.Timeout):
            consumer.receive(500)
    finally:
        client.close()
    assert admin(broker.admin_url, "GET", f"/admin/v2/persistent/public/default/{sink}/deduplicationEnabled")


def test_batch_write_from_columns(spark: Any, broker: BrokerProcess) -> None:
    a, b = _name("col-a"), _name("col-b")
    rows = [(f"{a if i % 3 else b}", f"key{i}", f"value {i}", {"p": str(i)}, i * 1000) for i in range(60)]
    df = spark.createDataFrame(rows, "topic string, key string, value string, properties map<string,string>, "
                                     "t long").selectExpr("topic", "key", "value", "properties",
                                                          "timestamp_millis(t) as eventTime")
    df.write.format("velamq").options(**source_options(broker)).mode("append").save()
    got_a = _read(spark, broker, topic=a).collect()
    got_b = _read(spark, broker, topic=b).collect()
    assert len(got_a) == 40 and len(got_b) == 20
    r = next(r for r in got_b if r.key == "key3")
    assert r.value == b"value 3" and r.properties == {"p": "3"} and int(r.eventTime.timestamp()) == 3


# Checked when the DataFrame is loaded; the last two only once Spark plans the read (before any task):
# the kind of read and the topic's partitions are not known earlier.
@pytest.mark.parametrize(("options", "message"), [
    ({"topic": "t", "bogus": "1"}, "unknown option 'bogus'"),
    ({"topic": "t", "topics": "u"}, "exactly one of 'topic', 'topics' or 'topicsPattern'"),
    ({}, "exactly one of 'topic', 'topics' or 'topicsPattern' (got none)"),
    ({"topic": "t", "startingOffsets": "{not json"}, "option 'startingOffsets' must be earliest, latest or"),
    ({"topic": "t", "startingOffsets": '{"t": {"ledgerId": 1}}'}, "needs ledgerId and entryId"),
    ({"topic": "t", "startingOffsets": "earliest", "startingTime": "0"}, "'startingOffsets' and 'startingTime'"),
    ({"topic": "t", "failOnDataLoss": "maybe"}, "option 'failOnDataLoss' must be true or false"),
    ({"topic": "t", "startingTime": "yesterday"}, "option 'startingTime' must be epoch milliseconds"),
    ({"topic": "t", "maxEntriesPerTrigger": "10"}, "option 'maxEntriesPerTrigger' does not apply to a batch read"),
    ({"topic": "t", "endingOffsets": "earliest"}, "option 'endingOffsets' cannot be 'earliest'"),
    ({"topic": "t", "startingOffsets": '{"other": "latest"}'}, "names ['persistent://public/default/other']"),
])
def test_bad_read_options_fail_at_once_naming_the_option(spark: Any, broker: BrokerProcess, options: dict[str, str],
                                                          message: str) -> None:
    planned = "maxEntriesPerTrigger" in options or "other" in options.get("startingOffsets", "")
    with pytest.raises(Exception) as info:
        df = _read(spark, broker, **options)
        assert planned, "load() should have failed"
        df.collect()
    assert message in str(info.value)


def test_bad_urls_and_bad_writes(spark: Any, broker: BrokerProcess) -> None:
    def load(**options: str) -> None:
        spark.read.format("velamq").options(**options).load().collect()

    with pytest.raises(Exception) as info:
        load(topic="t", **{"admin.url": broker.admin_url})
    assert "option 'service.url' is required" in str(info.value)
    with pytest.raises(Exception) as info:
        load(topic="t", **{"service.url": "http://x:1", "admin.url": broker.admin_url})
    assert "option 'service.url' must be pulsar://" in str(info.value)
    df = spark.createDataFrame([("k", "v")], "key string, v string")
    with pytest.raises(Exception) as info:
        df.write.format("velamq").options(**source_options(broker, topic="t")).mode("append").save()
    assert "needs a 'value' column" in str(info.value)
    good = df.withColumnRenamed("v", "value")
    with pytest.raises(Exception) as info:
        good.write.format("velamq").options(**source_options(broker, topic="t")).mode("overwrite").save()
    assert "append-only" in str(info.value)
    with pytest.raises(Exception) as info:
        good.write.format("velamq").options(**source_options(broker)).mode("append").save()
    assert "needs the 'topic' option or a 'topic' column" in str(info.value)
    with pytest.raises(Exception) as info:
        good.write.format("velamq").options(**source_options(broker, topic="t", startingOffsets="earliest")) \
            .mode("append").save()
    assert "option 'startingOffsets' is for reads" in str(info.value)


def test_fail_on_data_loss(spark: Any, broker: BrokerProcess) -> None:
    """A start position in a ledger the topic no longer has (as after retention deleted it)."""
    topic = _name("loss")
    produce(broker.service_url, topic, range(50))
    first = MessageId.deserialize(_read(spark, broker, topic=topic).orderBy("messageId").first().messageId)
    gone = json.dumps({topic: {"ledgerId": first.ledger_id - 1, "entryId": 5}})
    with pytest.raises(Exception) as info:
        _read(spark, broker, topic=topic, startingOffsets=gone).collect()
    assert "are no longer stored" in str(info.value) and "failOnDataLoss=false" in str(info.value)
    rows = _read(spark, broker, topic=topic, startingOffsets=gone, failOnDataLoss="false").collect()
    assert sorted(r.value for r in rows) == [payload(i) for i in range(50)]
