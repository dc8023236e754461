"""The example pipeline in one command (SP-6): events in, windowed totals out to a topic and Parquet.

    make standalone                                   # in another terminal: velamq on 6650 / 8080
    .venv/bin/python examples/pipeline/run_pipeline.py

    .venv/bin/python examples/pipeline/run_pipeline.py --start-broker   # or let it start its own

It creates a fresh pair of topics (events, totals) for the run, starts the Spark job of
pipeline_job.py on a local[2] SparkSession, produces the events (pipeline_events.py), waits until
every window has come out of both sinks, checks each window's count and amount against what was
produced, prints the totals and stops. Results stay in the totals topic and under --workdir.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from pipeline_events import Expected, produce_events
from pipeline_job import start

wait_s_max = 300.0


@dataclass(frozen=True, slots=True)
class Summary:
    events: int
    windows: int
    parquet_rows: list[Any]
    topic_rows: list[dict[str, Any]]
    results_topic: str
    out_dir: str


def create_partitioned_topic(admin_url: str, topic: str, partitions: int) -> None:
    request = urllib.request.Request(f"{admin_url}/admin/v2/persistent/public/default/{topic}/partitions",
                                     data=str(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=30).read()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # already there
            raise


def run_pipeline(spark: Any, service_url: str, admin_url: str, workdir: str, events: int = 20_000) -> Summary:
    run_id = uuid.uuid4().hex[:8]
    events_topic, results_topic = f"pipeline-events-{run_id}", f"pipeline-totals-{run_id}"
    out_dir, checkpoints = f"{workdir}/{run_id}/totals", f"{workdir}/{run_id}/checkpoints"
    create_partitioned_topic(admin_url, events_topic, 2)
    queries = start(spark, service_url, admin_url, events_topic, results_topic, out_dir, checkpoints)
    try:
        expected = produce_events(service_url, events_topic, events)
        parquet_rows, topic_rows = _wait_for_results(spark, service_url, admin_url, results_topic, out_dir, expected,
                                                     queries)
    finally:
        for query in queries:
            query.stop()
    _check(expected, parquet_rows, topic_rows)
    return Summary(events, len(expected.totals), parquet_rows, topic_rows, results_topic, out_dir)


def _wait_for_results(spark: Any, service_url: str, admin_url: str, results_topic: str, out_dir: str,
                      expected: Expected, queries: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    deadline = time.monotonic() + wait_s_max
    parquet_rows: list[Any] = []
    topic_rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        for query in queries:
            if query.exception() is not None:
                raise RuntimeError(f"query {query.name} failed: {query.exception()}")
        try:
            parquet_rows = spark.read.parquet(out_dir).collect()
        except Exception:
            parquet_rows = []  # no file committed yet
        results = (spark.read.format("velamq").option("service.url", service_url).option("admin.url", admin_url)
                   .option("topic", results_topic).load())
        try:
            topic_rows = [json.loads(r.value) for r in results.select("value").collect()]
        except Exception:
            topic_rows = []  # the results topic is created by the first write
        if len(parquet_rows) >= len(expected.totals) and len(topic_rows) >= len(expected.totals):
            return parquet_rows, topic_rows
        time.sleep(2)
    raise TimeoutError(f"after {wait_s_max:.0f} s: {len(parquet_rows)} parquet rows and {len(topic_rows)} topic "
                       f"messages of {len(expected.totals)} windows")


def _check(expected: Expected, parquet_rows: list[Any], topic_rows: list[dict[str, Any]]) -> None:
    from_parquet = {(int(r.windowStart.timestamp() * 1000), r.page): (r.events, round(r.amount, 2))
                    for r in parquet_rows}
    if from_parquet != expected.totals or len(parquet_rows) != len(expected.totals):
        raise AssertionError("parquet totals differ from the events produced")
    from_topic = {(r["windowStart"], r["page"]): (r["events"], round(r["amount"], 2)) for r in topic_rows}
    if len(topic_rows) != len(expected.totals) or len(from_topic) != len(expected.totals):
        raise AssertionError(f"{len(topic_rows)} messages in the totals topic for {len(expected.totals)} windows")
    counted = sum(count for count, _ in from_parquet.values())
    if counted != expected.events:
        raise AssertionError(f"windows count {counted} events of {expected.events}")


def _print(summary: Summary) -> None:
    print(f"{summary.events} events -> {summary.windows} (window, page) totals, in topic "
          f"{summary.results_topic} ({len(summary.topic_rows)} messages) and parquet {summary.out_dir}")
    print(f"{'window start (UTC)':20} {'page':10} {'events':>7} {'amount':>10} {'users':>6}")
    for r in sorted(summary.parquet_rows, key=lambda r: (r.windowStart, r.page))[:15]:
        print(f"{r.windowStart:%Y-%m-%d %H:%M}     {r.page:10} {r.events:7d} {r.amount:10.2f} {r.users:6d}")
    if summary.windows > 15:
        print(f"... {summary.windows - 15} more")
    print("pipeline OK: every window's count and amount match the events produced")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--service-url", default="pulsar://localhost:6650")
    parser.add_argument("--admin-url", default="http://localhost:8080")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--workdir", default="pipeline-out")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--start-broker", action="store_true", help="start a velamq standalone on free ports")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with ExitStack() as stack:
        service_url, admin_url = args.service_url, args.admin_url
        if args.start_broker:
            from velamq.testing import run_broker

            broker = stack.enter_context(run_broker(Path(tempfile.mkdtemp(prefix="velamq-pipeline-")) / "data"))
            service_url, admin_url = broker.service_url, broker.admin_url
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master(args.master).appName("velamq-pipeline")
                 .config("spark.sql.shuffle.partitions", "2").config("spark.ui.showConsoleProgress", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        stack.callback(spark.stop)
        _print(run_pipeline(spark, service_url, admin_url, str(Path(args.workdir).resolve()), args.events))


if __name__ == "__main__":
    main()
