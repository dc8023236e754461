"""Parts e and f of benchmarks/storage.py: many topics on shared entry logs, and the garbage collector.

    e) N topics created through the storage library, `--create-concurrency` at a time, each with one
       100-byte entry and one durable cursor (what a new user's first produce and subscribe cost in
       storage): creation rate, files and bytes in the data dir (and bytes per topic), storage
       RSS per topic while loaded and after every managed ledger is closed (unloaded), the time of
       a clean stop, of a restart to ready, and of a first read and a first append on 1000 random
       old topics after the restart (open + read, open + append: p50/p99). Each N runs in a child
       process of its own, so the RSS figures are that N's alone.
    f) garbage collection: `--gc-mib` MiB of 4 KiB entries over 100 topics (every entry log holds
       some of each), 90 topics deleted, one major pass: bytes reclaimed and copied, seconds, and
       the copy rate, unlimited and with gc_bytes_per_s set.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from velamq.storage import Position, Storage, StorageConfig

MIB = 1024 * 1024


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settle() -> int:
    """RSS after a full collection and after giving freed arenas back to the system."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # pragma: no cover - not glibc
        pass
    return rss_bytes()


def dir_usage(root: Path) -> tuple[int, int]:
    files = size = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            files += 1
            size += os.lstat(os.path.join(dirpath, name)).st_size
    return files, size


def topic(i: int) -> str:
    return f"persistent://public/default/bench-topic-{i:07d}"


async def many_child(directory: Path, topics: int, concurrency: int) -> dict[str, Any]:
    config = StorageConfig(directory, memory_bytes=256 * MIB)
    storage = Storage(config)
    await storage.start()
    base_rss = settle()
    data = b"x" * 100
    pending = iter(range(topics))

    async def worker() -> None:
        for i in pending:
            ml = await storage.open_ledger(topic(i))
            await ml.open_cursor("sub", "earliest")
            await ml.append(data)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    create_s = time.perf_counter() - started
    await storage.flush()
    storage.tail_cache.clear()
    loaded_rss = settle()
    opened = list(storage.open_ledgers.values())
    started = time.perf_counter()
    for k in range(0, len(opened), 1000):
        await asyncio.gather(*(ml.close() for ml in opened[k : k + 1000]))
    unload_s = time.perf_counter() - started
    del opened
    unloaded_rss = settle()
    started = time.perf_counter()
    await storage.close()
    stop_s = time.perf_counter() - started
    files, size = dir_usage(directory)

    storage = Storage(config)
    started = time.perf_counter()
    await storage.start()
    restart_s = time.perf_counter() - started
    rng = random.Random(7)
    reads: list[float] = []
    appends: list[float] = []
    for i in rng.sample(range(topics), min(1000, topics)):
        t0 = time.perf_counter()
        ml = await storage.open_ledger(topic(i))
        got = await ml.read_entries(Position(0, 0), 1)
        t1 = time.perf_counter()
        await ml.append(data)
        t2 = time.perf_counter()
        assert got and got[0].data == data
        reads.append(t1 - t0)
        appends.append(t2 - t1)
    await storage.close()
    return {
        "topics": topics,
        "create_per_s": topics / create_s,
        "rss_loaded_per_topic": (loaded_rss - base_rss) / topics,
        "rss_unloaded_per_topic": (unloaded_rss - base_rss) / topics,
        "unload_s": unload_s,
        "files": files,
        "bytes": size,
        "bytes_per_topic": size / topics,
        "stop_s": stop_s,
        "restart_s": restart_s,
        "read_p50_ms": statistics.median(reads) * 1000,
        "read_p99_ms": sorted(reads)[int(len(reads) * 0.99) - 1] * 1000,
        "append_p50_ms": statistics.median(appends) * 1000,
        "append_p99_ms": sorted(appends)[int(len(appends) * 0.99) - 1] * 1000,
    }


def part_e(base: Path, counts: list[int], concurrency: int, table: Any) -> str:
    rows = []
    for n in counts:
        directory = base / f"many-{n}"
        out = subprocess.run(
            [sys.executable, sys.argv[0], "--many-child", str(directory), str(n), str(concurrency)],
            check=True, capture_output=True, text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        rows.append([
            n, r["create_per_s"], r["files"], r["bytes"] / MIB, r["bytes_per_topic"],
            r["rss_loaded_per_topic"], r["rss_unloaded_per_topic"], r["stop_s"], r["restart_s"],
            f"{r['read_p50_ms']:.2f} / {r['read_p99_ms']:.2f}", f"{r['append_p50_ms']:.2f} / {r['append_p99_ms']:.2f}",
        ])
        shutil.rmtree(directory, ignore_errors=True)
    return (
        f"e) N topics, each one 100-byte entry and one durable cursor, {concurrency} created at a time, fsync, "
        "256 MiB budget; the storage library alone (no broker)\n\n"
        + table(
            ["topics", "created/s", "files", "data MiB", "bytes/topic", "RSS B/topic loaded",
             "RSS B/topic unloaded", "stop s", "restart s", "first read ms p50/p99", "first append ms p50/p99"],
            rows,
        )
    )


async def gc_run(directory: Path, total_mib: int, bytes_per_s: int) -> dict[str, float]:
    config = StorageConfig(directory, sync_policy="fsync", entry_log_bytes_max=16 * MIB, gc_bytes_per_s=bytes_per_s)
    storage = Storage(config)
    await storage.start()
    try:
        names = [topic(i) for i in range(100)]
        mls = [await storage.open_ledger(n) for n in names]
        data = os.urandom(4096)
        per_topic = total_mib * MIB // 4096 // len(names)
        for _ in range(per_topic):  # a flush per round: every log holds a bit of every topic
            await asyncio.gather(*(ml.append(data) for ml in mls))
            await storage.flush()
        before = dir_usage(directory / "logs")
        for name in names[10:]:
            await storage.delete_ledger(name)
        started = time.perf_counter()
        result = await storage.collect_garbage()
        elapsed = time.perf_counter() - started
        after = dir_usage(directory / "logs")
        for name in names[:10]:
            got = await (await storage.open_ledger(name)).read_entries(Position(0, 0), per_topic + 1)
            assert len(got) == per_topic
    finally:
        await storage.close()
    return {
        "logs_before": before[0], "bytes_before": before[1], "logs_after": after[0], "bytes_after": after[1],
        "compacted": result.logs_compacted, "deleted": result.logs_deleted, "reclaimed": result.bytes_reclaimed,
        "copied": result.bytes_copied, "seconds": elapsed,
    }


def part_f(base: Path, total_mib: int, table: Any) -> str:
    rows = []
    for limit in (0, 32 * MIB):
        directory = base / f"gc-{limit}"
        r = asyncio.run(gc_run(directory, total_mib, limit))
        rows.append([
            f"{limit // MIB} MiB/s" if limit else "unlimited", f"{r['logs_before']} / {r['logs_after']}",
            f"{r['bytes_before'] / MIB:.0f} / {r['bytes_after'] / MIB:.0f}", r["compacted"], r["deleted"],
            r["reclaimed"] / MIB, r["copied"] / MIB, r["seconds"], r["reclaimed"] / MIB / r["seconds"],
            r["copied"] / MIB / r["seconds"],
        ])
        shutil.rmtree(directory, ignore_errors=True)
    return (
        f"f) garbage collection: {total_mib} MiB of 4 KiB entries over 100 topics in 16 MiB entry logs, 90 topics "
        "deleted, one major pass (fsync)\n\n"
        + table(
            ["gc_bytes_per_s", "logs before / after", "MiB before / after", "logs compacted", "logs deleted",
             "MiB reclaimed", "MiB copied", "seconds", "reclaimed MiB/s", "copied MiB/s"],
            rows,
        )
    )
