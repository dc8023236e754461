"""Topic creation through one metadata.db written by 1 or by several processes at once (issue 23:
worker processes share the metadata file; topic creation across workers must not be slower than
one process, and SC-4's >= 5 000 topics/s still stands).

Each process opens its own MetadataStore(shared=True) on the same file (as each worker does) and
creates its share of the topics with MetadataStore.open_topic(create=True) -- the broker's one
operation per topic load -- keeping `--in-flight` operations going, as a broker does when many
producers arrive at once. The same total number of topics is created by 1 and by N processes,
alternately, so the figures of one run compare side by side; the table gives the median of the
runs, the CPU per topic of all processes together, and the ratio to one process.

    python benchmarks/metadata_shared.py [--topics 20000] [--processes 1,2] [--runs 3] [--in-flight 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from _machine import machine_facts

from velamq.metadata import MetadataStore

NS = "public/bench"


async def _create(path: Path, names: list[str], in_flight: int, barrier: Barrier) -> tuple[float, float, float]:
    store = MetadataStore(path, shared=True)
    await store.start()
    try:
        await asyncio.to_thread(barrier.wait, 120)
        cpu0, start = time.process_time(), time.time()
        pending = iter(names)

        async def feed() -> None:
            for name in pending:
                await store.open_topic(name, create=True)

        await asyncio.gather(*(feed() for _ in range(in_flight)))
        return start, time.time(), time.process_time() - cpu0
    finally:
        await store.close()


def _child(path: str, names: list[str], in_flight: int, barrier: Barrier, results: Any) -> None:
    results.put(asyncio.run(_create(Path(path), names, in_flight, barrier)))


@dataclass
class Run:
    processes: int
    topics_per_s: float
    cpu_us_per_topic: float


def one_run(root: Path, processes: int, topics: int, in_flight: int, run_id: int) -> Run:
    path = root / f"run{run_id}-{processes}" / "metadata.db"

    async def prepare() -> None:
        store = MetadataStore(path)
        await store.start()
        await store.create_namespace(NS)
        await store.close()

    asyncio.run(prepare())
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    shares = [[f"persistent://{NS}/t-{i}" for i in range(p, topics, processes)] for p in range(processes)]
    children = [ctx.Process(target=_child, args=(str(path), share, in_flight // processes, barrier, results))
                for share in shares]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=600) for _ in children]
    for child in children:
        child.join(60)
        if child.exitcode != 0:
            raise SystemExit(f"a creating process failed (exit code {child.exitcode})")
    wall = max(end for _, end, _ in outcomes) - min(start for start, _, _ in outcomes)
    cpu = sum(c for _, _, c in outcomes)
    _check_count(path, topics)
    return Run(processes, topics / wall, cpu / topics * 1e6)


def _check_count(path: Path, topics: int) -> None:
    async def count() -> int:
        store = MetadataStore(path)
        await store.start()
        try:
            return await store.count_topics(NS)
        finally:
            await store.close()

    found = asyncio.run(count())
    if found != topics:
        raise SystemExit(f"expected {topics} topic rows, found {found}: an update was lost")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=20_000)
    parser.add_argument("--processes", default="1,2", help="comma-separated process counts")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=1000, help="operations kept going, all processes together")
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temporary directory)")
    args = parser.parse_args()
    counts = [int(p) for p in args.processes.split(",")]
    load_before = os.getloadavg()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for run_id in range(args.runs):
            for processes in counts:  # alternately, so a change of machine load hits every row alike
                runs.append(one_run(Path(tmp), processes, args.topics, args.in_flight, run_id))
    load_after = os.getloadavg()
    for key, value in machine_facts():
        print(f"{key}: {value}")
    print(f"load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f}")
    print(f"{args.topics} topics per run, {args.in_flight} operations in flight, median of {args.runs} runs\n")
    print(f"{'processes':>9} {'topics/s':>10} {'CPU us/topic':>13} {'ratio':>11}  runs (topics/s)")
    base = None
    for processes in counts:
        mine = [r for r in runs if r.processes == processes]
        rate = statistics.median(r.topics_per_s for r in mine)
        cpu = statistics.median(r.cpu_us_per_topic for r in mine)
        base = base or rate
        each = ", ".join(f"{r.topics_per_s:.0f}" for r in mine)
        print(f"{processes:>9} {rate:>10.0f} {cpu:>13.1f} {rate / base:>11.2f}  {each}")


if __name__ == "__main__":
    main()
