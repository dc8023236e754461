"""Streaming reads and writes through the `velamq` data source: exactly-once across a stop, a
driver kill and a replayed micro-batch (SP-1, SP-2, SP-4).

One SparkSession for the module; the driver-kill test runs its query in a subprocess
(spark_stream_job.py) whose whole process group it SIGKILLs, then resumes in this session from
the same checkpoint. Outputs are Spark's parquet file sink, exactly-once through its own log, so
any duplicate or gap comes from the source.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_helpers import (
    HERE,
    admin,
    committed_batches,
    create_partitioned,
    payload,
    produce,
    source_options,
    start_copy_query,
)
from wait_helpers import wait_until

import velamq.spark
from velamq.client import AsyncClient, Message
from velamq.spark._options import SinkOptions
from velamq.spark._sink import _Writer
from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(900)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _output_values(spark: Any, out: Path) -> list[str]:
    return [r.value for r in spark.read.parquet(str(out)).select("value").collect()]


def _assert_exactly_once(values: list[str], expected: range) -> None:
    assert len(values) == len(set(values)), f"{len(values) - len(set(values))} duplicates"
    assert sorted(values) == sorted(payload(i).decode() for i in expected)


def test_register_by_hand(spark: Any) -> None:
    velamq.spark.register(spark)  # harmless next to the automatic registration


def test_stream_stopped_and_restarted_mid_stream_with_a_new_partition(spark: Any, broker: BrokerProcess,
                                                                       tmp_path: Path) -> None:
    topic = _name("restart")
    create_partitioned(broker.admin_url, topic, 2)
    produce(broker.service_url, topic, range(3000), batch=100)
    checkpoint, out = str(tmp_path / "ck"), tmp_path / "out"

    query = start_copy_query(spark, broker.service_url, broker.admin_url, topic, checkpoint, str(out), max_entries=4)
    wait_until(lambda: committed_batches(checkpoint) >= 3, "three micro-batches",
               timeout_s=240, interval_s=0.2)  # a micro-batch on loaded cores: up to a minute
    query.stop()
    read_first = sum(p["numInputRows"] for p in query.recentProgress)
    assert 0 < read_first < 3000, "the first run should stop mid-stream"

    produce(broker.service_url, topic, range(3000, 4000), batch=100)
    admin(broker.admin_url, "POST", f"/admin/v2/persistent/public/default/{topic}/partitions", 3)
    produce(broker.service_url, topic, range(4000, 4600), batch=100)  # keyed: some land in partition 2

    query = start_copy_query(spark, broker.service_url, broker.admin_url, topic, checkpoint, str(out), max_entries=4,
                             available_now=True)
    query.awaitTermination(600)
    assert query.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    _assert_exactly_once([r.value for r in rows], range(4600))
    assert {r.partition for r in rows} == {0, 1, 2}
    # commit() moved the query's durable cursor: it holds retention for what is not read yet.
    stats = admin(broker.admin_url, "GET", f"/admin/v2/persistent/public/default/{topic}-partition-0/internalStats")
    assert any(name.startswith("velamq-spark-") for name in stats["cursors"])


def test_stream_resumes_exactly_once_after_the_driver_is_killed(spark: Any, broker: BrokerProcess,
                                                                 tmp_path: Path) -> None:
    topic = _name("killed")
    create_partitioned(broker.admin_url, topic, 2)
    produce(broker.service_url, topic, range(4000), batch=100)
    checkpoint, out = str(tmp_path / "ck"), tmp_path / "out"
    log_path = tmp_path / "job.log"
    with open(log_path, "w") as log:
        job = subprocess.Popen(
            [sys.executable, str(HERE / "spark_stream_job.py"), broker.service_url, broker.admin_url, topic,
             checkpoint, str(out), "3"],
            cwd=HERE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    try:
        wait_until(lambda: committed_batches(checkpoint) >= 2 or job.poll() is not None, "the job's first batches",
                   timeout_s=300, interval_s=0.2)
        assert job.poll() is None, log_path.read_text()[-3000:]
        produce(broker.service_url, topic, range(4000, 5000), batch=100)  # while it runs
        os.killpg(job.pid, signal.SIGKILL)  # driver, JVM and Python workers at once, mid-stream
        job.wait(60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(60)
    killed_at = committed_batches(checkpoint)
    planned = len([p for p in (Path(checkpoint) / "offsets").iterdir() if p.name.isdigit()])
    print(f"killed after {killed_at} committed and {planned} planned micro-batches")
    assert killed_at >= 2

    produce(broker.service_url, topic, range(5000, 5500), batch=100)
    query = start_copy_query(spark, broker.service_url, broker.admin_url, topic, checkpoint, str(out), max_entries=50,
                             available_now=True)
    query.awaitTermination(600)
    assert query.exception() is None
    _assert_exactly_once(_output_values(spark, out), range(5500))


def test_stream_waits_for_a_topic_created_later_as_partitioned(spark: Any, broker: BrokerProcess,
                                                               tmp_path: Path) -> None:
    topic = _name("later")
    checkpoint, out = str(tmp_path / "ck"), tmp_path / "out"
    query = start_copy_query(spark, broker.service_url, broker.admin_url, topic, checkpoint, str(out))
    try:
        # A few triggers while the topic does not exist: the query must keep going, not fail.
        wait_until(lambda: len(query.recentProgress) >= 3, "three triggers on a topic that does not exist",
               timeout_s=240, interval_s=0.2)  # a micro-batch on loaded cores: up to a minute
        create_partitioned(broker.admin_url, topic, 2)
        produce(broker.service_url, topic, range(200))
        wait_until(lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 200, "the new topic's messages",
               timeout_s=240, interval_s=0.2)  # a micro-batch on loaded cores: up to a minute
    finally:
        query.stop()
    assert query.exception() is None
    _assert_exactly_once(_output_values(spark, out), range(200))


def test_streaming_sink_replayed_batch_adds_no_duplicates(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    source, sink = _name("replay-in"), _name("replay-out")
    create_partitioned(broker.admin_url, source, 2)
    create_partitioned(broker.admin_url, sink, 3)
    produce(broker.service_url, source, range(3000), batch=100, properties=True)
    checkpoint = tmp_path / "ck"

    def run() -> Any:
        query = (spark.readStream.format("velamq").options(**source_options(broker, topic=source,
                                                                            startingOffsets="earliest"))
                 .option("maxEntriesPerTrigger", "10").load()
                 .selectExpr("key", "value", "properties", "eventTime")
                 .writeStream.format("velamq").options(**source_options(broker, topic=sink))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(600)
        assert query.exception() is None
        return query

    first = run()
    last_batch = max(p["batchId"] for p in first.recentProgress if p["numInputRows"] > 0)
    # Forget that the last batch was committed: Spark replays it with the same offsets and batch id.
    for path in (checkpoint / "commits").iterdir():
        if path.name.lstrip(".").split(".")[0] == str(last_batch):
            path.unlink()
    replay = run()
    replayed = [p for p in replay.recentProgress if p["batchId"] == last_batch]
    assert replayed and replayed[0]["numInputRows"] > 0, "the last batch was not replayed"

    messages = asyncio.run(_read_all(broker.service_url, sink))
    values = [m.value for m in messages]
    assert len(values) == 3000 and sorted(values) == [payload(i) for i in range(3000)]
    m = next(m for m in messages if m.value == payload(5))
    assert m.key == "k5" and m.properties == {"i": "5"} and m.event_time == 1_700_000_000_005
    assert m.producer_name.startswith(f"velamq-spark-{first.id}-")
    assert m.sequence_id >> 32 <= last_batch


def test_writer_skips_rows_an_earlier_attempt_stored(broker: BrokerProcess) -> None:
    """A task retried after a partial write: its batches may be cut differently, and the broker
    compares a batch entry's first sequence id, so the sink itself skips what is stored."""
    topic = _name("partial")
    create_partitioned(broker.admin_url, topic, 2)
    options = SinkOptions(broker.service_url, broker.admin_url, f"persistent://public/default/{topic}")

    def batch(lo: int, hi: int) -> Any:
        return pa.RecordBatch.from_pydict({"value": [payload(i) for i in range(lo, hi)],
                                           "key": [None] * (hi - lo)})

    first = asyncio.run(_Writer(options, "velamq-spark-test-0", 0, 7).run(iter([batch(0, 600)])))
    again = asyncio.run(_Writer(options, "velamq-spark-test-0", 0, 7).run(iter([batch(0, 400), batch(400, 1000)])))
    assert (first.sent, again.sent, again.skipped) == (600, 400, 600)
    values = sorted(m.value for m in asyncio.run(_read_all(broker.service_url, topic)))
    assert values == [payload(i) for i in range(1000)]


def test_example_pipeline(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    """examples/pipeline (SP-6): events -> windowed totals -> a topic and parquet, checked by the example."""
    sys.path.insert(0, str(HERE.parent.parent / "examples" / "pipeline"))
    from run_pipeline import run_pipeline

    summary = run_pipeline(spark, broker.service_url, broker.admin_url, str(tmp_path), events=3000)
    assert summary.windows == 25 and len(summary.topic_rows) == 25 and len(summary.parquet_rows) == 25


async def _read_all(service_url: str, topic: str) -> list[Message]:
    """Every message of the topic, read until none is left."""
    async with AsyncClient(service_url) as client:
        consumer = await client.subscribe(topic, "check", initial_position="earliest",
                                          subscription_type="exclusive")
        out: list[Message] = []
        while True:
            try:
                out.append(await consumer.receive(5000))
            except Exception:
                return out
