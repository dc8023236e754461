"""Delayed delivery at scale (CO-4, issue 13): pending delayed messages vs broker RSS, dispatch of
normal messages behind them, restart time with them pending, and the punctuality of short delays.

The script starts its own broker process, subscribes one Shared consumer (velamq's client), then:

1. publishes --delayed messages to be delivered in 10 days and waits until the subscription's
   msgDelayed (admin stats) counts them all; the broker's RSS growth divided by that count is what
   a pending delayed message costs. Side by side, a baseline broker gets the same messages with
   delayed delivery off for the namespace and a consumer that takes none of them (they wait in the
   backlog, no index): its RSS growth is what publishing and caching those entries costs anyway
   (storage caches, bounded by --memory); the difference is the index's own cost;
2. publishes --normal ordinary messages and times how long until the consumer has them all;
3. stops the broker (SIGTERM) and starts it again on the same data: time to the ready line, to the
   stored index being loaded (msgDelayed back at --delayed), and to --normal/10 new messages
   received; the storage's entry-read counters say whether the log was read again;
4. publishes --short messages delayed by 2 s and reports when they arrive, and whether in order;
5. TTL (in-process, no sockets, on a ManualClock): a subscription with a --ttl-entries backlog
   older than its TTL, one delayed message not yet due in every 1000, no consumer: how long one
   policy check takes to expire it (by position, the delayed ones spared).

    .venv/bin/python benchmarks/delayed.py                       # 1 000 000 pending, ~3-5 min
    .venv/bin/python benchmarks/delayed.py --delayed 100000      # the CI-sized run

The table has each figure, its target from issue 13 and the ratio figure/target (< 1 is better).
Run it alone: the figures are CPU-bound and the machine's other load shows in them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from _machine import machine_facts

from velamq._clock import ManualClock
from velamq._topic_name import TopicName
from velamq.broker.service._policy_tasks import check_topic
from velamq.broker.subscription._selector import SubType
from velamq.broker.topic._topic import Topic
from velamq.client import AsyncClient, Consumer
from velamq.metadata import Policies
from velamq.protocol import build_entry, pb
from velamq.storage import Storage, StorageConfig
from velamq.testing import run_broker

TOPIC = "persistent://public/default/delayed-bench"
TEN_DAYS_MS = 10 * 24 * 3600 * 1000
WINDOW = 5_000  # sends in flight


def disable_delayed_delivery(admin_url: str) -> None:
    url = f"{admin_url}/admin/v2/namespaces/public/default/delayedDelivery"
    body = json.dumps({"active": False, "tickTime": 1000}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        if resp.status not in (200, 204):
            raise RuntimeError(f"cannot turn delayed delivery off: HTTP {resp.status}")


def backlog(admin_url: str) -> int:
    url = f"{admin_url}/admin/v2/persistent/public/default/delayed-bench/stats"
    with urllib.request.urlopen(url, timeout=30) as resp:
        return int(json.load(resp)["subscriptions"]["sub"]["msgBacklog"])


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def delayed_count(admin_url: str) -> int:
    url = f"{admin_url}/admin/v2/persistent/public/default/delayed-bench/stats"
    with urllib.request.urlopen(url, timeout=30) as resp:
        stats = json.load(resp)
    return int(stats["subscriptions"]["sub"]["msgDelayed"])


def entries_read(admin_url: str) -> float:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(("velamq_storage_read_entries_cache_total", "velamq_storage_read_entries_disk_total")):
            total += float(line.split()[-1])
    return total


async def wait_for(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def publish(client: AsyncClient, count: int, deliver_after_ms: int | None, prefix: bytes) -> float:
    producer = await client.create_producer(TOPIC, block_if_queue_full=True, max_pending_messages=WINDOW,
                                            batching_enabled=True)
    start = time.perf_counter()
    pending = []
    for i in range(count):
        payload = prefix + b"%d %f" % (i, time.time())
        pending.append(await producer.send_async(payload, deliver_after=deliver_after_ms))
        if len(pending) >= WINDOW:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    seconds = time.perf_counter() - start
    await producer.close()
    return seconds


async def receive(consumer: Consumer, count: int) -> list[tuple[bytes, float]]:
    """(payload, arrival time) of `count` messages, acknowledged."""
    got = []
    while len(got) < count:
        message = await consumer.receive(timeout_ms=60_000)
        got.append((message.data(), time.time()))
        await consumer.acknowledge(message)
    return got


async def subscribe(client: AsyncClient, receiver_queue_size: int = 2000) -> Consumer:
    return await client.subscribe(TOPIC, "sub", subscription_type="shared", initial_position="earliest",
                                  receiver_queue_size=receiver_queue_size)


async def baseline_growth(args: argparse.Namespace, data_dir: Path) -> float:
    """RSS growth per message when the same messages wait in the backlog without an index."""
    with run_broker(data_dir, ["--memory", args.memory]) as broker:
        assert broker.pid is not None
        disable_delayed_delivery(broker.admin_url)
        async with AsyncClient(broker.service_url, operation_timeout_s=120) as client:
            consumer = await subscribe(client, receiver_queue_size=1)
            await publish(client, 1000, None, b"warm ")
            await receive(consumer, 1000)
            await asyncio.sleep(1.0)
            rss_before = rss_bytes(broker.pid)
            await publish(client, args.delayed, TEN_DAYS_MS, b"later ")
            await wait_for(lambda: backlog(broker.admin_url) >= args.delayed, 600, "the backlog")
            await asyncio.sleep(1.0)
            return (rss_bytes(broker.pid) - rss_before) / args.delayed


async def run(args: argparse.Namespace, data_dir: Path) -> list[tuple[str, float, float | None, str]]:
    rows: list[tuple[str, float, float | None, str]] = []
    base = await baseline_growth(args, data_dir.parent / "baseline")
    with run_broker(data_dir, ["--memory", args.memory]) as broker:
        assert broker.pid is not None
        async with AsyncClient(broker.service_url, operation_timeout_s=120) as client:
            consumer = await subscribe(client)
            await publish(client, 1000, None, b"warm ")
            await receive(consumer, 1000)
            await asyncio.sleep(1.0)
            rss_before = rss_bytes(broker.pid)
            seconds = await publish(client, args.delayed, TEN_DAYS_MS, b"later ")
            rows.append(("publish delayed (msg/s)", args.delayed / seconds, None, ""))
            await wait_for(lambda: delayed_count(broker.admin_url) >= args.delayed, 600, "the delayed index")
            await asyncio.sleep(1.0)
            grown = (rss_bytes(broker.pid) - rss_before) / args.delayed
            rows.append(("RSS growth per pending delayed message (B)", grown, 64, "bytes"))
            rows.append(("  baseline: same messages, no index (B)", base, None, ""))
            rows.append(("  the index's own cost: difference (B)", grown - base, 64, "bytes"))
            rows.append(("  ratio indexed / baseline", grown / base if base > 0 else 0.0, None, ""))
            rows.append(("broker RSS with them pending (MiB)", rss_bytes(broker.pid) / 2**20, None, ""))
            start = time.perf_counter()
            send = asyncio.create_task(publish(client, args.normal, None, b"now "))
            got = await receive(consumer, args.normal)
            await send
            rows.append((f"{args.normal} normal messages delivered (s)", time.perf_counter() - start, 10, "s"))
            latencies = [arrived - float(data.split()[-1]) for data, arrived in got]
            rows.append(("normal message latency p50 (ms)", 1000 * statistics.median(latencies), None, ""))
            await consumer.close()
        broker.stop()
        start = time.perf_counter()
        broker.start()
        ready = time.perf_counter() - start
        rows.append(("restart: broker ready (s)", ready, None, ""))
        read_before = entries_read(broker.admin_url)
        async with AsyncClient(broker.service_url, operation_timeout_s=120) as client:
            consumer = await subscribe(client)
            await wait_for(lambda: delayed_count(broker.admin_url) >= args.delayed, 120, "the restored index")
            rows.append(("restart: delayed index loaded (s)", time.perf_counter() - start, 5, "s"))
            after = args.normal // 10
            send = asyncio.create_task(publish(client, after, None, b"now "))
            await receive(consumer, after)
            await send
            rows.append((f"restart: {after} new messages received (s)", time.perf_counter() - start, None, ""))
            rows.append(("restart: entries read from the log", entries_read(broker.admin_url) - read_before,
                         args.delayed, "entries"))
            start_s = time.time()
            await publish(client, args.short, 2000, b"soon ")
            got = await receive(consumer, args.short)
            offsets = [arrived - float(data.split()[-1]) for data, arrived in got]
            sent_order = [int(data.split()[1]) for data, _ in got]
            rows.append((f"{args.short} delayed by 2 s: earliest arrival (s)", min(offsets), 2, "s"))
            rows.append((f"{args.short} delayed by 2 s: latest arrival (s)", max(offsets), 3, "s"))
            rows.append(("  ... arrived in send (= due) order", float(sent_order == sorted(sent_order)), None, ""))
            rows.append(("  ... all within (s)", time.time() - start_s, None, ""))
    return rows


async def ttl_check(entries: int, data_dir: Path) -> list[tuple[str, float, float | None, str]]:
    """One policy check over an old backlog of `entries`, a delayed message in every 1000."""
    clock = ManualClock()
    storage = Storage(StorageConfig(data_dir=data_dir, sync_policy="none"), clock)
    await storage.start()
    try:
        topic = Topic(TopicName.parse(TOPIC), await storage.open_ledger(TOPIC), clock)
        sub = await topic.subscription("sub", SubType.SHARED, durable=True, initial_earliest=True, start=None)
        now = clock.now_ms()
        for start in range(0, entries, 10_000):
            futures = []
            for i in range(start, min(entries, start + 10_000)):
                metadata = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=now)
                if i % 1000 == 999:
                    metadata.deliver_at_time = now + TEN_DAYS_MS
                futures.append(topic.ledger.append_nowait(build_entry(metadata, b"x" * 100)))
            await asyncio.gather(*futures)
        await topic.apply_policies(Policies(message_ttl_s=60))
        clock.advance(61)
        began = time.perf_counter()
        await check_topic(topic, clock)
        seconds = time.perf_counter() - began
        assert sub.backlog == entries // 1000, sub.backlog  # the delayed ones, spared
        await topic.close()
    finally:
        await storage.close()
    return [
        (f"TTL: one check expires {entries:,} old entries (s)", seconds, None, ""),
        ("  ... expired entries per second", (entries - entries // 1000) / seconds, None, ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delayed", type=int, default=1_000_000)
    parser.add_argument("--normal", type=int, default=10_000)
    parser.add_argument("--short", type=int, default=1_000)
    parser.add_argument("--ttl-entries", type=int, default=1_000_000)
    parser.add_argument("--memory", default="1G", help="the brokers' memory budget (--memory), default 1G")
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="velamq-delayed-") as tmp:
        rows = asyncio.run(run(args, args.data_dir or Path(tmp) / "data"))
        rows += asyncio.run(ttl_check(args.ttl_entries, Path(tmp) / "ttl"))
    print(f"# benchmarks/delayed.py --delayed {args.delayed} --normal {args.normal} --short {args.short}"
          f" --memory {args.memory} --ttl-entries {args.ttl_entries}")
    for name, value in machine_facts(["velamq"]):
        print(f"# {name}: {value}")
    print(f"{'figure':<52} {'value':>14} {'target':>10} {'ratio':>8}")
    for name, value, target, _unit in rows:
        ratio = f"{value / target:.2f}" if target else ""
        print(f"{name:<52} {value:>14,.2f} {target if target is not None else '':>10} {ratio:>8}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
