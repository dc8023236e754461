"""How fast does the `velamq` Spark data source move rows, next to Spark's own sources? (SP-1)

One run, one local SparkSession, the same N messages of --size bytes in a --partitions topic:

    velamq batch read        spark.read.format("velamq") ... -> write.format("noop")
    velamq streaming read    readStream.format("velamq"), Trigger.AvailableNow -> writeStream noop
    velamq sink write        a DataFrame of the same N rows (key, value) -> write.format("velamq")
    rate -> noop             Spark's `rate` source (rowsPerSecond far above what it can do) -> noop,
                             until N rows went through: Spark's own streaming floor
    parquet read             the same messages written once to Parquet, read -> noop: Spark's own
                             batch floor

With --live B1,B2 (e.g. 1,1000) it measures instead the source's broker path against the producer's
batching (issue 25, DP-3): for each batching, --live-messages keyed messages sent by the official
client (`pulsar-client`, batches of at most B messages; 1: batching off) to a fresh partitioned
topic, read with `format("velamq")` -> noop --runs times (median reported, every run listed), beside
`spark.read.parquet` of the same rows (median too), side by side in one run.

Producing the N messages (velamq's async client, batched, send_many with keys) is timed too, for
context. Each Spark case runs --repeat times (default 2) and its best time counts: on a shared
machine the spread between two runs of the same case is larger than most differences measured. Each Spark
case is timed from the action to its end; rows/s = N / seconds, MB/s counts payload bytes only.

    .venv/bin/python benchmarks/spark_io.py                    # starts its own broker, 1 000 000 messages
    .venv/bin/python benchmarks/spark_io.py --messages 200000
    .venv/bin/python benchmarks/spark_io.py --service-url pulsar://127.0.0.1:6650 --admin-url http://127.0.0.1:8080
    .venv/bin/python benchmarks/spark_io.py --live 1,1000 --live-messages 300000 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from velamq.client import AsyncClient


@dataclass(frozen=True, slots=True)
class Row:
    case: str
    rows: int
    seconds: float
    payload_bytes: int

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / 1e6 / self.seconds if self.seconds > 0 else float("inf")


repeats = 1  # set by --repeat: each Spark case runs this many times and its best time counts


def timed(case: str, rows: int, size: int, action: Callable[[int], Any], times: int | None = None) -> Row:
    best: Row | None = None
    for attempt in range(times or repeats):
        start = time.perf_counter()
        own = action(attempt)  # an action that checks its result afterwards returns its own time
        row = Row(case, rows, own if isinstance(own, float) else time.perf_counter() - start, rows * size)
        print(f"  {case}: {row.seconds:.1f} s, {row.rows_per_s:,.0f} rows/s", flush=True)
        best = row if best is None or row.seconds < best.seconds else best
    assert best is not None
    return best


def produce(service_url: str, topic: str, n: int, size: int) -> None:
    async def run() -> None:
        async with AsyncClient(service_url) as client:
            producer = await client.create_producer(
                topic, batching_enabled=True, batching_max_messages=1000, batching_max_publish_delay_ms=10,
                block_if_queue_full=True, max_pending_messages=5000, max_pending_messages_across_partitions=20000)
            body = os.urandom(size - 8)
            step = 100_000
            for start in range(0, n, step):  # send_many, in slices: the values are built as they go
                end = min(n, start + step)
                await producer.send_many([b"%08d" % i + body for i in range(start, end)],
                                         keys=[f"k{i % 10_000}" for i in range(start, end)])

    asyncio.run(run())


def create_partitioned(admin_url: str, topic: str, partitions: int) -> None:
    request = urllib.request.Request(f"{admin_url}/admin/v2/persistent/public/default/{topic}/partitions",
                                     data=json.dumps(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).read()


def keep_everything(admin_url: str, topic: str) -> None:
    request = urllib.request.Request(f"{admin_url}/admin/v2/persistent/public/default/{topic}/retention",
                                     data=json.dumps({"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).read()


def rate_to_noop(spark: Any, n: int, checkpoint: str) -> None:
    query = (spark.readStream.format("rate").option("rowsPerSecond", str(max(n, 5_000_000)))
             .option("numPartitions", "2").load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(processingTime="0 seconds").start())
    try:
        while sum(p["numInputRows"] for p in query.recentProgress) < n:
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            time.sleep(0.05)
    finally:
        query.stop()


def run_cases(spark: Any, service_url: str, admin_url: str, n: int, size: int, partitions: int,
              workdir: str) -> list[Row]:
    source = f"spark-io-{uuid.uuid4().hex[:8]}"
    create_partitioned(admin_url, source, partitions)
    urls = {"service.url": service_url, "admin.url": admin_url}
    rows = [timed("produce (velamq client, no Spark)", n, size, lambda _: produce(service_url, source, n, size), 1)]

    def velamq_df() -> Any:
        return spark.read.format("velamq").options(**urls, topic=source).load()

    count = velamq_df().count()  # warm-up (Python workers, JIT) and a check
    if count != n:
        raise RuntimeError(f"read {count} rows of {n}")
    rows.append(timed("velamq batch read -> noop", n, size,
                      lambda _: velamq_df().write.format("noop").mode("overwrite").save()))

    def stream(attempt: int) -> None:
        query = (spark.readStream.format("velamq").options(**urls, topic=source, startingOffsets="earliest").load()
                 .writeStream.format("noop").option("checkpointLocation", f"{workdir}/ck-stream-{attempt}")
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        done = sum(p["numInputRows"] for p in query.recentProgress)
        if done != n:
            raise RuntimeError(f"the streaming read saw {done} rows of {n}")

    rows.append(timed("velamq streaming read -> noop", n, size, stream))

    parquet = f"{workdir}/messages.parquet"
    velamq_df().select("key", "value", "topic", "partition", "messageId", "publishTime", "eventTime") \
        .write.mode("overwrite").parquet(parquet)

    def sink(_: int) -> float:  # a topic of its own for every attempt; the check is not timed
        target = f"spark-io-out-{uuid.uuid4().hex[:8]}"
        create_partitioned(admin_url, target, partitions)
        start = time.perf_counter()
        spark.read.parquet(parquet).select("key", "value").write.format("velamq").options(**urls, topic=target) \
            .mode("append").save()
        seconds = time.perf_counter() - start
        written = spark.read.format("velamq").options(**urls, topic=target).load().count()
        if written != n:
            raise RuntimeError(f"the sink wrote {written} messages of {n}")
        return seconds

    rows.append(timed("velamq sink write (key, value)", n, size, sink))
    rows.append(timed("rate -> noop (Spark)", n, 0, lambda a: rate_to_noop(spark, n, f"{workdir}/ck-rate-{a}")))
    rows.append(timed("parquet read -> noop (Spark)", n, size,
                      lambda _: spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()))
    return rows


# ---------------------------------------------------------------------------- the live path (DP-3)


def produce_official(service_url: str, topic: str, n: int, size: int, batching: int) -> None:
    """n keyed messages (10 000 keys) with the official client, in batches of at most `batching`."""
    import pulsar

    client = pulsar.Client(service_url)
    try:
        producer = client.create_producer(
            topic, batching_enabled=batching > 1, batching_max_messages=max(2, batching),
            batching_max_allowed_size_in_bytes=max(128 * 1024, batching * size * 2),
            batching_max_publish_delay_ms=10, block_if_queue_full=True, max_pending_messages=10_000)
        body = os.urandom(size - 8)
        for i in range(n):
            producer.send_async(b"%08d" % i + body, None, partition_key=f"k{i % 10_000}")
        producer.flush()
        producer.close()
    finally:
        client.close()


@dataclass(frozen=True, slots=True)
class LiveRow:
    case: str
    rows: int
    runs: list[float]  # seconds, in the order they ran

    @property
    def median_rows_per_s(self) -> float:
        return self.rows / sorted(self.runs)[len(self.runs) // 2]


def median_runs(case: str, rows: int, runs: int, action: Callable[[], Any]) -> LiveRow:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
        print(f"  {case}: {seconds[-1]:.2f} s, {rows / seconds[-1]:,.0f} rows/s", flush=True)
    return LiveRow(case, rows, seconds)


def run_live(spark: Any, service_url: str, admin_url: str, batchings: list[int], n: int, size: int,
             partitions: int, runs: int, workdir: str) -> list[LiveRow]:
    out: list[LiveRow] = []
    for batching in batchings:
        out += live_case(spark, service_url, admin_url, batching, n, size, partitions, runs, workdir)
    return out


def live_case(spark: Any, service_url: str, admin_url: str, batching: int, n: int, size: int, partitions: int,
              runs: int, workdir: str) -> list[LiveRow]:
    urls = {"service.url": service_url, "admin.url": admin_url}
    topic = f"spark-live-{batching}-{uuid.uuid4().hex[:6]}"
    create_partitioned(admin_url, topic, partitions)
    keep_everything(admin_url, topic)  # no subscription holds them: without retention sealed ledgers go
    start = time.perf_counter()
    produce_official(service_url, topic, n, size, batching)
    print(f"produced {n:,} (batches of {batching}) in {time.perf_counter() - start:.1f} s", flush=True)

    def velamq_df() -> Any:
        return spark.read.format("velamq").options(**urls, topic=topic).load()

    count = velamq_df().count()  # warm-up and a check
    if count != n:
        raise RuntimeError(f"read {count} rows of {n}")
    source = median_runs(f"velamq read, batches of {batching}", n, runs,
                         lambda: velamq_df().write.format("noop").mode("overwrite").save())
    parquet = f"{workdir}/live-{batching}.parquet"
    velamq_df().select("key", "value", "topic", "partition", "messageId", "publishTime", "eventTime") \
        .write.mode("overwrite").parquet(parquet)
    native = median_runs(f"parquet read, the same rows ({batching})", n, runs,
                         lambda: spark.read.parquet(parquet).write.format("noop").mode("overwrite").save())
    return [source, native]


def live_table(rows: list[LiveRow]) -> str:
    lines = ["| case | rows | median rows/s | runs (rows/s, in order) | / parquet |", "|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        parquet = rows[i + 1] if i + 1 < len(rows) and rows[i + 1].case.startswith("parquet") else r
        each = ", ".join(f"{r.rows / s:,.0f}" for s in r.runs)
        ratio = r.median_rows_per_s / parquet.median_rows_per_s
        lines.append(f"| {r.case} | {r.rows:,} | {r.median_rows_per_s:,.0f} | {each} | {ratio:.2f}x |")
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    parquet = next((r for r in rows if r.case.startswith("parquet")), None)
    lines = [f"| {'case':34} | {'rows':>9} | {'seconds':>7} | {'rows/s':>9} | {'MB/s':>6} | {'/ parquet':>9} |",
             f"|{'-' * 36}|{'-' * 11}|{'-' * 9}|{'-' * 11}|{'-' * 8}|{'-' * 11}|"]
    for r in rows:
        ratio = f"{r.rows_per_s / parquet.rows_per_s:.2f}x" if parquet else ""
        mb = f"{r.mb_per_s:6.2f}" if r.payload_bytes else "     -"
        lines.append(f"| {r.case:34} | {r.rows:9,} | {r.seconds:7.2f} | {r.rows_per_s:9,.0f} | {mb} | {ratio:>9} |")
    return "\n".join(lines)


def machine() -> str:
    import pyspark

    cores = os.cpu_count()
    memory = ""
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        memory = f"{int(f.readline().split()[1]) / 2**20:.1f} GiB RAM, "
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{cores} cores, {memory}{platform.system()} {platform.release()}, Python {platform.python_version()}, "
            f"PySpark {pyspark.__version__}, local[2]; load average now {load}")


@contextlib.contextmanager
def broker(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.service_url:
        yield args.service_url, args.admin_url
        return
    from velamq.testing import run_broker

    with run_broker(extra_args=shlex.split(args.broker_args)) as b:
        yield b.service_url, b.admin_url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes (>= 8)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--service-url")
    parser.add_argument("--admin-url", default="http://127.0.0.1:8080")
    parser.add_argument("--broker-args", default="", help="extra `velamq standalone` arguments")
    parser.add_argument("--repeat", type=int, default=2,
                        help="run each Spark case this many times and report its best (the machine is shared)")
    parser.add_argument("--live", default="",
                        help="batchings to measure the source's broker path at, e.g. 1,1000 (skips the other cases)")
    parser.add_argument("--live-messages", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3, help="--live: runs per case (the median is reported)")
    args = parser.parse_args(argv)
    batchings = [int(b) for b in args.live.split(",") if b.strip()]
    global repeats
    repeats = max(1, args.repeat)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    workdir = tempfile.mkdtemp(prefix="spark-io-")
    try:
        with broker(args) as (service_url, admin_url):
            spark = (SparkSession.builder.master("local[2]").appName("spark-io")
                     .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                     .config("spark.sql.shuffle.partitions", "2").getOrCreate())
            # Stopping the rate query cancels its tasks, which Spark logs as errors: failures raise anyway.
            spark.sparkContext.setLogLevel("OFF")
            try:
                if batchings:
                    print(f"load average at the start: {os.getloadavg()[0]:.1f}", flush=True)
                    live = run_live(spark, service_url, admin_url, batchings, args.live_messages, args.size,
                                    args.partitions, max(1, args.runs), workdir)
                else:
                    print(f"{args.messages:,} messages of {args.size} bytes, {args.partitions} partitions", flush=True)
                    rows = run_cases(spark, service_url, admin_url, args.messages, args.size, args.partitions,
                                     workdir)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(live_table(live) if batchings else table(rows))
    print()
    print(f"machine: {machine()}")
    print(f"command: {shlex.join([os.path.relpath(sys.argv[0]), *(argv if argv is not None else sys.argv[1:])])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
