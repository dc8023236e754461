"""What do schemas cost on the wire? (issue 14: the broker's registry and velamq's client)

Rows, against a broker in this process (one SQLite commit per new version, sync policy none):
  producer, bytes        create_producer + close, no schema
  producer, AVRO         the same with an Avro schema that matches the topic's latest version
  consume, bytes         messages received per second, the payload as it is
  consume, AVRO          the same messages read through AvroSchema (half of them written with an
                         older version: read by Avro resolution into the consumer's record)
  consume, JSON          the same through JsonSchema

    python benchmarks/schema_wire.py [--messages 20000] [--producers 200]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

from _machine import machine_facts

from velamq.broker import BrokerConfig
from velamq.client import AsyncClient, AvroSchema, JsonSchema, Record, Schema
from velamq.client.schema import Double, Integer, Long, String
from velamq.testing import run_broker_in_thread


class EventV1(Record):
    id = Long(required=True)
    name = String()
    amount = Double(required=True)
    count = Integer(required=True)


class EventV2(Record):
    id = Long(required=True)
    name = String()
    amount = Double(required=True)
    count = Integer(required=True)
    note = String(default="", required_default=True)


async def producers_per_s(service_url: str, schema: Schema[Any] | None, n: int) -> float:
    topic = f"bench-producers-{uuid.uuid4().hex[:6]}"
    async with AsyncClient(service_url) as client:
        await (await client.create_producer(topic, schema=schema)).close()  # registers the version
        start = time.perf_counter()
        for _ in range(n):
            await (await client.create_producer(topic, schema=schema)).close()
        return n / (time.perf_counter() - start)


async def fill(service_url: str, topic: str, make: type[Schema[Any]], n: int) -> None:
    async with AsyncClient(service_url) as client:
        for record_cls, part in ((EventV1, n // 2), (EventV2, n - n // 2)):
            producer = await client.create_producer(topic, schema=make(record_cls), batching_enabled=True,
                                                    block_if_queue_full=True)
            futures = [await producer.send_async(record_cls(id=i, name=f"n{i}", amount=i / 3, count=i))
                       for i in range(part)]
            await asyncio.gather(*futures)
            await producer.close()


async def consume_per_s(service_url: str, topic: str, schema: Schema[Any] | None, n: int) -> float:
    async with AsyncClient(service_url) as client:
        consumer = await client.subscribe(topic, f"s-{uuid.uuid4().hex[:6]}", schema=schema,
                                          initial_position="earliest", receiver_queue_size=5000)
        start = time.perf_counter()
        got = 0
        while got < n:
            got += len(await consumer.batch_receive(max_messages=1000, timeout_ms=1000))
        return n / (time.perf_counter() - start)


async def measure(service_url: str, messages: int, producers: int) -> list[tuple[str, float]]:
    rows = [("producer, bytes", await producers_per_s(service_url, None, producers)),
            ("producer, AVRO", await producers_per_s(service_url, AvroSchema(EventV2), producers))]
    for label, make in (("AVRO", AvroSchema), ("JSON", JsonSchema)):
        topic = f"bench-consume-{label.lower()}-{uuid.uuid4().hex[:6]}"
        await fill(service_url, topic, make, messages)
        if label == "AVRO":
            rows.append(("consume, bytes", await consume_per_s(service_url, topic, None, messages)))
        rows.append((f"consume, {label}", await consume_per_s(service_url, topic, make(EventV2), messages)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--producers", type=int, default=200)
    args = parser.parse_args(argv)
    with run_broker_in_thread(config=BrokerConfig(sync_policy="none")) as broker:
        rows = asyncio.run(measure(broker.service_url, args.messages, args.producers))
    print(__doc__.split("\n")[0])
    for name, value in machine_facts(["fastavro"]):
        print(f"  {name}: {value}")
    print(f"\n  {'what':<20}{'per second':>12}{'us each':>10}")
    for name, per_s in rows:
        print(f"  {name:<20}{per_s:>12,.0f}{1e6 / per_s:>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
