"""One broker process against several (`velamq standalone --workers N`, issue 23), side by side.

Each setting of --workers (default 1 and 2, and `auto` where the machine has more than 2 cores)
runs four loads, each against a fresh broker (default config: --sync-policy fsync), the settings
alternating run after run so they see the same machine load:

    unbatched   16 topics, one connection each to the topic's owner worker, pre-encoded unbatched
                SEND frames of 100 bytes (2 000 in flight per connection), receipts counted; the
                topics' msgInCounter is checked afterwards (the broker-bound load)
    batched     the same with entries of 100 messages (100 entries in flight per connection)
    fan-out     16 topics filled first (not timed), then 10 subscriptions per topic, each a lean
                consumer on a connection of its own to the owner, read everything from the start
    create      4 000 new topics as a client creates them: a LOOKUP on the service port, then a
                PRODUCER on a connection to the owner; both pipelined (200 in flight) over 4
                connections to the service port and 4 per worker

The load generator is this one process (no client library): lean_publish's pre-encoded frames in
large writes and lean_consume's consumers; its own CPU per entry is printed beside the broker's.
Every topic's owner comes from a LOOKUP on the service port, and each topic's connection goes to
the URL it answers. The 16 topics are named so that each worker owns the same number of them.

Broker CPU is user + system time of every broker process (the supervisor and each worker, or
the one process; /proc/PID/stat, every thread) over the timed window, divided by the entries the
broker stored (a batch is one entry) or sent (fan-out: messages delivered) or the topics created.
Each figure is the median of --runs runs; the ratios are the medians of the ratios of run i of a
setting to run i of the first one (the two ran one after the other); the load average is printed
before and after.

    .venv/bin/python benchmarks/workers.py
    .venv/bin/python benchmarks/workers.py --runs 3 --loads unbatched,create --profile gil
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator

from _machine import facts_and_load, machine_facts
from _pyspy import py_spy_path, recording, top_table
from _workers_loads import LoadOptions, Measured, broker_pids, create_topics, fanout, produce, wait_for_workers

from velamq.testing import BrokerProcess, run_broker

LOADS: dict[str, tuple[str, str]] = {  # name: (what, unit of the rate)
    "unbatched": ("unbatched produce, 16 topics", "msg/s"),
    "batched": ("batched produce (100 msgs/entry), 16 topics", "msg/s"),
    "fanout": ("consume fan-out, 16 topics x 10 subscriptions", "msg/s delivered"),
    "create": ("topic creation (LOOKUP + PRODUCER)", "topics/s"),
}


def worker_count(setting: str) -> int:
    return (os.cpu_count() or 1) if setting == "auto" else int(setting)


@contextlib.contextmanager
def broker(setting: str) -> Iterator[BrokerProcess]:
    """A fresh broker of `setting` workers (`--workers auto` passed as such)."""
    with run_broker(extra_args=["--workers", "auto"] if setting == "auto" else (),
                    workers=1 if setting == "auto" else int(setting)) as b:
        wait_for_workers(b, worker_count(setting))
        yield b


def run_load(load: str, b: BrokerProcess, workers: int, opts: LoadOptions) -> Measured:
    if load == "unbatched":
        return produce(b, workers, opts, 1)
    if load == "batched":
        return produce(b, workers, opts, opts.batch)
    if load == "fanout":
        return fanout(b, workers, opts)
    return create_topics(b, opts)


def profiled(load: str, setting: str, opts: LoadOptions, top: int, gil_only: bool) -> str:
    """One extra run under py-spy of every broker process (every busy thread, or with `gil_only`
    the thread holding the interpreter lock); the top frames of each. Its figures are not kept
    (the profiler takes CPU)."""
    spy = py_spy_path()
    if spy is None:
        return "py-spy not found: no profile"
    what = "the thread holding the GIL" if gil_only else "every thread but idle ones"
    out = [f"#### {load}, --workers {setting}: samples of {what}, in each process"]
    with tempfile.TemporaryDirectory() as tmp, broker(setting) as b:
        pids = broker_pids(b)
        files = {name: os.path.join(tmp, f"{pid}.txt") for name, pid in pids.items()}
        with contextlib.ExitStack() as stack:
            for name, pid in pids.items():
                stack.enter_context(recording(spy, pid, files[name], gil_only=gil_only))
            m = run_load(load, b, worker_count(setting), opts)
        out.append(f"\n{m.rate:,.0f} {LOADS[load][1]} under the profiler\n")
        for name, path in files.items():
            if not os.path.exists(path):
                continue
            with open(path) as f:
                samples, lines = top_table(f.read(), top)
            if samples == 0:
                out += [f"{name} (pid {pids[name]}): no samples (it never held the GIL)", ""]
                continue
            out += [f"{name} (pid {pids[name]}): {samples} samples", "", *lines, ""]
    return "\n".join(out)


def median(runs: list[Measured], key: Callable[[Measured], float]) -> float:
    return statistics.median(key(r) for r in runs)


def report(args: argparse.Namespace, settings: list[str], results: dict[tuple[str, str], list[Measured]],
           load_before: tuple[float, float, float], load_after: tuple[float, float, float],
           profiles: list[str]) -> None:
    print(facts_and_load(machine_facts(["protobuf"]), load_before, load_after))
    print(f"- load generator: this one process, pre-encoded frames in large writes (no client library); "
          f"median of {args.runs} runs per figure, each against a fresh broker, --sync-policy fsync\n")
    print("| load | workers | rate | broker CPU µs per entry (all processes) | CPU split: supervisor / workers "
          "| broker cores busy | generator µs per entry | rate vs 1 worker | CPU per entry vs 1 worker |")
    print("|---|---|---|---|---|---|---|---|---|")
    for load in args.loads:
        base = results.get((load, settings[0]))
        for setting in settings:
            runs = results.get((load, setting))
            if not runs:
                continue
            rate = median(runs, lambda r: r.rate)
            us = median(runs, lambda r: r.us_per_entry)
            busy = median(runs, lambda r: r.broker_cpu_s / r.seconds)
            gen = median(runs, lambda r: r.generator_cpu_s / r.entries * 1e6)
            split = " / ".join(f"{statistics.median(r.cpu_s[k] / r.broker_cpu_s for r in runs):.0%}"
                               for k in runs[0].cpu_s)
            ratio_rate = ratio_cpu = "1.00"
            if base and setting != settings[0]:
                # Run i of each setting ran one after the other: the median of those pairs' ratios
                # follows the machine's load less than a ratio of medians would.
                pairs = list(zip(runs, base, strict=False))
                ratio_rate = f"{statistics.median(r.rate / b.rate for r, b in pairs):.2f}"
                ratio_cpu = f"{statistics.median(r.us_per_entry / b.us_per_entry for r, b in pairs):.2f}"
            print(f"| {LOADS[load][0]} | {setting} | {rate:,.0f} {LOADS[load][1]} | {us:.1f} | {split} "
                  f"| {busy:.2f} | {gen:.2f} | {ratio_rate} | {ratio_cpu} |")
    for profile in profiles:
        print(f"\n{profile}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = "1,2,auto" if (os.cpu_count() or 1) > 2 else "1,2"
    ap.add_argument("--workers", default=default, help=f"settings compared, the first is the base (default {default})")
    ap.add_argument("--loads", default=",".join(LOADS), help="which loads, of " + ", ".join(LOADS))
    ap.add_argument("--runs", type=int, default=3, help="runs per setting and load (medians printed)")
    ap.add_argument("--messages", type=int, default=LoadOptions.messages, help="unbatched messages per run")
    ap.add_argument("--batched-messages", type=int, default=LoadOptions.batched_messages)
    ap.add_argument("--fanout-messages", type=int, default=LoadOptions.fanout_messages,
                    help="messages published before the fan-out (each read by every subscription)")
    ap.add_argument("--create-topics", type=int, default=LoadOptions.create_topics)
    ap.add_argument("--profile", choices=("all", "gil"),
                    help="one extra run of each load and setting under py-spy --threads (gil: --gil too), every "
                         "broker process, and print the top frames (those runs' figures are not kept)")
    ap.add_argument("--top", type=int, default=12, help="functions listed per profiled process")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.loads = [load for load in args.loads.split(",") if load]
    unknown = [load for load in args.loads if load not in LOADS]
    if unknown:
        raise SystemExit(f"unknown loads {unknown}: choose from {list(LOADS)}")
    settings = [s for s in args.workers.split(",") if s]
    opts = LoadOptions(messages=args.messages, batched_messages=args.batched_messages,
                       fanout_messages=args.fanout_messages, create_topics=args.create_topics)
    load_before = os.getloadavg()
    results: dict[tuple[str, str], list[Measured]] = {}
    for i in range(args.runs):
        for load in args.loads:
            for setting in settings:
                with broker(setting) as b:
                    m = run_load(load, b, worker_count(setting), opts)
                results.setdefault((load, setting), []).append(m)
                print(f"  run {i + 1} {load} --workers {setting}: {m.rate:,.0f} {LOADS[load][1]}, "
                      f"{m.us_per_entry:.1f} µs/entry, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    profiles = [profiled(load, s, opts, args.top, args.profile == "gil") for load in args.loads for s in settings
                if args.profile]
    report(args, settings, results, load_before, load_after, profiles)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
