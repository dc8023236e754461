"""vivo's producer-tuning headline (PR-13): at the same write rate, what does the tuned template save the broker?

vivo reports that, with compression on before and after, the template (PR-12) cut the broker's
network traffic by about half and its CPU by about 90 %. This script sends the same stream, 1 KiB
JSON documents round-robin over an 8-partition topic at a fixed rate with LZ4, three ways:

    unbatched          the producer defaults of velamq and of the official Python client: no batching
    java-defaults      batching as the Java client does it by default: 1000 messages or 128 KiB or
                       1 ms per batch, partition switch every 10 publish delays (vivo's
                       "before": its users ran Java producers)
    batching-defaults  batching_enabled=True, every other setting at the Python clients' defaults
                       (as java-defaults, but 10 ms per batch)
    tuned              ProducerConfig.tuned(1024, 8, --memory, 10): the template ("after")

for velamq's producer and for the official producer (pulsar-client; it has no memory limit or
partition switch frequency to set, and its C++ round-robin router already moves on after each
batch). Each run has its own topic on one broker started with velamq.testing.run_broker, and
measures over the run (first send to last receipt):

    broker CPU s        user + system of the broker process (/proc/<pid>/stat)
    network bytes in    bytes the broker's sockets received (TCP_INFO bytes_received of the broker's
                        connections, read with `ss` just before the producer closes): frames,
                        commands and entries
    stored bytes        pulsar_in_bytes_total of the topic's partitions (/metrics): entry bytes
    entries             velamq_topic_entries of the topic's partitions: storage writes
    journal bytes, fsyncs   velamq_storage_journal_bytes_total, velamq_storage_fsyncs_total
    producer CPU s      user + system of this process, where the producer runs

and prints them per client, with the change the tuned template makes against each other config.

    .venv/bin/python benchmarks/producer_tuning.py                    # ~1.5 min
    .venv/bin/python benchmarks/producer_tuning.py --rate 20000 --seconds 20

vivo's rate is 20 000 msg/s; the default here is 10 000 because on a 2-core machine the
unbatched configuration cannot sustain 20 000 msg/s of 1 KiB with the broker on the same cores
(it reaches about 9 000-10 000). Every row prints the rate it reached, and rows more than 5 %
below the target are listed: compare rows only when they reached the same rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import resource
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
from _machine import machine_facts

from velamq.client import AsyncClient, ProducerConfig
from velamq.testing import BrokerProcess, run_broker

MIB = 1024 * 1024
CONFIGS = ("unbatched", "java-defaults", "batching-defaults", "tuned")
_WORDS = ["order", "shipped", "payment", "pending", "refund", "click", "view", "cart", "checkout", "user",
          "session", "mobile", "desktop", "search", "product", "category", "price", "discount", "coupon", "stock",
          "warehouse", "region", "beijing", "shanghai", "shenzhen", "android", "ios", "web", "latency", "error",
          "retry", "success"]


def json_documents(count: int, size: int, rng: random.Random) -> list[bytes]:
    """`count` different JSON events of exactly `size` bytes (compressible as real events are)."""
    docs = []
    for i in range(count):
        event = {"id": i, "ts": 1_700_000_000_000 + i * 7, "user": f"user-{rng.randrange(100_000):05d}",
                 "event": rng.choice(_WORDS), "page": f"/products/{rng.randrange(5000)}",
                 "device": rng.choice(["android", "ios", "web"]), "amount": round(rng.random() * 1000, 2),
                 "text": ""}
        base = len(json.dumps(event, separators=(",", ":")).encode())
        words: list[str] = []
        while base + len(" ".join(words)) < size:
            words.append(rng.choice(_WORDS))
        event["text"] = " ".join(words)[: size - base]
        doc = json.dumps(event, separators=(",", ":")).encode()
        docs.append(doc[:size] if len(doc) > size else doc + b" " * (size - len(doc)))
    return docs


# ---- broker-side figures -----------------------------------------------------------------------


def broker_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_BYTES_RECEIVED = re.compile(r"\bbytes_received:(\d+)")


def broker_bytes_received(port: int) -> int:
    """Bytes received so far by the broker's open connections on `port` (TCP_INFO, via `ss`)."""
    out = subprocess.run(["ss", "-tniH", "state", "established", f"( sport = :{port} )"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return sum(int(m) for m in _BYTES_RECEIVED.findall(out))


_SAMPLE = re.compile(r'^(\w+)\{([^}]*)\}\s+(\S+)$')


def scrape(admin_url: str, topic: str) -> dict[str, float]:
    """Sums over the topic's partitions of the per-topic metrics, plus the storage counters."""
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    wanted_topic = {"pulsar_in_bytes_total", "pulsar_in_messages_total", "velamq_topic_entries"}
    wanted_global = {"velamq_storage_journal_bytes_total", "velamq_storage_fsyncs_total"}
    out: dict[str, float] = dict.fromkeys(wanted_topic | wanted_global, 0.0)
    prefix = f'topic="persistent://public/default/{topic}-partition-'
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        if (name in wanted_topic and prefix in labels) or name in wanted_global:
            out[name] += float(value)
    return out


def self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass(frozen=True, slots=True)
class Run:
    client: str
    config: str
    messages: int
    send_seconds: float
    total_seconds: float
    broker_cpu_s: float
    network_bytes_in: int
    stored_bytes: float
    entries: float
    journal_bytes: float
    fsyncs: float
    producer_cpu_s: float

    @property
    def rate(self) -> float:
        return self.messages / self.send_seconds if self.send_seconds > 0 else 0.0


# ---- the two producers -------------------------------------------------------------------------


async def velamq_send(url: str, topic: str, config: ProducerConfig, docs: list[bytes], n: int, rate: float,
                      before_close: Callable[[], None]) -> float:
    """Send n messages at `rate`; returns the seconds the sends took (receipts awaited after)."""
    client_options: dict[str, Any] = {"operation_timeout_s": 60}
    if config.memory_limit_bytes:
        client_options["memory_limit_bytes"] = config.memory_limit_bytes
    async with AsyncClient(url, **client_options) as client:
        producer = await client.create_producer(topic, config.with_options(block_if_queue_full=True,
                                                                           send_timeout_ms=120_000))
        failed: list[BaseException] = []

        def check(future: asyncio.Future[Any]) -> None:
            if future.exception() is not None:
                failed.append(future.exception())  # type: ignore[arg-type]

        loop = asyncio.get_running_loop()
        t0 = loop.time()
        sent = 0
        while sent < n:
            due = min(n, int((loop.time() - t0) * rate) + 1)
            while sent < due:
                (await producer.send_async(docs[sent % len(docs)])).add_done_callback(check)
                sent += 1
            await asyncio.sleep(0.002)
        send_seconds = loop.time() - t0
        await producer.flush()
        before_close()
        await producer.close()
        if failed:
            raise RuntimeError(f"{len(failed)} sends failed: {failed[0]}")
        return send_seconds


def official_send(url: str, topic: str, options: dict[str, Any], docs: list[bytes], n: int, rate: float,
                  before_close: Callable[[], None]) -> float:
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(topic, block_if_queue_full=True, send_timeout_millis=120_000,
                                          compression_type=pulsar.CompressionType.LZ4, **options)
        lock = threading.Lock()
        state = {"done": 0, "failed": 0}
        finished = threading.Event()

        def callback(result: Any, _msg_id: Any) -> None:
            with lock:
                state["done"] += 1
                state["failed"] += result != pulsar.Result.Ok
                if state["done"] == n:
                    finished.set()

        t0 = time.perf_counter()
        sent = 0
        while sent < n:
            due = min(n, int((time.perf_counter() - t0) * rate) + 1)
            while sent < due:
                producer.send_async(docs[sent % len(docs)], callback)
                sent += 1
            time.sleep(0.002)
        send_seconds = time.perf_counter() - t0
        producer.flush()
        if not finished.wait(120):
            raise RuntimeError(f"only {state['done']} of {n} receipts")
        before_close()
        producer.close()
        if state["failed"]:
            raise RuntimeError(f"{state['failed']} sends failed")
        return send_seconds
    finally:
        client.close()


def velamq_config(name: str, partitions: int, message_bytes: int, memory_bytes: int) -> ProducerConfig:
    if name == "unbatched":
        return ProducerConfig(compression_type="lz4")
    if name == "java-defaults":
        return ProducerConfig(compression_type="lz4", batching_enabled=True, batching_max_publish_delay_ms=1)
    if name == "batching-defaults":
        return ProducerConfig(compression_type="lz4", batching_enabled=True)
    return ProducerConfig.tuned(message_bytes, partitions, memory_bytes, 10, compression_type="lz4")


def official_options(name: str, partitions: int, message_bytes: int, memory_bytes: int) -> dict[str, Any]:
    if name == "unbatched":
        return {}
    if name == "java-defaults":
        return {"batching_enabled": True, "batching_max_publish_delay_ms": 1}
    if name == "batching-defaults":
        return {"batching_enabled": True}
    t = ProducerConfig.tuned(message_bytes, partitions, memory_bytes, 10)
    return {"batching_enabled": True, "max_pending_messages": t.max_pending_messages,
            "max_pending_messages_across_partitions": t.max_pending_messages_across_partitions,
            "batching_max_messages": t.batching_max_messages,
            "batching_max_allowed_size_in_bytes": t.batching_max_bytes,
            "batching_max_publish_delay_ms": t.batching_max_publish_delay_ms,
            "message_routing_mode": pulsar.PartitionsRoutingMode.RoundRobinDistribution}


def measure(broker: BrokerProcess, client: str, config: str, topic: str, n: int,
            send: Callable[[Callable[[], None]], float]) -> Run:
    assert broker.pid is not None
    pid = broker.pid
    before = scrape(broker.admin_url, topic)
    received = [0]

    def before_close() -> None:
        # Every connection of this run is still open and nothing else talks to this broker's port.
        received[0] = broker_bytes_received(broker.broker_port)

    c0, b0, t0 = self_cpu_s(), broker_cpu_s(pid), time.perf_counter()
    send_seconds = send(before_close)
    c1, b1, t1 = self_cpu_s(), broker_cpu_s(pid), time.perf_counter()
    after = scrape(broker.admin_url, topic)

    def delta(name: str) -> float:
        return after[name] - before[name]

    if delta("pulsar_in_messages_total") != n:
        raise RuntimeError(f"{client} {config}: the broker counted {delta('pulsar_in_messages_total')} of {n}")
    run = Run(client, config, n, send_seconds, t1 - t0, b1 - b0, received[0], delta("pulsar_in_bytes_total"),
              delta("velamq_topic_entries"), delta("velamq_storage_journal_bytes_total"),
              delta("velamq_storage_fsyncs_total"), c1 - c0)
    print(f"  {client:<8} {config:<17} {run.rate:>8,.0f} msg/s  broker CPU {run.broker_cpu_s:5.2f} s  "
          f"entries {run.entries:>8,.0f}", file=sys.stderr, flush=True)
    return run


def create_partitioned_topic(admin_url: str, topic: str, partitions: int) -> None:
    req = urllib.request.Request(f"{admin_url}/admin/v2/persistent/public/default/{topic}/partitions",
                                 data=json.dumps(partitions).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30):
        pass


# ---- report ------------------------------------------------------------------------------------


def _table(head: list[str], lines: list[list[str]]) -> str:
    rows = [head, *lines]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                              strict=True))) + " |"
           for r in rows]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def figures_table(runs: list[Run]) -> str:
    head = ["client", "config", "msg/s", "broker CPU s", "network MB in", "stored MB", "entries", "msgs/entry",
            "journal MB", "fsyncs", "producer CPU s"]
    lines = []
    for r in runs:
        per_entry = f"{r.messages / r.entries:,.1f}" if r.entries else "-"
        lines.append([r.client, r.config, f"{r.rate:,.0f}", f"{r.broker_cpu_s:.2f}", f"{r.network_bytes_in / 1e6:.1f}",
                      f"{r.stored_bytes / 1e6:.1f}", f"{r.entries:,.0f}", per_entry, f"{r.journal_bytes / 1e6:.1f}",
                      f"{r.fsyncs:,.0f}", f"{r.producer_cpu_s:.2f}"])
    return _table(head, lines)


def ratio_table(runs: list[Run]) -> str:
    by = {(r.client, r.config): r for r in runs}
    head = ["client", "tuned vs", "broker CPU", "network bytes in", "stored bytes", "entries", "producer CPU"]
    lines = []

    def pct(a: float, b: float) -> str:
        return f"{(a / b - 1):+.0%}" if b else "-"

    for client in ("velamq", "official"):
        tuned = by.get((client, "tuned"))
        for base_name in CONFIGS[:-1]:
            base = by.get((client, base_name))
            if tuned is None or base is None:
                continue
            lines.append([client, base_name, pct(tuned.broker_cpu_s, base.broker_cpu_s),
                          pct(tuned.network_bytes_in, base.network_bytes_in),
                          pct(tuned.stored_bytes, base.stored_bytes), pct(tuned.entries, base.entries),
                          pct(tuned.producer_cpu_s, base.producer_cpu_s)])
    return _table(head, lines)


def machine() -> list[tuple[str, str]]:
    return machine_facts(("pulsar-client",))


@contextlib.contextmanager
def started_broker() -> Iterator[BrokerProcess]:
    with run_broker() as broker:
        yield broker


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rate", type=float, default=10_000, help="messages per second (vivo's tuning used 20000)")
    ap.add_argument("--seconds", type=float, default=8, help="seconds of sending per run")
    ap.add_argument("--size", type=int, default=1024, help="bytes per JSON message")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--memory", type=int, default=64, help="MiB of memory budget for the tuned template")
    ap.add_argument("--clients", nargs="+", default=["velamq", "official"], choices=["velamq", "official"])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = ap.parse_args(argv)
    n = int(args.rate * args.seconds)
    docs = json_documents(1000, args.size, random.Random(0))
    memory = args.memory * MIB
    runs: list[Run] = []
    run_id = uuid.uuid4().hex[:6]
    with started_broker() as broker:
        for client in args.clients:
            for config in args.configs:
                topic = f"tuning-{client}-{config.replace('+', '-')}-{run_id}"
                create_partitioned_topic(broker.admin_url, topic, args.partitions)
                send: Callable[[Callable[[], None]], float]
                if client == "velamq":
                    cfg = velamq_config(config, args.partitions, args.size, memory)

                    def send(hook: Callable[[], None], t: str = topic, c: ProducerConfig = cfg) -> float:
                        return asyncio.run(velamq_send(broker.service_url, t, c, docs, n, args.rate, hook))
                else:
                    opts = official_options(config, args.partitions, args.size, memory)

                    def send(hook: Callable[[], None], t: str = topic, o: dict[str, Any] = opts) -> float:
                        return official_send(broker.service_url, t, o, docs, n, args.rate, hook)
                runs.append(measure(broker, client, config, topic, n, send))
    ratio = sum(len(d) for d in docs) / sum(len(_lz4(d)) for d in docs)
    print(f"\nproducer tuning (PR-13): {n:,} JSON messages of {args.size} B per run at {args.rate:,.0f} msg/s "
          f"({args.seconds:g} s), LZ4 (a single document compresses {ratio:.2f}x), {args.partitions} partitions, "
          f"round robin; tuned = ProducerConfig.tuned({args.size}, {args.partitions}, {args.memory} MiB, 10 ms)\n")
    print(figures_table(runs))
    slow = [f"{r.client} {r.config} ({r.rate:,.0f})" for r in runs if r.rate < 0.95 * args.rate]
    if slow:
        print(f"\nBELOW THE TARGET RATE (compare these rows with care): {', '.join(slow)}")
    print("\nChange with the tuned template (vivo's figures: broker network about -50 %, broker CPU about -90 %):\n")
    print(ratio_table(runs))
    print()
    for k, v in machine():
        print(f"- {k}: {v}")
    return 0


def _lz4(data: bytes) -> bytes:
    import lz4.block

    result: bytes = lz4.block.compress(data, store_size=False)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
