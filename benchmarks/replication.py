"""Geo-replication between two velamq nodes on one machine (RP-*, issue 24): throughput, lag, the
replicator's CPU and the failover window.

The script starts two brokers, "east" and "west", each its own cluster, linked as
tests/integration/replication_helpers.py links them (every cluster registered on the other,
namespace public/geo replicating to both, deduplication on). With velamq's asyncio client in this
process it then, for each rate:

1. **full speed (100 %)**: --messages unbatched messages of --size bytes published on east with
   --in-flight sends outstanding; the rate reached is the local publish rate R. A consumer on west
   timestamps each message: lag = arrival on west - publish time on east (one clock). The same
   run to a topic that does not replicate, its consumer on east, is the side-by-side baseline;
2. **10 % and 50 % of R**: the same, paced at that rate for as long (10 % and 50 % of the messages);
3. **east's CPU**: its CPU seconds (/proc, all its threads) per message, with and without
   replication (on a loaded 2-core machine the difference is within the noise: see catch-up);
4. **failover window** (--failover): at each rate, a fresh pair; east is killed (SIGKILL) in the
   middle of the run; the messages east acknowledged that west does not have are what a failover
   to west loses at that moment (asynchronous replication), also given as milliseconds of traffic;
5. **catch-up**: west stopped while east takes the messages, then started: the replicator alone
   drains the backlog; its rate and east's CPU per message (nothing else runs on east then).

Every figure is the median of --runs runs (default 3); the load average is printed with the table.

    .venv/bin/python benchmarks/replication.py                    # ~2-4 min on 2 cores
    .venv/bin/python benchmarks/replication.py --messages 5000 --runs 1 --failover
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _machine import machine_facts

from velamq.client import AdminClient, AsyncClient
from velamq.testing import BrokerProcess

NAMESPACE = "public/geo"


@dataclass
class Row:
    rate: str
    messages: int
    publish_msg_s: float
    repl_msg_s: float
    repl_mb_s: float
    lag_p50_ms: float
    lag_p99_ms: float
    cpu_us_per_msg: float  # east's CPU per message published
    local_msg_s: float = 0.0  # the same run to a topic that does not replicate
    local_cpu_us_per_msg: float = 0.0
    window_msgs: float | None = None
    window_ms: float | None = None


def cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pair:
    """Two brokers, east and west, replicating public/geo to each other."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.east = BrokerProcess(root / "east", ["--cluster-name", "east"])
        self.west = BrokerProcess(root / "west", ["--cluster-name", "west"])

    def start(self) -> None:
        self.east.start()
        self.west.start()
        for me, other, name in ((self.east, self.west, "west"), (self.west, self.east, "east")):
            admin = AdminClient(me.admin_url)
            admin.request("PUT", AdminClient.path("clusters", name),
                          {"serviceUrl": other.admin_url, "brokerServiceUrl": other.service_url})
            admin.request("POST", AdminClient.path("tenants", "public"),
                          {"adminRoles": [], "allowedClusters": ["east", "west"]})
            admin.request("PUT", AdminClient.namespace_path(NAMESPACE), {})
            admin.request("POST", AdminClient.namespace_path(NAMESPACE, "deduplication"), True)
            admin.request("POST", AdminClient.namespace_path(NAMESPACE, "replication"), ["east", "west"])

    def stop(self) -> None:
        self.east.stop()
        self.west.stop()


async def _publish(producer: Any, n: int, size: int, in_flight: int, rate: float | None,
                   acked: list[int]) -> float:
    """Send n messages (paced at `rate` msg/s if given); returns the seconds it took."""
    payload = os.urandom(size)
    window = asyncio.Semaphore(in_flight)
    pending: set[asyncio.Future[Any]] = set()
    started = time.monotonic()

    def done(i: int, future: asyncio.Future[Any]) -> None:
        window.release()
        pending.discard(future)
        if not future.cancelled() and future.exception() is None:
            acked.append(i)

    for i in range(n):
        if rate is not None:
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await window.acquire()
        try:
            future = await producer.send_async(payload)
        except Exception:
            window.release()
            break
        pending.add(future)
        future.add_done_callback(lambda f, i=i: done(i, f))
    if pending:
        await asyncio.wait(pending, timeout=30)
    return time.monotonic() - started


async def _receive(consumer: Any, n: int, lags: list[float], arrivals: list[float]) -> None:
    while len(lags) < n:
        message = await consumer.receive()
        now_ms = time.time() * 1000
        lags.append(now_ms - message.publish_time)
        arrivals.append(time.monotonic())


async def one_run(pair: Pair, label: str, n: int, size: int, in_flight: int, rate: float | None,
                  replicated: bool, kill_after_s: float | None = None) -> tuple[Row, list[int]]:
    ns = NAMESPACE if replicated else "public/default"
    topic = f"persistent://{ns}/bench-{label.replace(' ', '')}-{time.monotonic_ns()}"
    async with AsyncClient(pair.east.service_url) as east, AsyncClient(pair.west.service_url) as west:
        producer = await east.create_producer(topic, batching_enabled=False, max_pending_messages=in_flight,
                                              block_if_queue_full=True)
        # The same client work either way: a consumer on west (replicated) or on east (not).
        consumer = await (west if replicated else east).subscribe(topic, "bench", initial_position="earliest")
        lags: list[float] = []
        arrivals: list[float] = []
        receiving: asyncio.Task[None] | None = asyncio.create_task(_receive(consumer, n, lags, arrivals))
        acked: list[int] = []
        cpu_before = cpu_s(pair.east.pid)
        first_send = time.monotonic()
        publishing = asyncio.create_task(_publish(producer, n, size, in_flight, rate, acked))
        if kill_after_s is not None:
            await asyncio.sleep(kill_after_s)
            pair.east.kill()
            for task in (publishing, receiving):
                if task is not None:
                    task.cancel()
            await asyncio.gather(publishing, *([receiving] if receiving else []), return_exceptions=True)
            return _row(label, n, size, 0.0, [], [], first_send, 0.0), acked
        seconds = await publishing
        cpu = cpu_s(pair.east.pid) - cpu_before
        if receiving is not None:
            await asyncio.wait_for(receiving, timeout=120)
        await producer.close()
        return _row(label, n, size, seconds, lags, arrivals, first_send, cpu), acked


def _row(label: str, n: int, size: int, seconds: float, lags: list[float], arrivals: list[float],
         first_send: float, cpu: float) -> Row:
    span = (arrivals[-1] - first_send) if arrivals else 0.0
    ordered = sorted(lags)
    return Row(
        rate=label, messages=n,
        publish_msg_s=n / seconds if seconds else 0.0,
        repl_msg_s=len(arrivals) / span if span else 0.0,
        repl_mb_s=len(arrivals) * size / span / 1e6 if span else 0.0,
        lag_p50_ms=ordered[len(ordered) // 2] if ordered else 0.0,
        lag_p99_ms=ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0,
        cpu_us_per_msg=cpu / n * 1e6,
    )


async def west_has(pair: Pair, topic_prefix: str) -> int:
    admin = AdminClient(pair.west.admin_url)
    topics = [t for t in admin.request("GET", AdminClient.namespace_path(NAMESPACE, "topics")) if topic_prefix in t]
    return sum(int(admin.request("GET", AdminClient.topic_path(t, "stats"))["msgInCounter"]) for t in topics)


def median_row(rows: list[Row]) -> Row:
    def med(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None

    first = rows[0]
    return Row(first.rate, first.messages, *(med([getattr(r, f) for r in rows]) or 0.0 for f in (
        "publish_msg_s", "repl_msg_s", "repl_mb_s", "lag_p50_ms", "lag_p99_ms", "cpu_us_per_msg", "local_msg_s",
        "local_cpu_us_per_msg")),
        window_msgs=med([r.window_msgs for r in rows]), window_ms=med([r.window_ms for r in rows]))


async def measure(args: argparse.Namespace, root: Path) -> list[Row]:
    rows: dict[str, list[Row]] = {}
    for run in range(args.runs):
        pair = Pair(root / f"run{run}")
        pair.start()
        try:
            full, _ = await one_run(pair, "100 %", args.messages, args.size, args.in_flight, None, True)
            base, _ = await one_run(pair, "100 % local", args.messages, args.size, args.in_flight, None, False)
            full.local_cpu_us_per_msg = base.cpu_us_per_msg
            full.local_msg_s = base.publish_msg_s
            rows.setdefault("100 %", []).append(full)
            rate = full.publish_msg_s
            for fraction in (0.1, 0.5):
                label = f"{fraction * 100:.0f} %"
                n = max(100, int(args.messages * fraction))  # as long as the full-speed run
                row, _ = await one_run(pair, label, n, args.size, args.in_flight, rate * fraction, True)
                local, _ = await one_run(pair, label + " local", n, args.size, args.in_flight, rate * fraction,
                                         False)
                row.local_cpu_us_per_msg = local.cpu_us_per_msg
                row.local_msg_s = local.publish_msg_s
                rows.setdefault(label, []).append(row)
        finally:
            pair.stop()
        if args.failover:
            for label, fraction in (("10 %", 0.1), ("50 %", 0.5), ("100 %", 1.0)):
                row = rows[label][-1]
                window = await failover_window(root / f"fail{run}-{fraction}", args,
                                               rate * fraction if fraction < 1 else None, rate * fraction, rate)
                row.window_msgs, row.window_ms = window, window / (rate * fraction) * 1000
    return [median_row(rows[k]) for k in ("10 %", "50 %", "100 %")]


async def failover_window(root: Path, args: argparse.Namespace, rate: float | None, offered: float,
                          full_rate: float) -> float:
    """Messages east acknowledged that west lacks when east dies mid-run."""
    pair = Pair(root)
    pair.start()
    try:
        n = max(100, int(args.messages * offered / full_rate))  # as long as the full-speed run
        label = f"fail{int(offered)}"
        _, acked = await one_run(pair, label, n, args.size, args.in_flight, rate, True,
                                 kill_after_s=n / offered / 2)
        on_west = await west_has(pair, f"bench-{label}")
        return max(0, len(acked) - on_west)
    finally:
        pair.stop()


async def catch_up(root: Path, args: argparse.Namespace) -> tuple[float, float, float]:
    """The replicator alone: west down while east takes --messages, then west back; from the first
    message on west to the last: (msg/s, MB/s, east's CPU microseconds per message)."""
    pair = Pair(root)
    pair.start()
    try:
        topic = f"persistent://{NAMESPACE}/catch-up-{time.monotonic_ns()}"
        async with AsyncClient(pair.east.service_url) as east:
            producer = await east.create_producer(topic, batching_enabled=False, max_pending_messages=args.in_flight,
                                                  block_if_queue_full=True)
            await producer.send(b"first")  # the topic and its replicator exist before west goes
            pair.west.stop()
            await _publish(producer, args.messages, args.size, args.in_flight, None, [])
            await producer.close()
        pair.west.start()
        admin = AdminClient(pair.west.admin_url)

        def arrived() -> int:
            try:
                return int(admin.request("GET", AdminClient.topic_path(topic, "stats"))["msgInCounter"])
            except Exception:
                return 0

        while await asyncio.to_thread(arrived) == 0:
            await asyncio.sleep(0.01)
        started, cpu_before, first = time.monotonic(), cpu_s(pair.east.pid), await asyncio.to_thread(arrived)
        while (count := await asyncio.to_thread(arrived)) < args.messages + 1:
            await asyncio.sleep(0.05)
        seconds = time.monotonic() - started
        cpu = cpu_s(pair.east.pid) - cpu_before
        sent = count - first
        return sent / seconds, sent * args.size / seconds / 1e6, cpu / sent * 1e6
    finally:
        pair.stop()


def table(rows: list[Row]) -> str:
    head = ("| rate of local | messages | publish msg/s | same, not replicated | replicated msg/s | MB/s "
            "| lag p50 ms | lag p99 ms | east CPU us/msg | same, not replicated | failover window msgs "
            "| = ms of traffic |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        window = "-" if r.window_msgs is None else f"{r.window_msgs:.0f}"
        window_ms = "-" if r.window_ms is None else f"{r.window_ms:.0f}"
        lines.append(f"| {r.rate} | {r.messages} | {r.publish_msg_s:,.0f} | {r.local_msg_s:,.0f} "
                     f"| {r.repl_msg_s:,.0f} | {r.repl_mb_s:.2f} "
                     f"| {r.lag_p50_ms:.1f} | {r.lag_p99_ms:.1f} | {r.cpu_us_per_msg:.0f} "
                     f"| {r.local_cpu_us_per_msg:.0f} | {window} | {window_ms} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--failover", action="store_true", help="also measure the failover window")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="velamq-repl-bench-"))
    try:
        rows = asyncio.run(measure(args, root))
        drains = [asyncio.run(catch_up(root / f"catch-up{run}", args)) for run in range(args.runs)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for key, value in machine_facts(["pulsar-client"]):
        print(f"{key}: {value}")
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")
    print(table(rows))
    msg_s, mb_s, cpu_us = (statistics.median(d[i] for d in drains) for i in range(3))
    print(f"\ncatch-up of a {args.messages}-message backlog (the replicator alone, median of {args.runs}): "
          f"{msg_s:,.0f} msg/s, {mb_s:.2f} MB/s, east CPU {cpu_us:.0f} us per message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
