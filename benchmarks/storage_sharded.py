"""Storage per bundle: what the ShardedStorage facade and N shards cost against one Storage.

    a) appends: 16 topics, 1000 appends in flight, side by side in each round: one Storage,
       ShardedStorage with 1 shard (the facade alone), with 4 shards (4 journals, 4 group commits).
       Median of --rounds rounds (default 3): appends/s, entries per fsync, CPU µs per append (this
       process, all threads), and the ratio to one Storage; with fsync (bound by the disk) and with
       sync_policy none (bound by the CPU: where the facade would show).
    b) moving a shard: one shard with --topics topics (default 1000), each with one entry and one
       cursor: close_shard (appends complete, cursors written, flush, unlock) and the reopening at
       the next use (lock, recovery, the first open_ledger), median of --rounds.
    c) what an open shard costs by itself: 32 shards opened, each with one topic of 100 entries
       read back once; the process's RSS growth and threads per shard (outside the memory budget:
       SQLite's page caches, the shard's threads and buffers).

    .venv/bin/python benchmarks/storage_sharded.py [--seconds 3] [--rounds 3] [--dir /path/on/disk]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from velamq.storage import Position, ShardedStorage, Storage, StorageConfig

sys.path.insert(0, str(Path(__file__).parent))
from _machine import machine_facts
from storage import table

TOPICS = 16
IN_FLIGHT = 1000
SIZE = 1024


def shard_of(shards: int) -> Callable[[str], str]:
    return lambda name: f"public/default/0x{zlib.crc32(name.encode()) % shards:08x}"


def make(kind: str, directory: Path, sync: str) -> Any:
    config = StorageConfig(directory, sync_policy=sync)  # type: ignore[arg-type]
    if kind == "Storage":
        return Storage(config)
    shards = int(kind.split()[1])
    return ShardedStorage(config, shard_of=shard_of(shards))


async def append_row(kind: str, directory: Path, seconds: float, sync: str) -> tuple[float, float, float]:
    """appends/s, entries per fsync, CPU µs per append."""
    storage = make(kind, directory, sync)
    await storage.start()
    data = os.urandom(SIZE)
    try:
        mls = [await storage.open_ledger(f"persistent://public/default/t{t}") for t in range(TOPICS)]
        before = storage.metrics()
        stop = time.perf_counter() + seconds
        done = 0

        async def producer(k: int) -> None:
            nonlocal done
            ml = mls[k % TOPICS]
            while time.perf_counter() < stop:
                await ml.append(data)
                done += 1

        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(producer(k) for k in range(IN_FLIGHT)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        after = storage.metrics()
        fsyncs = after["velamq_storage_journal_fsyncs_total"] - before["velamq_storage_journal_fsyncs_total"]
        return done / wall, done / fsyncs if fsyncs else 0.0, cpu / done * 1e6
    finally:
        await storage.close()


def part_a(base: Path, seconds: float, rounds: int, sync: str) -> str:
    kinds = ["Storage", "sharded 1", "sharded 4"]
    figures: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
    for r in range(rounds):
        for kind in kinds[r % 3 :] + kinds[: r % 3]:  # side by side in every round, each first in turn
            directory = base / f"a-{sync}-{r}-{kind.replace(' ', '')}"
            figures[kind].append(asyncio.run(append_row(kind, directory, seconds, sync)))
    medians = {k: [statistics.median(f[i] for f in v) for i in range(3)] for k, v in figures.items()}
    rows = [[k, m[0], m[1], m[2], m[0] / medians["Storage"][0]] for k, m in medians.items()]
    headers = ["storage", "appends/s", "entries per fsync", "CPU µs per append", "ratio to Storage"]
    return f"a) appends, 16 topics, 1 KiB, 1000 in flight, sync_policy={sync}\n\n" + table(headers, rows)


async def move_round(directory: Path, topics: int) -> tuple[float, float]:
    storage = ShardedStorage(StorageConfig(directory, sync_policy="fsync"), shard_of=shard_of(1))
    await storage.start()
    try:
        names = [f"persistent://public/default/m{t}" for t in range(topics)]
        for name in names:
            ml = await storage.open_ledger(name)
            await ml.open_cursor("sub", "earliest")
            await ml.append(b"x" * 100)
        key = storage.open_shards()[0]
        t0 = time.perf_counter()
        await storage.close_shard(key)
        t1 = time.perf_counter()
        await storage.open_ledger(names[0])
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1
    finally:
        await storage.close()


def part_b(base: Path, topics: int, rounds: int) -> str:
    results = [asyncio.run(move_round(base / f"b-{r}", topics)) for r in range(rounds)]
    close_s = statistics.median(r[0] for r in results)
    open_s = statistics.median(r[1] for r in results)
    rows = [[topics, close_s * 1000, open_s * 1000]]
    headers = ["topics in the shard", "close_shard ms", "reopen + first open_ledger ms"]
    return f"b) moving a shard ({topics} topics, each one entry and one cursor, fsync)\n\n" + table(headers, rows)


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def shard_cost(directory: Path, shards: int) -> tuple[float, float]:
    config = StorageConfig(directory, sync_policy="none")
    storage = ShardedStorage(config, shard_of=lambda name: "public/default/" + name.rpartition("/")[2])
    await storage.start()
    try:
        rss0, threads0 = _rss_bytes(), len(os.listdir("/proc/self/task"))
        for k in range(shards):
            ml = await storage.open_ledger(f"persistent://public/default/s{k}")
            for _ in range(100):
                await ml.append(b"y" * 1000)
        await storage.flush()
        storage._shared.read_cache.clear()  # the reads below go to each shard's index and entry logs
        storage._shared.tail_cache.clear()
        for ml in storage.open_ledgers.values():
            await ml.read_entries(Position(0, 0), 100)
        rss, threads = _rss_bytes(), len(os.listdir("/proc/self/task"))
        return (rss - rss0) / shards, (threads - threads0) / shards
    finally:
        await storage.close()


def part_c(base: Path, shards: int = 32) -> str:
    rss, threads = asyncio.run(shard_cost(base / "c", shards))
    rows = [[shards, rss / 1024 / 1024, threads]]
    headers = ["shards open", "RSS MiB per shard", "threads per shard"]
    return "c) the fixed cost of an open shard\n\n" + table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--sync", default="fsync,none", help="sync policies of part a, comma-separated")
    args = parser.parse_args(argv)
    print("; ".join(f"{k} {v}" for k, v in machine_facts()))
    print(f"load average at start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for sync in args.sync.split(","):
            print(part_a(Path(tmp), args.seconds, args.rounds, sync))
            print()
        print(part_b(Path(tmp), args.topics, args.rounds))
        print()
        print(part_c(Path(tmp)))
    print(f"load average at end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
