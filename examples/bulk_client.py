"""velamq's client in bulk: many values in one call, batches out, Arrow both ways (docs/client.md).

    .venv/bin/velamq standalone &                   # or any Pulsar broker
    .venv/bin/python examples/bulk_client.py --service-url pulsar://localhost:6650

Needs pyarrow for the Arrow parts (pip install 'velamq[arrow]').
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

import pyarrow as pa

from velamq.client import AsyncClient, BatchReceivePolicy, Client


async def bulk(service_url: str, topic: str, n: int) -> int:
    async with AsyncClient(service_url) as client:
        producer = await client.create_producer(
            topic, batching_enabled=True, batching_max_messages=1000, compression_type="lz4",
            max_pending_messages=10_000, block_if_queue_full=True)
        consumer = await client.subscribe(
            topic, "bulk-example", initial_position="earliest",
            batch_receive_policy=BatchReceivePolicy(max_num_messages=5000, timeout_ms=100))

        # Many values in one call: routed, batched, compressed and receipted as send() would,
        # without an object or a future per message. The ids come back in the order of the values.
        ids = await producer.send_many([b"event-%d" % i for i in range(n)],
                                       keys=[f"user-{i % 100}" for i in range(n)],
                                       properties=[{"source": "example"}] * n)
        print(f"sent {len(ids)} messages, the last one is {ids[-1]}")

        # An Arrow table: value, and optionally key, properties, event_time (or eventTime).
        table = pa.table({"value": [b"a", b"b"], "key": ["k1", None],
                          "event_time": pa.array([1_700_000_000_000, None], pa.timestamp("ms"))})
        await producer.send_many(table)

        # Batches in: a Messages per call (a sequence of Message, made only when you index it),
        # its Arrow form with the Spark source's columns, and one acknowledgement for all of it.
        received = 0
        while received < n + 2:
            messages = await consumer.batch_receive()
            record_batch = messages.to_arrow()  # key, value, topic, partition, messageId, publishTime, ...
            received += record_batch.num_rows
            await consumer.acknowledge(messages)  # or: await consumer.acknowledge_cumulative(messages)
        print(f"received {received} messages in batches; the last batch's columns: {record_batch.schema.names}")
        return received


def blocking(service_url: str, topic: str) -> int:
    # The blocking client has the same calls; receive() serves a local prefetch and acknowledge()
    # hands the ack over without a round trip to the client's event loop.
    with Client(service_url) as client:
        consumer = client.subscribe(topic, "blocking-example", initial_position="earliest")
        count = 0
        for message in consumer:
            consumer.acknowledge(message)
            count += 1
            if message.value == b"b":  # the last message the bulk part sent
                break
        print(f"the blocking consumer read {count} messages one by one")
        return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--service-url", default="pulsar://localhost:6650")
    ap.add_argument("--topic", default=f"bulk-example-{uuid.uuid4().hex[:8]}")
    ap.add_argument("-n", type=int, default=100_000)
    args = ap.parse_args(argv)
    received = asyncio.run(bulk(args.service_url, args.topic, args.n))
    return 0 if received == args.n + 2 and blocking(args.service_url, args.topic) == args.n + 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
