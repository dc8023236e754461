"""Does `velamq perf produce --lean` drive a broker to its saturation figure? (issue 22)

Side by side, against a broker of its own each run: lean_publish's in-process generator (the
reference: 0.5-1 µs of generator CPU per message) and `velamq perf produce --lean` as an operator
runs it (a subprocess, `--processes` 1 and 2, one producer per process, unbatched 100-byte
messages). For each: msg/s over the timed window, broker CPU per message (all its threads, from
/proc), the tool's CPU per message, and for perf its publish -> receipt p50/p99. The counts are
checked against the topic's msgInCounter. Median of --runs by broker CPU per message, load
average before and after.

    .venv/bin/python benchmarks/perf_saturation.py
    .venv/bin/python benchmarks/perf_saturation.py --messages 300000 --processes 1,2,4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import lean_publish as lean
from _machine import facts_and_load, machine_facts


@dataclass
class Figure:
    rate: float
    broker_us: float
    tool_us: float
    p50_ms: float = 0.0
    p99_ms: float = 0.0


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def perf_run(port: int, admin_url: str, pid: int, args: argparse.Namespace, processes: int) -> Figure:
    topic = f"sat-{uuid.uuid4().hex[:10]}"
    argv = [sys.executable, "-m", "velamq", "perf", "produce", "--lean", "-db", "-u", f"pulsar://127.0.0.1:{port}",
            "-r", "0", "-m", str(args.messages), "-s", str(args.size), "-o", str(args.window), "-i", "0", "--json",
            "-n", str(processes), "--processes", str(processes), topic]
    broker_before = sum(lean.thread_cpu_s(pid).values())
    tool_before = _children_cpu_s()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    tool_cpu = _children_cpu_s() - tool_before
    broker_cpu = sum(lean.thread_cpu_s(pid).values()) - broker_before
    if done.returncode:
        raise RuntimeError(f"velamq perf failed:\n{done.stderr}")
    summary = json.loads(done.stdout.splitlines()[-1])
    produced = summary["produced"]["messages"]
    stored = lean.msg_in_counter(admin_url, topic)
    if produced != args.messages or stored != produced:
        raise RuntimeError(f"perf produced {produced}, msgInCounter {stored}, wanted {args.messages}")
    latency = summary["publish_latency_ms"]
    # The broker's CPU over the whole subprocess includes the producers' set-up (a few ms).
    return Figure(summary["produced"]["msg_per_s"], broker_cpu / produced * 1e6, tool_cpu / produced * 1e6,
                  latency["p50"], latency["p99"])


def reference_run(port: int, admin_url: str, pid: int, args: argparse.Namespace) -> Figure:
    lean_args = argparse.Namespace(messages=args.messages, size=args.size, batch=1, window=args.window,
                                   chunk=1000, subscribe=False, profile=None)
    run = lean.velamq_run(port, admin_url, pid, lean_args, 1)
    return Figure(run.rate, run.us_per_message, run.client_cpu_s / run.messages * 1e6)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--window", type=int, default=5000, help="sends in flight per connection / producer")
    ap.add_argument("--processes", default="1,2", help="velamq perf --processes values")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--broker-conf", help="a broker.conf of overrides for every broker")
    ap.add_argument("--policy", default="fsync", help="the broker's --sync-policy")
    args = ap.parse_args()
    tree = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    load_before = os.getloadavg()
    kinds = ["lean_publish (in-process)"] + [f"velamq perf --lean, {p} process(es)"
                                              for p in args.processes.split(",") if p]
    figures: dict[str, list[Figure]] = {k: [] for k in kinds}
    for _ in range(args.runs):
        for kind in kinds:  # alternating, so every kind sees the same load
            with lean.velamq_broker(tree, args.policy, args.broker_conf) as (port, admin_url, pid):
                time.sleep(0.2)
                if kind.startswith("lean_publish"):
                    figure = reference_run(port, admin_url, pid, args)
                else:
                    figure = perf_run(port, admin_url, pid, args, int(kind.split(", ")[1].split()[0]))
            figures[kind].append(figure)
            print(f"  {kind}: {figure.rate:,.0f} msg/s, {figure.broker_us:.2f} µs", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    print(facts_and_load(machine_facts(["protobuf"]), load_before, load_after))
    print(f"- {args.messages:,} unbatched messages of {args.size} bytes per run, {args.window} in flight per "
          f"connection, --sync-policy {args.policy}, median of {args.runs} by broker CPU per message\n")
    print("| generator | msg/s | broker CPU µs/msg | generator CPU µs/msg | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    for kind in kinds:
        f = sorted(figures[kind], key=lambda x: x.broker_us)[len(figures[kind]) // 2]
        latency = f"{f.p50_ms:.1f} | {f.p99_ms:.1f}" if f.p50_ms else " | "
        print(f"| {kind} | {f.rate:,.0f} | {f.broker_us:.2f} | {f.tool_us:.2f} | {latency} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
