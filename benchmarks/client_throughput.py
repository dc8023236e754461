"""velamq's own client against the official one: msg/s for 100-byte messages, batched and unbatched.

Both clients run in this process, one after the other, against the same velamq broker, with the
same settings: send_async with at most --in-flight messages pending (block_if_queue_full), batches
of up to --batch-messages messages or 10 ms, then flush; consumption from the earliest position
with receive() and an individual acknowledge() per message, receiver queue 1000. Each client
consumes the topic it produced. The table puts the two clients side by side and gives
velamq / official ratios; CPU seconds are this process's (client) and the broker's (/proc).

    .venv/bin/python benchmarks/client_throughput.py                  # ~1 min, starts its own broker
    .venv/bin/python benchmarks/client_throughput.py --batched 500000 --unbatched 100000
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


# ---- report ------------------------------------------------------------------------------------


def machine() -> list[tuple[str, str]]:
    return machine_facts(("pulsar-client",))


def table(rows: list[Row]) -> str:
    by = {(r.client, r.mode, r.phase): r for r in rows}
    head = ["phase", "mode", "messages", "velamq msg/s", "official msg/s", "velamq / official",
            "velamq CPU µs/msg", "official CPU µs/msg", "broker CPU µs/msg (velamq / official)"]
    lines = [head]
    for phase in ("produce", "consume"):
        for mode in ("batched", "unbatched"):
            ours, theirs = by.get(("velamq", mode, phase)), by.get(("official", mode, phase))
            if ours is None or theirs is None:
                continue

            def us(row: Row, cpu: float | None) -> str:
                return f"{cpu / row.messages * 1e6:.1f}" if cpu is not None else "-"

            lines.append([phase, mode, f"{ours.messages:,}", f"{ours.rate:,.0f}", f"{theirs.rate:,.0f}",
                          f"{ours.rate / theirs.rate:.2f}x", us(ours, ours.client_cpu_s),
                          us(theirs, theirs.client_cpu_s),
                          f"{us(ours, ours.broker_cpu_s)} / {us(theirs, theirs.broker_cpu_s)}"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w) if i < 2 else c.rjust(w)
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
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--in-flight", type=int, default=1000, help="max_pending_messages")
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
        try:
            for batched, n in ((True, args.batched), (False, args.unbatched)):
                if n <= 0:
                    continue
                mode = "batched" if batched else "unbatched"
                t_ours, t_theirs = f"tp-velamq-{mode}-{run_id}", f"tp-official-{mode}-{run_id}"
                settings = (payload, batched, args.in_flight, args.batch_messages)
                rows.append(meter.run("velamq", mode, "produce", functools.partial(
                    loop.run_until_complete, ours_produce(ours, t_ours, n, *settings))))
                rows.append(meter.run("official", mode, "produce", functools.partial(
                    official_produce, official, t_theirs, n, *settings)))
                rows.append(meter.run("velamq", mode, "consume", functools.partial(
                    loop.run_until_complete, ours_consume(ours, t_ours, n))))
                rows.append(meter.run("official", mode, "consume", functools.partial(
                    official_consume, official, t_theirs, n)))
        finally:
            loop.run_until_complete(ours.close())
            loop.close()
            official.close()
    print(f"\nvelamq client vs official client (pulsar-client {importlib.metadata.version('pulsar-client')}): "
          f"{args.size}-byte messages, {args.in_flight} in flight, batches of up to {args.batch_messages} or 10 ms,"
          f" receive + acknowledge per message\n")
    print(table(rows))
    print("\nCPU µs/msg: user + system CPU of this process (the client) and of the broker, per message.\n")
    for k, v in machine():
        print(f"- {k}: {v}")
    return 0


async def _make_client(url: str) -> AsyncClient:
    return AsyncClient(url, operation_timeout_s=60)


if __name__ == "__main__":
    raise SystemExit(main())
