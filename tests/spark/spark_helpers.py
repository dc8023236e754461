"""Helpers for the Spark data source tests: a quiet local SparkSession, the admin API, fast producing.

Kept in a uniquely named module (not conftest) so test modules and the driver-kill job
(spark_stream_job.py, run as a subprocess) can import plain functions.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from velamq.client import AsyncClient

HERE = Path(__file__).parent
LOG4J = HERE / "log4j2.properties"


def new_spark(app: str) -> Any:
    """A local[2] SparkSession with quiet logs, no UI and no speculation (the sink's ids need one
    attempt per task at a time)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    java_options = f"-Dlog4j2.configurationFile=file:{LOG4J}"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.speculation", "false")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
        .config("spark.sql.streaming.stopTimeout", "60s")
        # Report every trigger, also those without new data (default: one every 10 s), so a test can
        # wait for a number of triggers instead of sleeping.
        .config("spark.sql.streaming.noDataProgressEventInterval", "0")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def admin(admin_url: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{admin_url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
    return json.loads(raw) if raw.strip() else None


def create_partitioned(admin_url: str, topic: str, partitions: int) -> None:
    admin(admin_url, "PUT", f"/admin/v2/persistent/public/default/{topic}/partitions", partitions)


def payload(i: int) -> bytes:
    return b"m-%08d" % i


def produce(service_url: str, topic: str, indexes: Sequence[int], *, batch: int = 500, keyed: bool = True,
            properties: bool = False) -> None:
    """Send payload(i) for each i (key "k<i>") with a batched async producer; waits for every receipt."""

    async def run() -> None:
        async with AsyncClient(service_url) as client:
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_max_messages=batch, batching_max_publish_delay_ms=5,
                block_if_queue_full=True, max_pending_messages=5000, max_pending_messages_across_partitions=20000)
            futures = []
            for i in indexes:
                futures.append(await producer.send_async(
                    payload(i), key=f"k{i}" if keyed else None,
                    properties={"i": str(i)} if properties else None, event_time=1_700_000_000_000 + i))
            await asyncio.gather(*futures)

    asyncio.run(run())


def source_options(broker: Any, **options: str) -> dict[str, str]:
    return {"service.url": broker.service_url, "admin.url": broker.admin_url, **options}


def start_copy_query(spark: Any, service_url: str, admin_url: str, topic: str, checkpoint: str, out: str, *,
                     max_entries: int | None = None, available_now: bool = False) -> Any:
    """The streaming query the exactly-once tests run (also in a subprocess that gets killed):
    a topic's values and partitions, read from the earliest message, to a parquet directory."""
    reader = (spark.readStream.format("velamq").option("service.url", service_url).option("admin.url", admin_url)
              .option("topic", topic).option("startingOffsets", "earliest"))
    if max_entries is not None:
        reader = reader.option("maxEntriesPerTrigger", str(max_entries))
    writer = (reader.load().selectExpr("cast(value as string) as value", "partition", "messageId")
              .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint))
    trigger = {"availableNow": True} if available_now else {"processingTime": "200 milliseconds"}
    return writer.trigger(**trigger).start()


def committed_batches(checkpoint: str | Path) -> int:
    """How many micro-batches the query has committed (files in its checkpoint's commits/)."""
    commits = Path(checkpoint) / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.is_dir() else 0
