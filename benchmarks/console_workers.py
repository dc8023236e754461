"""What does gathering every worker's figures cost a console page? (issue 23, OP-3)

Two real brokers side by side in one run, `run_broker(workers=1)` and `run_broker(workers=2)`,
each with the same `--topics` topics of public/default loaded (a producer open on each, so they
stay loaded; with two workers they spread over both). Each row times GET requests on the admin
port (the shared one with two workers: whichever worker accepts answers, asking the other for its
figures), median of `--repeat` calls after one warm-up call, and the ratio two workers / one:

  overview              GET /                              one worker: its own figures; two: its
                                                           own and the peer's (one HTTP call)
  overview data         GET /console/data/overview         the same as JSON
  namespace page        GET /console/namespaces/public/default?size=100
  topic page            GET /console/topics/.../t-0000     half the time drawn from the owner's
                                                           figures, asked over HTTP

    python benchmarks/console_workers.py [--topics 200] [--repeat 15]
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import time
from urllib.parse import urlsplit

import pulsar
from _machine import machine_facts

from velamq.testing import BrokerProcess, run_broker

NS = "public/default"


def get_ms(admin_url: str, path: str, repeat: int) -> float:
    """Median milliseconds of GET path (a new connection each time, as a browser's first request)."""
    split = urlsplit(admin_url)
    times = []
    for i in range(repeat + 1):
        conn = http.client.HTTPConnection(split.hostname or "127.0.0.1", split.port, timeout=60)
        start = time.perf_counter()
        conn.request("GET", path)
        reply = conn.getresponse()
        body = reply.read()
        elapsed = (time.perf_counter() - start) * 1000
        conn.close()
        assert reply.status == 200, (path, reply.status, body[:200])
        if i:  # the first call warms up
            times.append(elapsed)
    return statistics.median(times)


def measure(broker: BrokerProcess, topics: int, repeat: int, rows: list[tuple[str, str]]) -> list[float]:
    client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producers = [client.create_producer(f"persistent://{NS}/t-{i:04d}") for i in range(topics)]
        for producer in producers:
            producer.send(b"x")
        return [get_ms(broker.admin_url, path, repeat) for _, path in rows]
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    rows = [
        ("overview", "/"),
        ("overview data", "/console/data/overview"),
        ("namespace page (100 topics)", f"/console/namespaces/{NS}?size=100"),
        ("topic page", f"/console/topics/persistent/{NS}/t-0000"),
    ]
    results = {}
    for workers in (1, 2):
        with run_broker(workers=workers) as broker:
            results[workers] = measure(broker, args.topics, args.repeat, rows)
    print(f"console pages, {args.topics} loaded topics, median of {args.repeat} GETs each (ms)")
    print(f"{'page':30} {'1 worker':>9} {'2 workers':>10} {'ratio':>6}")
    for (label, _), one, two in zip(rows, results[1], results[2], strict=True):
        print(f"{label:30} {one:9.1f} {two:10.1f} {two / one:6.2f}")
    print()
    print(f"{'load':8} {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for key, value in machine_facts():
        print(f"{key:8} {value}")


if __name__ == "__main__":
    main()
