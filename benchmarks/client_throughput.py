"""velamq's own client against the official one: msg/s for 100-byte messages, per message and in bulk.

Both clients run in this process, one after the other, against the same velamq broker (fsync
durability, its default), with the same settings. Per-message rows: send_async with at most
--in-flight messages pending (block_if_queue_full), batches of up to --batch-messages messages or
10 ms, then flush; consumption from the earliest position with receive() and an individual
acknowledge() per message, receiver queue 1000 - for velamq both with the asyncio client and with
the blocking one (velamq.client.Client, the README's first example). Bulk rows: velamq's
send_many() of all the values at once (one producer, --bulk-in-flight pending), batch_receive() with
one acknowledge() per batch (and with to_arrow() of each batch), and the official client's
batch_receive() with acknowledge_cumulative() of each batch, receiver queue 10 000. Each consumer
reads a topic of its own, filled beforehand. The table puts the clients side by side and gives
velamq / official ratios; CPU seconds are this process's (client) and the broker's (/proc).

    .venv/bin/python benchmarks/client_throughput.py                  # ~2 min, starts its own broker
    .venv/bin/python benchmarks/client_throughput.py --batched 500000 --unbatched 100000 --bulk 2000000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.metadata
import os
import resource
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
from _machine import machine_facts

from velamq.client import AsyncClient


@dataclass(frozen=True, slots=True)
class Row:
    client: str
    mode: str  # batched | unbatched
    phase: str  # produce | consume
    messages: int
    seconds: float
    client_cpu_s: float
    broker_cpu_s: float | None

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("inf")


def process_cpu_s(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def self_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Meter:
    """CPU of this process and of the broker around one phase."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid

    def run(self, client: str, mode: str, phase: str, body: Callable[[], tuple[int, float]]) -> Row:
        c0, b0 = self_cpu_s(), process_cpu_s(self.broker_pid)
        n, seconds = body()
        c1, b1 = self_cpu_s(), process_cpu_s(self.broker_pid)
        broker = b1 - b0 if b0 is not None and b1 is not None else None
        row = Row(client, mode, phase, n, seconds, c1 - c0, broker)
        print(f"  {client} {phase} {mode}: {row.rate:,.0f} msg/s", file=sys.stderr, flush=True)
        return row


# ---- velamq's client ---------------------------------------------------------------------------


async def ours_produce(client: AsyncClient, topic: str, n: int, payload: bytes, batched: bool, in_flight: int,
                       batch_messages: int) -> tuple[int, float]:
    producer = await client.create_producer(topic, batching_enabled=batched, batching_max_messages=batch_messages,
                                            batching_max_publish_delay_ms=10, max_pending_messages=in_flight,
                                            block_if_queue_full=True, send_timeout_ms=120_000)
    done = asyncio.Event()
    state = {"completed": 0, "failed": 0}

    def completed(future: asyncio.Future[Any]) -> None:
        state["completed"] += 1
        if future.exception() is not None:
            state["failed"] += 1
        if state["completed"] == n:
            done.set()

    t0 = time.perf_counter()
    for _ in range(n):
        (await producer.send_async(payload)).add_done_callback(completed)
    await producer.flush()
    await done.wait()
    elapsed = time.perf_counter() - t0
    await producer.close()
    if state["failed"]:
        raise RuntimeError(f"{state['failed']} of {n} sends failed")
    return n, elapsed


async def ours_consume(client: AsyncClient, topic: str, n: int) -> tuple[int, float]:
    consumer = await client.subscribe(topic, "bench", initial_position="earliest", receiver_queue_size=1000)

    async def drain() -> float:
        # receive() without a timeout, as `async for` does: receive(timeout_ms) wraps every call in
        # asyncio.wait_for, a task per message; one deadline for the whole phase instead.
        first = await consumer.receive()
        t0 = time.perf_counter()
        await consumer.acknowledge(first)
        for _ in range(n - 1):
            await consumer.acknowledge(await consumer.receive())
        return time.perf_counter() - t0

    elapsed = await asyncio.wait_for(drain(), 300)
    await consumer.close()
    return n, elapsed


def blocking_consume(url: str, topic: str, n: int) -> tuple[int, float]:
    from velamq.client import Client

    with Client(url, operation_timeout_s=60) as client:
        consumer = client.subscribe(topic, "bench", initial_position="earliest", receiver_queue_size=1000)
        first = consumer.receive()
        t0 = time.perf_counter()
        consumer.acknowledge(first)
        for _ in range(n - 1):
            consumer.acknowledge(consumer.receive())
        elapsed = time.perf_counter() - t0
        consumer.close()
    return n, elapsed


async def fill(client: AsyncClient, topic: str, n: int, payload: bytes, batch_messages: int) -> None:
    """Untimed: a topic for a consume phase, batched as the produce phase batches."""
    producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=batch_messages,
                                            max_pending_messages=10_000, block_if_queue_full=True)
    await producer.send_many([payload] * n)
    await producer.close()


async def ours_bulk_produce(client: AsyncClient, topic: str, n: int, payload: bytes, in_flight: int,
                            batch_messages: int) -> tuple[int, float]:
    producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=batch_messages,
                                            batching_max_publish_delay_ms=10, max_pending_messages=in_flight,
                                            block_if_queue_full=True, send_timeout_ms=120_000)
    values = [payload] * n
    t0 = time.perf_counter()
    ids = await producer.send_many(values)
    elapsed = time.perf_counter() - t0
    await producer.close()
    if len(ids) != n:
        raise RuntimeError(f"{len(ids)} ids for {n} messages")
    return n, elapsed


async def ours_bulk_consume(client: AsyncClient, topic: str, n: int, arrow: bool) -> tuple[int, float]:
    consumer = await client.subscribe(topic, "bench", initial_position="earliest", receiver_queue_size=10_000)
    first = await consumer.batch_receive(timeout_ms=10_000)
    t0 = time.perf_counter()
    got = len(first)
    await consumer.acknowledge(first)
    while got < n:
        messages = await consumer.batch_receive()
        if arrow:
            messages.to_arrow()
        await consumer.acknowledge(messages)
        got += len(messages)
    elapsed = time.perf_counter() - t0
    await consumer.close()
    return n, elapsed


# ---- the official client -----------------------------------------------------------------------


def official_produce(client: Any, topic: str, n: int, payload: bytes, batched: bool, in_flight: int,
                     batch_messages: int) -> tuple[int, float]:
    producer = client.create_producer(topic, batching_enabled=batched, batching_max_messages=batch_messages,
                                      batching_max_publish_delay_ms=10, max_pending_messages=in_flight,
                                      block_if_queue_full=True, send_timeout_millis=120_000)
    done = threading.Event()
    lock = threading.Lock()
    state = {"completed": 0, "failed": 0}

    def callback(result: Any, _msg_id: Any) -> None:
        with lock:
            state["completed"] += 1
            if result != pulsar.Result.Ok:
                state["failed"] += 1
            if state["completed"] == n:
                done.set()

    t0 = time.perf_counter()
    for _ in range(n):
        producer.send_async(payload, callback)
    producer.flush()
    if not done.wait(300):
        raise RuntimeError(f"only {state['completed']} of {n} sends completed")
    elapsed = time.perf_counter() - t0
    producer.close()
    if state["failed"]:
        raise RuntimeError(f"{state['failed']} of {n} sends failed")
    return n, elapsed


def official_consume(client: Any, topic: str, n: int) -> tuple[int, float]:
    consumer = client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=1000)
    first = consumer.receive(30_000)
    t0 = time.perf_counter()
    consumer.acknowledge(first)
    for _ in range(n - 1):
        consumer.acknowledge(consumer.receive(30_000))
    elapsed = time.perf_counter() - t0
    consumer.close()
    return n, elapsed


def official_bulk_consume(client: Any, topic: str, n: int) -> tuple[int, float]:
    policy = pulsar.ConsumerBatchReceivePolicy(10_000, 10 * 1024 * 1024, 100)
    consumer = client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=10_000, batch_receive_policy=policy)
    first = consumer.receive(30_000)
    t0 = time.perf_counter()
    consumer.acknowledge(first)
    got = 1
    while got < n:
        messages = consumer.batch_receive()
        if messages:
            consumer.acknowledge_cumulative(messages[-1])
        got += len(messages)
    elapsed = time.perf_counter() - t0
    consumer.close()
    return n, elapsed


# ---- report ------------------------------------------------------------------------------------


def machine() -> list[tuple[str, str]]:
    return machine_facts(("pulsar-client",))


# (phase, mode, velamq client label, official client label) in table order
LAYOUT = [
    ("produce", "batched", "velamq", "official"),
    ("produce", "unbatched", "velamq", "official"),
    ("consume", "batched", "velamq", "official"),
    ("consume", "batched", "velamq blocking", "official"),
    ("consume", "unbatched", "velamq", "official"),
    ("consume", "unbatched", "velamq blocking", "official"),
    ("bulk produce", "send_many", "velamq", ""),
    ("bulk consume", "batch_receive", "velamq", "official"),
    ("bulk consume", "batch_receive + to_arrow", "velamq", "official"),
]


def table(rows: list[Row]) -> str:
    by = {(r.client, r.mode, r.phase): r for r in rows}
    head = ["phase", "mode", "velamq client", "messages", "velamq msg/s", "official msg/s", "velamq / official",
            "velamq CPU µs/msg", "official CPU µs/msg", "broker CPU µs/msg (velamq / official)"]
    lines = [head]

    def us(row: Row | None, cpu: float | None) -> str:
        return f"{cpu / row.messages * 1e6:.1f}" if row is not None and cpu is not None else "-"

    for phase, mode, ours_label, theirs_label in LAYOUT:
        ours = by.get((ours_label, mode, phase))
        theirs = by.get((theirs_label, "batch_receive" if phase == "bulk consume" else mode, phase))
        if ours is None:
            continue
        lines.append([phase, mode, "blocking" if "blocking" in ours_label else "asyncio", f"{ours.messages:,}",
                      f"{ours.rate:,.0f}", f"{theirs.rate:,.0f}" if theirs else "-",
                      f"{ours.rate / theirs.rate:.2f}x" if theirs else "-", us(ours, ours.client_cpu_s),
                      us(theirs, theirs.client_cpu_s if theirs else None),
                      f"{us(ours, ours.broker_cpu_s)} / {us(theirs, theirs.broker_cpu_s if theirs else None)}"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w) if i < 3 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(line, widths, strict=True))) + " |" for line in lines]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


@contextlib.contextmanager
def broker(service_url: str | None) -> Iterator[tuple[str, int | None]]:
    if service_url:
        yield service_url, None
        return
    from velamq.testing import run_broker

    with run_broker() as b:
        yield b.service_url, b.pid


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--service-url", help="use this broker instead of starting one")
    ap.add_argument("--batched", type=int, default=200_000, help="messages in each batched run")
    ap.add_argument("--unbatched", type=int, default=50_000, help="messages in each unbatched run")
    ap.add_argument("--bulk", type=int, default=1_000_000, help="messages in each bulk run")
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--in-flight", type=int, default=1000, help="max_pending_messages")
    ap.add_argument("--bulk-in-flight", type=int, default=10_000, help="max_pending_messages of send_many")
    ap.add_argument("--batch-messages", type=int, default=1000, help="batching_max_messages")
    args = ap.parse_args(argv)
    payload = os.urandom(args.size)
    rows: list[Row] = []
    run_id = uuid.uuid4().hex[:6]
    with broker(args.service_url) as (url, pid):
        meter = Meter(pid)
        official = pulsar.Client(url, operation_timeout_seconds=30,
                                 logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        loop = asyncio.new_event_loop()
        ours = loop.run_until_complete(_make_client(url))

        def run(coroutine: Any) -> Any:
            return loop.run_until_complete(coroutine)

        try:
            for batched, n in ((True, args.batched), (False, args.unbatched)):
                if n <= 0:
                    continue
                mode = "batched" if batched else "unbatched"
                t_ours, t_theirs = f"tp-velamq-{mode}-{run_id}", f"tp-official-{mode}-{run_id}"
                settings = (payload, batched, args.in_flight, args.batch_messages)
                rows.append(meter.run("velamq", mode, "produce", functools.partial(
                    run, ours_produce(ours, t_ours, n, *settings))))
                rows.append(meter.run("official", mode, "produce", functools.partial(
                    official_produce, official, t_theirs, n, *settings)))
                rows.append(meter.run("velamq", mode, "consume", functools.partial(
                    run, ours_consume(ours, t_ours, n))))
                t_blocking = f"tp-blocking-{mode}-{run_id}"
                if batched:
                    run(fill(ours, t_blocking, n, payload, args.batch_messages))
                else:
                    run(ours_produce(ours, t_blocking, n, *settings))
                rows.append(meter.run("velamq blocking", mode, "consume", functools.partial(
                    blocking_consume, url, t_blocking, n)))
                rows.append(meter.run("official", mode, "consume", functools.partial(
                    official_consume, official, t_theirs, n)))
            if args.bulk > 0:
                n = args.bulk
                t_bulk = f"tp-bulk-{run_id}"
                rows.append(meter.run("velamq", "send_many", "bulk produce", functools.partial(
                    run, ours_bulk_produce(ours, t_bulk, n, payload, args.bulk_in_flight, args.batch_messages))))
                rows.append(meter.run("velamq", "batch_receive", "bulk consume", functools.partial(
                    run, ours_bulk_consume(ours, t_bulk, n, arrow=False))))
                t_arrow, t_theirs = f"tp-bulk-arrow-{run_id}", f"tp-bulk-official-{run_id}"
                run(fill(ours, t_arrow, n, payload, args.batch_messages))
                run(fill(ours, t_theirs, n, payload, args.batch_messages))
                rows.append(meter.run("velamq", "batch_receive + to_arrow", "bulk consume", functools.partial(
                    run, ours_bulk_consume(ours, t_arrow, n, arrow=True))))
                rows.append(meter.run("official", "batch_receive", "bulk consume", functools.partial(
                    official_bulk_consume, official, t_theirs, n)))
        finally:
            loop.run_until_complete(ours.close())
            loop.close()
            official.close()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nvelamq client vs official client (pulsar-client {importlib.metadata.version('pulsar-client')}): "
          f"{args.size}-byte messages, batches of up to {args.batch_messages} or 10 ms; per message: "
          f"{args.in_flight} in flight, receive + acknowledge; bulk: send_many ({args.bulk_in_flight} in flight), "
          f"batch_receive + one acknowledgement per batch\n")
    print(table(rows))
    print("\nCPU µs/msg: user + system CPU of this process (the client) and of the broker, per message.\n")
    for k, v in machine():
        print(f"- {k}: {v}")
    print(f"- load average at the end: {load}")
    return 0


async def _make_client(url: str) -> AsyncClient:
    return AsyncClient(url, operation_timeout_s=60)


if __name__ == "__main__":
    raise SystemExit(main())
