"""How much does key-hash parallelism inside a partition speed up ordered consumption? (OC-1..OC-4)

ZTO's ordered-consumption scenario: a backlog on a partitioned topic, a handler that takes a fixed time per
message, and strict order per key. The script produces --messages messages over --keys keys to an
8-partition topic (uniform keys, and a second topic with Zipf-skewed keys), then consumes the
backlog with velamq's OrderedConsumer for partition_parallelism 1, 2, 4, 8, 16 (a fresh
subscription each run). Every run checks the order per key (each key's sequence numbers arrive
increasing, every message exactly once) and prints msg/s, the speed-up over parallelism 1, the
ideal rate (partitions x parallelism / handler time), the effective parallelism the consumer
measured (OC-4), the hottest key's share and the process CPU.

    .venv/bin/python benchmarks/ordered_consumer.py                 # starts its own broker, ~1 min
    .venv/bin/python benchmarks/ordered_consumer.py --messages 32000 --handler-ms 5 --thread-handler

The handler is `await asyncio.sleep(handler_ms / 1000)` (I/O-like work); --thread-handler makes it a
plain function calling time.sleep, run in the consumer's thread pool.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import resource
import sys
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from _machine import machine_facts

from velamq.client import AsyncClient, Message, OrderedConsumer


@dataclass(frozen=True, slots=True)
class Row:
    keys: str
    parallelism: int
    messages: int
    seconds: float
    cpu_s: float
    effective_min: float
    effective_max: float
    hot_share: float
    hot_partition_effective: float
    hot_partition_bound: float
    ordered: bool
    duplicates: int
    handler_s: float  # measured mean time of one handler call
    largest_partition: int  # messages in the partition with the most

    @property
    def ideal_rate(self) -> float:
        """The largest partition's workers always busy with evenly spread keys, at the measured handler time."""
        return self.messages * self.parallelism / (self.largest_partition * self.handler_s)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("inf")


def zipf_keys(n: int, keys: int, s: float, rng: random.Random) -> list[str]:
    weights = [1 / (k + 1) ** s for k in range(keys)]
    return [f"key-{k}" for k in rng.choices(range(keys), weights=weights, k=n)]


def create_partitioned_topic(admin_url: str, topic: str, partitions: int) -> None:
    url = f"{admin_url}/admin/v2/persistent/public/default/{topic}/partitions"
    req = urllib.request.Request(url, data=json.dumps(partitions).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        if resp.status not in (200, 204):
            raise RuntimeError(f"cannot create {topic}: HTTP {resp.status}")


async def produce(client: AsyncClient, topic: str, keys: list[str]) -> None:
    producer = await client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    seq: dict[str, int] = defaultdict(int)
    futures = []
    for key in keys:
        futures.append(await producer.send_async(json.dumps([key, seq[key]]).encode(), key=key))
        seq[key] += 1
    await asyncio.gather(*futures)
    await producer.close()


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def consume(client: AsyncClient, topic: str, label: str, n: int, parallelism: int, handler_ms: float,
                  max_in_flight: int, thread_handler: bool) -> Row:
    seen: dict[str, list[int]] = defaultdict(list)
    delay_s = handler_ms / 1000
    handler_time = [0.0]

    def record(message: Message, started: float) -> None:
        # list.append and += from several threads: one key is only ever on one thread, and the
        # handler time is a statistic (a lost update would not matter).
        handler_time[0] += time.perf_counter() - started
        key, seq = json.loads(message.value)
        seen[key].append(seq)

    async def handle_async(message: Message) -> None:
        started = time.perf_counter()
        await asyncio.sleep(delay_s)
        record(message, started)

    def handle_thread(message: Message) -> None:
        started = time.perf_counter()
        time.sleep(delay_s)
        record(message, started)

    handler: Callable[[Message], object] = handle_thread if thread_handler else handle_async
    consumer = OrderedConsumer(client, topic, f"bench-{parallelism}-{uuid.uuid4().hex[:6]}", handler,
                               partition_parallelism=parallelism, max_in_flight=max_in_flight,
                               initial_position="earliest")
    c0 = cpu_s()
    t0 = time.perf_counter()
    await consumer.start()
    while consumer.metrics().completed < n:
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - t0
    cpu = cpu_s() - c0
    m = consumer.metrics()
    await consumer.close()
    processed = sum(len(v) for v in seen.values())
    ordered = all(v == sorted(v) for v in seen.values()) and all(len(set(v)) == len(v) for v in seen.values())
    busy = [p for p in m.partitions if p.active_seconds > 0]
    hot = max(m.partitions, key=lambda p: p.busy_worker_seconds)
    return Row(label, parallelism, n, elapsed, cpu, min(p.effective_parallelism for p in busy),
               max(p.effective_parallelism for p in busy), max(p.hottest_key_share for p in m.partitions),
               hot.effective_parallelism, hot.parallelism_bound, ordered, processed - n, handler_time[0] / processed,
               max(p.received for p in m.partitions))


def machine() -> list[tuple[str, str]]:
    return machine_facts(())


def table(rows: list[Row]) -> str:
    base = {r.keys: r.rate for r in rows if r.parallelism == 1}
    head = ["keys", "N", "msg/s", "vs N=1", "ideal msg/s", "% of ideal", "handler ms", "eff. par. min..max",
            "busiest part. eff./bound", "hot key share", "CPU s", "order per key"]
    lines = [head]
    for r in rows:
        speedup = f"{r.rate / base[r.keys]:.2f}x" if r.keys in base else "-"
        lines.append([r.keys, str(r.parallelism), f"{r.rate:,.0f}", speedup, f"{r.ideal_rate:,.0f}",
                      f"{r.rate / r.ideal_rate:.0%}", f"{r.handler_s * 1000:.2f}",
                      f"{r.effective_min:.2f}..{r.effective_max:.2f}",
                      f"{r.hot_partition_effective:.2f} / {r.hot_partition_bound:.2f}", f"{r.hot_share:.1%}",
                      f"{r.cpu_s:.1f}", "ok" if r.ordered and r.duplicates == 0 else f"BROKEN ({r.duplicates} dup)"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths,
                                                                                              strict=True))) + " |"
           for line in lines]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


@contextlib.contextmanager
def broker(service_url: str | None, admin_url: str | None) -> Iterator[tuple[str, str]]:
    if service_url:
        yield service_url, admin_url or "http://localhost:8080"
        return
    from velamq.testing import run_broker

    with run_broker() as b:
        yield b.service_url, b.admin_url


async def run(args: argparse.Namespace, url: str, admin_url: str) -> list[Row]:
    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:6]
    uniform = [f"key-{rng.randrange(args.keys)}" for _ in range(args.messages)]
    skewed = zipf_keys(args.messages, args.keys, args.zipf_s, rng)
    rows: list[Row] = []
    async with AsyncClient(url, operation_timeout_s=60) as client:
        topics = {}
        for label, keys in (("uniform", uniform), (f"zipf {args.zipf_s}", skewed)):
            topic = f"ordered-{label.split()[0]}-{run_id}"
            create_partitioned_topic(admin_url, topic, args.partitions)
            await produce(client, topic, keys)
            topics[label] = topic
        plan = [(label, p) for label in topics for p in (args.parallelism if label == "uniform" else args.skewed)]
        for label, parallelism in plan:
            row = await consume(client, topics[label], label, args.messages, parallelism, args.handler_ms,
                                args.max_in_flight, args.thread_handler)
            rows.append(row)
            print(f"  {label} N={parallelism}: {row.rate:,.0f} msg/s, effective parallelism "
                  f"{row.effective_min:.2f}..{row.effective_max:.2f}, order {'ok' if row.ordered else 'BROKEN'}",
                  file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--service-url", help="use this broker instead of starting one")
    ap.add_argument("--admin-url", help="its admin URL (with --service-url)")
    ap.add_argument("--messages", type=int, default=16_000, help="messages per topic")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--handler-ms", type=float, default=2.0, help="time the handler takes per message")
    ap.add_argument("--max-in-flight", type=int, default=1000, help="per partition")
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--skewed", type=int, nargs="+", default=[1, 8, 16], help="parallelisms for skewed keys")
    ap.add_argument("--zipf-s", type=float, default=1.1, help="skew of the second topic's keys")
    ap.add_argument("--thread-handler", action="store_true", help="a plain-function handler in the thread pool")
    ap.add_argument("--seed", type=int, default=4)
    args = ap.parse_args(argv)
    with broker(args.service_url, args.admin_url) as (url, admin_url):
        rows = asyncio.run(run(args, url, admin_url))
    kind = "time.sleep in the thread pool" if args.thread_handler else "await asyncio.sleep"
    print(f"\nOrderedConsumer: {args.messages:,} messages per topic, {args.keys} keys, {args.partitions} partitions, "
          f"handler {args.handler_ms:g} ms ({kind}), max_in_flight {args.max_in_flight} per partition\n")
    print(table(rows))
    print("\nN = partition_parallelism. ideal = messages x N / (messages of the largest partition x measured"
          "\nhandler time): every worker of the largest partition always busy. eff. par. = busy-worker-seconds /"
          "\nbusy seconds, per partition (OC-4); bound = min(N, 1 / busiest worker's share of the last 1000"
          "\nmessages); hot key share = the most frequent key's share of a partition's last 1000 messages.\n")
    for k, v in machine():
        print(f"- {k}: {v}")
    return 0 if all(r.ordered and r.duplicates == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
