"""decodeValues=true: Avro and JSON values decoded into columns by the topic's schema, across two versions."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from spark_helpers import source_options

from velamq.client import AsyncClient, AvroSchema, JsonSchema, Record
from velamq.client.schema import Array, Double, Integer, Long, Map, String
from velamq.spark._schema import VelamqSchemaError
from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(600)


class Item(Record):
    sku = String(required=True)
    qty = Integer(required=True)


class OrderV1(Record):
    id = Long(required=True)
    item = Item(required=True)
    tags = Array(String())
    prices = Map(Double())


class OrderV2(Record):  # adds a field with a default: FULL accepts it, and v1 data reads it as "none"
    id = Long(required=True)
    item = Item(required=True)
    tags = Array(String())
    prices = Map(Double())
    note = String(default="none", required_default=True)


def _produce(broker: BrokerProcess, topic: str, schema_v1: Any, schema_v2: Any) -> None:
    async def run() -> None:
        async with AsyncClient(broker.service_url) as client:
            p1 = await client.create_producer(topic, schema=schema_v1)
            await p1.send(OrderV1(id=1, item=Item(sku="a", qty=2), tags=["x"], prices={"eur": 1.5}))
            p2 = await client.create_producer(topic, schema=schema_v2)
            await p2.send(OrderV2(id=2, item=Item(sku="b", qty=3), tags=[], prices={}, note="fast"))

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_values_decode_into_columns_across_versions(spark: Any, broker: BrokerProcess, kind: str) -> None:
    topic = f"decode-{kind}-{uuid.uuid4().hex[:8]}"
    make = AvroSchema if kind == "avro" else JsonSchema
    _produce(broker, topic, make(OrderV1), make(OrderV2))

    df = spark.read.format("velamq").options(**source_options(broker, topic=topic, decodeValues="true")).load()
    assert df.columns == ["id", "item", "tags", "prices", "note", "__key", "__topic", "__partition", "__messageId",
                          "__publishTime", "__eventTime", "__messageProperties"]
    rows = sorted(df.collect(), key=lambda r: r.id)
    assert [(r.id, r.item.sku, r.item.qty, r.tags, r.prices) for r in rows] == [
        (1, "a", 2, ["x"], {"eur": 1.5}), (2, "b", 3, [], {})]
    # JSON has no resolution: a field the writer lacked is null; Avro fills in the reader's default.
    assert [r.note for r in rows] == (["none", "fast"] if kind == "avro" else [None, "fast"])
    assert {r["__topic"] for r in rows} == {f"persistent://public/default/{topic}"}


def test_plain_reads_keep_bytes_and_a_topic_without_schema_is_refused(spark: Any, broker: BrokerProcess) -> None:
    topic = f"decode-plain-{uuid.uuid4().hex[:8]}"
    _produce(broker, topic, AvroSchema(OrderV1), AvroSchema(OrderV2))
    plain = spark.read.format("velamq").options(**source_options(broker, topic=topic)).load()
    assert [type(r.value) for r in plain.collect()] == [bytes, bytes]

    async def bytes_only() -> None:
        async with AsyncClient(broker.service_url) as client:
            await (await client.create_producer(topic + "-raw")).send(b"x")

    asyncio.run(bytes_only())
    with pytest.raises(Exception, match="has no schema"):
        spark.read.format("velamq").options(**source_options(broker, topic=topic + "-raw",
                                                             decodeValues="true")).load()
    with pytest.raises(Exception, match="needs one topic"):
        spark.read.format("velamq").options(**source_options(broker, topics=f"{topic},{topic}-raw",
                                                             decodeValues="true")).load()
    assert issubclass(VelamqSchemaError, ValueError)
