"""How fast does the official Pulsar client produce to and consume from velamq, and what does each
entry cost the broker? (WC-1, OP-4, issue 12 point 5)

Produces fixed-size messages with the official client (PyPI pulsar-client), batched and unbatched,
with send_async and a bounded number of messages in flight (max_pending_messages, blocking when full),
then flush; then consumes each topic from the start with receive + acknowledge. Prints a table
(mode, messages, seconds, msg/s, MB/s of payload, CPU seconds of client and broker), the ratios
between rows, the broker's CPU per stored entry and per message for each event loop, and the machine.

    .venv/bin/python benchmarks/produce_consume.py                      # asyncio and uvloop brokers
    .venv/bin/python benchmarks/produce_consume.py --loops asyncio      # one broker
    .venv/bin/python benchmarks/produce_consume.py --profile            # + py-spy top frames per row
    .venv/bin/python benchmarks/produce_consume.py --service-url pulsar://127.0.0.1:6650
    .venv/bin/python benchmarks/produce_consume.py --batched 500000 --unbatched 50000

Without --service-url a broker is started for each event loop of --loops with
velamq.testing.run_broker (free ports, temp data dir, default settings: fsync before each receipt;
`--uvloop` for uvloop) and stopped after its rows. Broker CPU is the user + system time of the
broker process from /proc/<pid>/stat (all its threads: loop, journal, flusher), not wall time, so
other load on the machine disturbs it less. The official client's own CPU per message is the fixed
reference: "broker / client" compares runs made on different days or under different load.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import resource
import shlex
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulsar
from _machine import machine_facts
from _pyspy import py_spy_path, recording, top_table


@dataclass(frozen=True, slots=True)
class Row:
    mode: str
    messages: int
    seconds: float
    payload_bytes: int
    client_cpu_s: float = 0.0
    broker_cpu_s: float | None = None
    loop: str = "-"  # the broker's event loop
    entries: int | None = None  # entries the broker stored for the topic (produce rows)

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("inf")

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / 1e6 / self.seconds if self.seconds > 0 else float("inf")


def produce(client: Any, topic: str, n: int, size: int, batched: bool, in_flight: int,
            batch_messages: int) -> Row:
    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_max_messages=batch_messages,
        batching_max_publish_delay_ms=10,
        max_pending_messages=in_flight,
        block_if_queue_full=True,
        send_timeout_millis=120_000,
    )
    payload = os.urandom(size)
    done = threading.Event()
    lock = threading.Lock()
    state = {"completed": 0, "failed": 0}

    def callback(res: Any, _msg_id: Any) -> None:
        with lock:
            state["completed"] += 1
            if res != pulsar.Result.Ok:
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
    return Row(f"produce {'batched' if batched else 'unbatched'}", n, elapsed, n * size)


def consume(client: Any, topic: str, n: int, size: int, label: str) -> Row:
    consumer = client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=1000)
    first = consumer.receive(30_000)
    t0 = time.perf_counter()
    consumer.acknowledge(first)
    for _ in range(n - 1):
        consumer.acknowledge(consumer.receive(30_000))
    elapsed = time.perf_counter() - t0
    consumer.close()
    return Row(f"consume {label}", n, elapsed, n * size)


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of a local process (Linux /proc), None if unknown."""
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


def measured(row_fn: Callable[[], Row], broker_pid: int | None) -> Row:
    """Run one row and attach the CPU seconds this process and the broker spent on it."""
    c0, b0 = self_cpu_s(), process_cpu_s(broker_pid)
    row = row_fn()
    c1, b1 = self_cpu_s(), process_cpu_s(broker_pid)
    broker = b1 - b0 if b0 is not None and b1 is not None else None
    return dataclasses.replace(row, client_cpu_s=c1 - c0, broker_cpu_s=broker)


def machine() -> list[tuple[str, str]]:
    return machine_facts(("pulsar-client", "protobuf", "uvloop"))


def stored_entries(admin_url: str | None, topic: str) -> int | None:
    """numberOfEntries of the topic's internal stats (admin REST), None without an admin URL."""
    if admin_url is None:
        return None
    url = f"{admin_url}/admin/v2/persistent/public/default/{topic}/internalStats"
    with urllib.request.urlopen(url, timeout=30) as response:
        return int(json.load(response)["numberOfEntries"])


def table(rows: list[Row]) -> str:
    head = (f"| {'loop':<7} | {'mode':<20} | {'messages':>9} | {'seconds':>8} | {'msg/s':>9} | {'MB/s':>6} "
            f"| {'client CPU s':>12} | {'broker CPU s':>12} |")
    sep = "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"
    lines = [head, sep]
    for r in rows:
        broker = f"{r.broker_cpu_s:.2f}" if r.broker_cpu_s is not None else "-"
        lines.append(f"| {r.loop:<7} | {r.mode:<20} | {r.messages:>9,} | {r.seconds:>8.2f} | {r.msgs_per_s:>9,.0f} "
                     f"| {r.mb_per_s:>6.2f} | {r.client_cpu_s:>12.2f} | {broker:>12} |")
    return "\n".join(lines)


def _us(seconds: float | None, count: int | None) -> str:
    return f"{seconds / count * 1e6:.2f}" if seconds is not None and count else "-"


def broker_cost_table(rows: list[Row]) -> str:
    """Per event loop: broker CPU µs per unbatched entry, per batched message and entry, per
    consumed message, and the unbatched figure over the official client's CPU per message."""
    head = ("| loop | produce unbatched: broker µs/entry | produce batched: broker µs/msg | µs/entry "
            "| msgs/entry | consume unbatched: broker µs/msg | consume batched: broker µs/msg "
            "| unbatched produce: broker / client CPU |")
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for loop in dict.fromkeys(r.loop for r in rows):
        by = {r.mode: r for r in rows if r.loop == loop}
        pu, pb_, cu, cb = (by.get(m) for m in ("produce unbatched", "produce batched", "consume unbatched",
                                                "consume batched"))
        per_entry = f"{pb_.messages / pb_.entries:,.0f}" if pb_ is not None and pb_.entries else "-"
        ratio = "-"
        if pu is not None and pu.broker_cpu_s is not None and pu.client_cpu_s > 0:
            ratio = f"{pu.broker_cpu_s / pu.client_cpu_s:.2f}"
        lines.append(
            f"| {loop} | {_us(pu.broker_cpu_s, pu.entries) if pu else '-'} "
            f"| {_us(pb_.broker_cpu_s, pb_.messages) if pb_ else '-'} "
            f"| {_us(pb_.broker_cpu_s, pb_.entries) if pb_ else '-'} | {per_entry} "
            f"| {_us(cu.broker_cpu_s, cu.messages) if cu else '-'} "
            f"| {_us(cb.broker_cpu_s, cb.messages) if cb else '-'} "
            f"| {ratio} |"
        )
    return "\n".join(lines)


def ratios(rows: list[Row]) -> list[str]:
    by = {r.mode: r for r in rows}
    pairs = [
        ("produce batched", "produce unbatched"),
        ("consume batched", "consume unbatched"),
        ("consume batched", "produce batched"),
        ("consume unbatched", "produce unbatched"),
    ]
    out = []
    for a, b in pairs:
        if a in by and b in by:
            out.append(f"{a} / {b}: {by[a].msgs_per_s / by[b].msgs_per_s:.2f}x msg/s")
    return out


@contextlib.contextmanager
def broker_url(service_url: str | None, broker_args: list[str]
               ) -> Iterator[tuple[str, int | None, str | None]]:
    """(service URL, broker pid, admin URL); pid and admin URL are None when the broker is not ours."""
    if service_url:
        yield service_url, None, None
        return
    from velamq.testing import run_broker

    with run_broker(extra_args=broker_args) as b:
        yield b.service_url, b.pid, b.admin_url


def run_rows(args: argparse.Namespace, url: str, pid: int | None, admin_url: str | None, loop: str,
             profiles: list[str]) -> list[Row]:
    """Produce then consume, batched then unbatched, against one broker; with a profiler the
    broker is sampled during each row and its top frames are added to `profiles`."""
    py_spy = py_spy_path() if args.profile and pid is not None else None
    client = pulsar.Client(url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    rows: list[Row] = []
    try:
        run = uuid.uuid4().hex[:8]
        for batched, n in ((True, args.batched), (False, args.unbatched)):
            if n <= 0:
                continue
            label = "batched" if batched else "unbatched"
            topic = f"bench-{label}-{run}"
            # Subscribe first, as pulsar-perf does: with Pulsar's default retention (0) the
            # ledgers of a topic without any subscription are deleted as soon as they close.
            client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest).close()
            steps = (functools.partial(produce, client, topic, n, args.size, batched, args.in_flight,
                                       args.batch_messages),
                     functools.partial(consume, client, topic, n, args.size, label))
            for step in steps:
                with tempfile.TemporaryDirectory() as tmp:
                    out = os.path.join(tmp, "profile.txt")
                    spy = (recording(py_spy, pid, out, gil_only=True) if py_spy is not None and pid is not None
                           else contextlib.nullcontext())
                    with spy:
                        row = dataclasses.replace(measured(step, pid), loop=loop)
                    if py_spy is not None and os.path.exists(out):
                        with open(out) as f:
                            samples, lines = top_table(f.read(), args.top)
                        profiles.append(f"### broker ({loop}) during {row.mode}: {samples} samples holding the GIL\n\n"
                                        + "\n".join(lines))
                if row.mode.startswith("produce"):
                    row = dataclasses.replace(row, entries=stored_entries(admin_url, topic))
                rows.append(row)
                print(f"  {loop} {row.mode}: {row.msgs_per_s:,.0f} msg/s", file=sys.stderr, flush=True)
    finally:
        client.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--service-url", help="use this broker instead of starting one")
    ap.add_argument("--batched", type=int, default=500_000, help="messages in the batched run")
    ap.add_argument("--unbatched", type=int, default=100_000, help="messages in the unbatched run")
    ap.add_argument("--size", type=int, default=100, help="payload bytes per message")
    ap.add_argument("--in-flight", type=int, default=1000, help="max_pending_messages of the producer")
    ap.add_argument("--batch-messages", type=int, default=1000, help="batching_max_messages (client default 1000)")
    ap.add_argument("--broker-args", default="", help="extra `velamq standalone` args for the started broker")
    ap.add_argument("--loops", default="asyncio,uvloop",
                    help="event loops of the started brokers, one broker each, in this order")
    ap.add_argument("--profile", action="store_true",
                    help="sample the started broker with py-spy (the thread holding the GIL) during each row")
    ap.add_argument("--top", type=int, default=15, help="functions listed per profile")
    args = ap.parse_args(argv)
    loops = [name.strip() for name in args.loops.split(",") if name.strip()]
    if args.service_url:
        loops = ["?"]
    elif not loops or set(loops) - {"asyncio", "uvloop"}:
        ap.error("--loops takes asyncio and/or uvloop")
    if args.profile and py_spy_path() is None:
        print("py-spy is not installed: .venv/bin/pip install -e '.[dev]'", file=sys.stderr)
        return 2

    load_before = os.getloadavg()
    rows: list[Row] = []
    profiles: list[str] = []
    for loop in loops:
        broker_args = shlex.split(args.broker_args) + (["--uvloop"] if loop == "uvloop" else [])
        with broker_url(args.service_url, broker_args) as (url, pid, admin_url):
            rows += run_rows(args, url, pid, admin_url, loop, profiles)

    where = f"at {args.service_url}" if args.service_url else f"started locally {args.broker_args}".rstrip()
    print(f"\nvelamq produce/consume with the official client: {args.size}-byte messages, "
          f"{args.in_flight} in flight, batches of up to {args.batch_messages}, broker {where}\n")
    print(table(rows))
    print()
    for loop in loops:
        for line in ratios([r for r in rows if r.loop == loop]):
            print(f"- {loop}: {line}")
    print("\nBroker CPU (user + system, all threads) per entry and per message:\n")
    print(broker_cost_table(rows))
    print()
    for profile in profiles:
        print(profile, end="\n\n")
    for k, v in machine():
        print(f"- {k}: {v}")
    load_after = os.getloadavg()
    print(f"- load average (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in load_before)} before, "
          f"{', '.join(f'{x:.1f}' for x in load_after)} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
