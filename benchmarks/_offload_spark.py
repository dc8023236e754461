"""benchmarks/offload.py, part c: Spark over a mostly offloaded topic (docs/offload.md).

One broker (offloading every sealed ledger at once, local copies deleted at once, retention off),
one topic of --spark-messages messages of 100 bytes in batches of 1000, all but the last ledger
offloaded; then, each --runs times, median counted:

    velamq, offloadPath      spark.read.format("velamq") with offloadPath -> noop: offloaded
                             ledgers read from their files in the executors, the tail by the broker
    velamq, broker only      the same without offloadPath: every row through the broker (offloaded
                             ledgers rebuilt from the files by the broker)
    spark.read.parquet       Spark's own Parquet reader over the offloaded files -> noop

rows/s counts the rows each read returns (the Parquet read has the offloaded rows only).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from velamq.client import AsyncClient
from velamq.testing import run_broker

ENTRIES_PER_LEDGER = 40  # batches of 1000 messages: 40 000 messages per ledger


def _admin(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _produce(service_url: str, topic: str, n: int) -> None:
    async def run() -> None:
        async with AsyncClient(service_url) as client:
            producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                                    batching_max_publish_delay_ms=10, block_if_queue_full=True)
            body = os.urandom(46).hex().encode()[:92]
            for start in range(0, n, 100_000):
                end = min(n, start + 100_000)
                await producer.send_many([b"%08d" % i + body for i in range(start, end)],
                                         keys=[f"k{i % 1000}" for i in range(start, end)])

    asyncio.run(run())


def _wait_offloaded(admin_url: str, topic: str) -> None:
    path = f"{admin_url}/admin/v2/persistent/public/default/{topic}/internalStats"
    deadline = time.monotonic() + 300
    while True:
        ledgers = _admin(path)["ledgers"]
        if all(ledger["offloaded"] for ledger in ledgers[:-1]):
            metrics = urllib.request.urlopen(f"{admin_url}/metrics", timeout=30).read().decode()
            deleted = [float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                       if line.startswith("velamq_storage_offload_local_deleted_total{")]
            if deleted and deleted[0] >= len(ledgers) - 1:
                return
        if time.monotonic() > deadline:
            raise RuntimeError("the topic was not offloaded in time")
        time.sleep(0.5)


def _timed(action: Any, runs: int) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        count = action()
        times.append(time.perf_counter() - start)
    return statistics.median(times), count


def spark_part(n: int, runs: int, directory: Path) -> list[tuple[str, float, int]]:
    """(case, median seconds, rows) of each read."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    root = directory / "tier"
    conf = directory / "broker.conf"
    conf.write_text(f"managedLedgerOffloadDriver=filesystem\nfileSystemURI={root}\n"
                    "managedLedgerOffloadThresholdInBytes=0\nmanagedLedgerOffloadDeletionLagMs=0\n"
                    "managedLedgerOffloadCheckIntervalSeconds=0.5\n"
                    f"managedLedgerMaxEntriesPerLedger={ENTRIES_PER_LEDGER}\njournalSyncPolicy=none\n"
                    "defaultRetentionTimeInMinutes=-1\ndefaultRetentionSizeInMB=-1\n")
    spark = (SparkSession.builder.master("local[2]").appName("offload-bench").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    topic = f"offload-spark-{uuid.uuid4().hex[:8]}"
    out: list[tuple[str, float, int]] = []
    try:
        with run_broker(directory / "data", config_file=conf) as broker:
            _produce(broker.service_url, topic, n)
            _wait_offloaded(broker.admin_url, topic)
            urls = {"service.url": broker.service_url, "admin.url": broker.admin_url, "topic": topic}
            files = str(root / "persistent" / "public" / "default" / topic)

            def velamq(offloaded: bool) -> int:
                options = {**urls, "offloadPath": str(root)} if offloaded else urls
                df = spark.read.format("velamq").options(**options).load()
                df.write.format("noop").mode("overwrite").save()
                return n

            def parquet() -> int:
                spark.read.parquet(files).write.format("noop").mode("overwrite").save()
                return int(spark.read.parquet(files).count())

            if spark.read.format("velamq").options(**urls, offloadPath=str(root)).load().count() != n:
                raise RuntimeError("the offloadPath read did not return every message")
            for case, action in (("velamq, offloadPath", lambda: velamq(True)),
                                 ("velamq, broker only", lambda: velamq(False)),
                                 ("spark.read.parquet (offloaded files)", parquet)):
                seconds, rows = _timed(action, runs)
                out.append((case, seconds, rows))
    finally:
        spark.stop()
    return out


def print_spark_part(n: int, runs: int, scratch: Path) -> None:
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        results = spark_part(n, runs, Path(tmp))
    parquet_rate = results[-1][2] / results[-1][1]
    print(f"{'Spark read (' + str(n) + ' messages of 100 B)':<40} {'seconds':>8} {'rows':>10} {'rows/s':>12} "
          f"{'vs parquet':>11}")
    for case, seconds, rows in results:
        rate = rows / seconds
        print(f"{case:<40} {seconds:>8.2f} {rows:>10,} {rate:>12,.0f} {rate / parquet_rate:>10.2f}x")
