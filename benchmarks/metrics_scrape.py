"""What a /metrics scrape costs with N loaded topics, per-topic page or namespace page (OP-3).

Each N gets a fresh in-process broker (velamq.testing.BrokerThread, journalSyncPolicy=none, no idle
unloading) whose loop loads N topics of one durable subscription each; then GET /metrics is timed
`--scrapes` times (median) over HTTP, with exposeTopicLevelMetricsInPrometheus on (and the
topicLevelMetricsMaxTopics bound lifted, so the per-topic page is what is measured) and off. The
load average is printed beside each row: on a shared machine it moves the figures a lot.

    .venv/bin/python benchmarks/metrics_scrape.py                       # N = 1000, 3000, 10000
    .venv/bin/python benchmarks/metrics_scrape.py --topics 5000 --scrapes 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from _machine import machine_facts

from velamq._topic_name import TopicName
from velamq.broker import BrokerConfig
from velamq.broker.subscription._selector import SubType
from velamq.testing import BrokerThread


def _scrape_s(admin_url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=300) as response:
        size = len(response.read())
    return time.perf_counter() - started, size


def _load_topics(broker: BrokerThread, n: int) -> None:
    async def load() -> None:
        service = broker.server.broker
        for i in range(n):
            topic = await service.get_topic(TopicName.parse(f"persistent://public/default/t{i}"), True)
            await topic.subscription("s", SubType.EXCLUSIVE, True, True, None)

    broker.run(load(), timeout_s=1800)


def measure(n: int, per_topic: bool, scrapes: int) -> tuple[float, float, str]:
    """(median ms, KiB, load average) of the scrapes of a broker with n loaded topics."""
    config = BrokerConfig(
        expose_topic_level_metrics=per_topic, topic_level_metrics_max_topics=0, topic_idle_unload_s=0,
        sync_policy="none",
    )
    with tempfile.TemporaryDirectory(prefix="velamq-metrics-") as tmp:
        broker = BrokerThread(Path(tmp) / "data", config=config)
        broker.start()
        try:
            _load_topics(broker, n)
            runs = [_scrape_s(broker.admin_url) for _ in range(scrapes)]
        finally:
            broker.stop()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return statistics.median(r[0] for r in runs) * 1000, runs[0][1] / 1024, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", default="1000,3000,10000", help="comma-separated N")
    parser.add_argument("--scrapes", type=int, default=3)
    args = parser.parse_args()
    for name, value in machine_facts(["velamq"]):
        print(f"{name}: {value}")
    print(f"{'topics':>8} | {'page':>9} | {'median ms':>9} | {'KiB':>8} | load average")
    for n in (int(x) for x in args.topics.split(",")):
        for per_topic in (True, False):
            ms, kib, load = measure(n, per_topic, args.scrapes)
            page = "topic" if per_topic else "namespace"
            print(f"{n:>8} | {page:>9} | {ms:>9.0f} | {kib:>8.0f} | {load}", flush=True)


if __name__ == "__main__":
    main()
