"""What does a console page cost when a namespace holds 100 000 topics? (issue 15, OP-3)

A real server (VelamqServer in this process, its loop in a thread) over a metadata store whose
namespace public/default holds N topic rows (written straight into metadata.db before the start,
as a broker that has run for a while would have them; none is loaded). Each row times GET requests
over HTTP, median of `--repeat` calls:

  overview              GET /                      counts per namespace, the broker chart
  page 1                GET /console/namespaces/public/default
  page 1000             ...?page=1000              the store skips 49 950 rows in key order
  last page             ...?page=<last>
  search, 10 matches    ...?q=topic-09999          substring of the local name: a scan of N rows
  search, 10% match     ...?q=-01 (page 1)
  topic page            GET /console/topics/...    loads the topic for its /stats (first call),
                                                   then the figures of a loaded topic

    python benchmarks/console_pages.py [--topics 100000] [--repeat 9]
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import time
from pathlib import Path

from _machine import machine_facts

from velamq.metadata._ops import ensure_defaults
from velamq.metadata._schema import connect
from velamq.testing import BrokerThread


def fill(data_dir: Path, topics: int) -> None:
    conn = connect(data_dir / "metadata.db")
    try:
        conn.execute("BEGIN")
        ensure_defaults(conn)
        conn.executemany(
            "INSERT INTO topics(name, namespace, created_ms) VALUES (?, 'public/default', 0)",
            ((f"persistent://public/default/topic-{i:06d}",) for i in range(topics)),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def get_ms(port: int, path: str, repeat: int) -> tuple[float, int]:
    """Median milliseconds of GET path, and the page's size in bytes."""
    times, size = [], 0
    for _ in range(repeat):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        start = time.perf_counter()
        conn.request("GET", path)
        reply = conn.getresponse()
        body = reply.read()
        times.append((time.perf_counter() - start) * 1000)
        conn.close()
        assert reply.status == 200, (path, reply.status, body[:200])
        size = len(body)
    return statistics.median(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="velamq-console-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        started = time.perf_counter()
        fill(data_dir, args.topics)
        fill_s = time.perf_counter() - started
        broker = BrokerThread(data_dir)
        broker.start()
        try:
            port = broker.server.http_port
            last = (args.topics - 1) // 50 + 1
            ns = "/console/namespaces/public/default"
            rows = [
                ("overview", "/"),
                ("page 1", ns),
                ("page 1000", f"{ns}?page=1000"),
                ("last page", f"{ns}?page={last}"),
                ("search, 10 matches", f"{ns}?q=topic-{args.topics // 10 - 1:05d}"),
                ("search, 10% match", f"{ns}?q=-01"),
                ("topic page (first: loads it)", "/console/topics/persistent/public/default/topic-000001"),
                ("topic page (loaded)", "/console/topics/persistent/public/default/topic-000001"),
            ]
            print(f"console pages, one namespace of {args.topics} topics ({fill_s:.1f} s to write the rows)")
            print(f"{'page':32} {'median ms':>10} {'bytes':>9}")
            for label, path in rows:
                repeat = 1 if "first" in label else args.repeat
                ms, size = get_ms(port, path, repeat)
                print(f"{label:32} {ms:10.1f} {size:9d}")
        finally:
            broker.stop()
    print()
    for key, value in machine_facts():
        print(f"{key:8} {value}")


if __name__ == "__main__":
    main()
