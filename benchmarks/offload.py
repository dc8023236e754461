"""Tiered storage (docs/offload.md, TS-1, TS-4): what offloading costs and what reading back costs.

    a) offload throughput: a topic's sealed ledgers written as Parquet with the filesystem driver,
       in MB/s of stored entry bytes and messages/s, from a request to its SUCCESS;
    b) catch-up read: every entry read from the earliest, through the managed ledger, with the
       caches empty, from the local entry logs against from the offloaded Parquet files (same
       entries, same process, one after the other in each run), and the ratio;
    c) with --spark: Spark over a mostly offloaded topic, the velamq source with offloadPath,
       without it, and spark.read.parquet of the same files (_offload_spark.py);
    d) with --idle-topics N: one offload check over N stored topics nobody has open (two sealed
       ledgers each, in 100 namespaces), with nothing due: with the broker's settings alone, and
       with each namespace's policy read from a real metadata store (the broker's PolicySource).

Each at two batchings: official-client-like batches of 100 messages of 100 bytes, and unbatched
1 KiB messages. Median of --runs (default 3) fresh stores each; the load average is printed with
the table, as every figure here shares the machine.

    .venv/bin/python benchmarks/offload.py                    # about a minute
    .venv/bin/python benchmarks/offload.py --mib 64 --runs 5
    .venv/bin/python benchmarks/offload.py --spark --spark-messages 400000   # adds c (a few minutes)
    .venv/bin/python benchmarks/offload.py --mib 0 --idle-topics 5000        # part d alone

Data goes to a temporary directory under --dir (default: the system temp dir).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from velamq.broker.log._offload_rows import PulsarEntryRows
from velamq.broker.service._offload_policies import TopicOffloadPolicies
from velamq.metadata import MetadataStore
from velamq.metadata import _offload_policies as O
from velamq.protocol import build_batch, build_entry, pb
from velamq.storage import OffloadConfig, OffloadPolicy, Position, Storage, StorageConfig

sys.path.insert(0, str(Path(__file__).parent))
from _machine import machine_facts

TOPIC = "persistent://public/default/offload-bench"


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    batch: int  # messages per entry (1: unbatched)
    size: int  # bytes per message


SHAPES = (Shape("batches of 100 x 100 B", 100, 100), Shape("unbatched 1 KiB", 1, 1024))


def entry(shape: Shape, seq: int) -> bytes:
    if shape.batch == 1:
        metadata = pb.MessageMetadata(producer_name="bench", sequence_id=seq, publish_time=1_700_000_000_000 + seq,
                                      partition_key=f"k{seq % 16}")
        return build_entry(metadata, os.urandom(shape.size // 2).hex().encode())
    messages = []
    for i in range(shape.batch):
        single = pb.SingleMessageMetadata(sequence_id=seq + i, partition_key=f"k{i % 16}")
        messages.append((single, os.urandom(shape.size // 2).hex().encode()))
    plain = build_batch(messages)
    metadata = pb.MessageMetadata(producer_name="bench", sequence_id=seq, publish_time=1_700_000_000_000 + seq,
                                  num_messages_in_batch=shape.batch, uncompressed_size=len(plain))
    return build_entry(metadata, plain)


@dataclass(frozen=True, slots=True)
class Run:
    offload_mb_s: float
    offload_msgs_s: float
    local_mb_s: float
    offloaded_mb_s: float


async def read_all(storage: Storage, total: int) -> tuple[float, int]:
    """Seconds to read every entry from the earliest with empty caches, and the bytes read."""
    ml = await storage.open_ledger(TOPIC)
    storage.read_cache.clear()
    storage.tail_cache.clear()
    start = time.perf_counter()
    pos: Position | None = Position(0, 0)
    count = size = 0
    while pos is not None and count < total:
        entries = await ml.read_entries(pos, min(1000, total - count))
        if not entries:
            break
        count += len(entries)
        size += sum(len(e.data) for e in entries)
        pos = ml.next_position(entries[-1].position)
    assert count == total, (count, total)
    return time.perf_counter() - start, size


async def one_run(directory: Path, shape: Shape, mib: int) -> Run:
    offload = OffloadConfig("filesystem", uri=str(directory / "tier"), deletion_lag_ms=0, check_interval_s=3600.0)
    config = StorageConfig(directory / "data", sync_policy="none", offload=offload, ledger_bytes_max=8 << 20,
                           memory_bytes=256 << 20)
    storage = Storage(config, entry_rows=PulsarEntryRows())
    await storage.start()
    try:
        ml = await storage.open_ledger(TOPIC)
        sample = entry(shape, 0)
        total = max(1, (mib << 20) // len(sample))
        pending = [ml.append_nowait(entry(shape, k * shape.batch)) for k in range(total)]
        last = (await asyncio.gather(*pending))[-1]
        await ml.append(sample)  # the ledger of the last entry is sealed before this one's
        await storage.flush()
        sealed = [i for i in ml.ledgers() if i.ledger_id != ml.current_ledger_id]
        sealed_bytes = sum(i.size_bytes for i in sealed)
        sealed_entries = sum(i.entries for i in sealed)
        local_s, local_bytes = await read_all(storage, sealed_entries)
        start = time.perf_counter()
        assert storage.request_offload(ml, Position(last.ledger_id + 1, 0))
        while storage.offload_status(TOPIC).status == "RUNNING":
            await asyncio.sleep(0.01)
        offload_s = time.perf_counter() - start
        assert storage.offload_status(TOPIC).status == "SUCCESS", storage.offload_status(TOPIC)
        await storage.check_offload()  # lag 0: the local copies go
        assert not any(i.local for i in ml.ledgers() if i.ledger_id != ml.current_ledger_id)
        offloaded_s, offloaded_bytes = await read_all(storage, sealed_entries)
        assert offloaded_bytes == local_bytes
        return Run(sealed_bytes / offload_s / 1e6, sealed_entries * shape.batch / offload_s,
                   local_bytes / local_s / 1e6, offloaded_bytes / offloaded_s / 1e6)
    finally:
        await storage.close()


async def idle_check(directory: Path, topics: int) -> tuple[float, float]:
    """Seconds of one check over `topics` stored topics with nothing due: (broker's settings only,
    each namespace's policy from metadata)."""
    offload = OffloadConfig("filesystem", uri=str(directory / "tier"), check_interval_s=3600.0)
    config = StorageConfig(directory / "data", sync_policy="none", offload=offload, ledger_entries_max=2,
                           memory_bytes=256 << 20)
    storage = Storage(config, entry_rows=PulsarEntryRows())
    metadata = MetadataStore(directory / "metadata.db")
    await metadata.start()
    await storage.start()
    try:
        namespaces = [f"public/idle{i}" for i in range(100)]
        for ns in namespaces:
            await metadata.create_namespace(ns)
            await metadata.set_policy(ns, O.NS_OFFLOAD_THRESHOLD, -2)  # no offload by size here
        names = [f"persistent://{namespaces[i % 100]}/t{i}" for i in range(topics)]
        for start in range(0, topics, 500):
            await asyncio.gather(*(fill_and_close(storage, name) for name in names[start:start + 500]))
        await storage.flush()
        assert storage.open_ledgers == {}
        began = time.perf_counter()
        await storage.check_offload()
        alone = time.perf_counter() - began
        storage.set_offload_policies(TopicOffloadPolicies(metadata, OffloadPolicy(-1, -1, 0)))
        began = time.perf_counter()
        await storage.check_offload()
        with_policies = time.perf_counter() - began
        assert storage.open_ledgers == {}  # nothing was due: no log was opened
        return alone, with_policies
    finally:
        await storage.close()
        await metadata.close()


async def fill_and_close(storage: Storage, name: str) -> None:
    ml = await storage.open_ledger(name)
    for _ in range(5):  # two sealed ledgers of 2 entries and the current one
        await ml.append(b"x" * 100)
    await ml.close()


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=32, help="stored bytes per run (MiB); 0 skips parts a and b")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--spark", action="store_true", help="also part c, Spark over an offloaded topic")
    parser.add_argument("--spark-messages", type=int, default=400_000)
    parser.add_argument("--idle-topics", type=int, default=0, help="also part d, a check over this many idle topics")
    args = parser.parse_args()
    print("offload benchmark (filesystem driver)")
    for key, value in machine_facts(["pyarrow"]):
        print(f"  {key:<8} {value}")
    print(f"  load average at start: {loadavg()}")
    print()
    header = f"{'shape':<24} {'offload MB/s':>13} {'offload msg/s':>14} {'local read MB/s':>16} " \
             f"{'offloaded read MB/s':>20} {'offloaded/local':>16}"
    print(header)
    print("-" * len(header))
    for shape in SHAPES if args.mib > 0 else ():
        runs = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
                runs.append(asyncio.run(one_run(Path(tmp), shape, args.mib)))
        med = Run(*(statistics.median(getattr(r, f) for r in runs) for f in Run.__slots__))
        ratio = statistics.median(r.offloaded_mb_s / r.local_mb_s for r in runs)
        print(f"{shape.name:<24} {med.offload_mb_s:>13.1f} {med.offload_msgs_s:>14,.0f} {med.local_mb_s:>16.1f} "
              f"{med.offloaded_mb_s:>20.1f} {ratio:>15.2f}x")
    print()
    print(f"median of {args.runs} runs of {args.mib} MiB each; load average: {loadavg()}")
    if args.spark:
        from _offload_spark import print_spark_part

        print()
        print_spark_part(args.spark_messages, args.runs, args.dir)
        print(f"median of {args.runs} runs; load average at end: {loadavg()}")
    if args.idle_topics:
        print_idle_part(args.idle_topics, args.runs, args.dir)


def print_idle_part(topics: int, runs: int, directory: Path) -> None:
    print()
    print(f"d) one offload check over {topics:,} stored topics nobody has open, nothing due "
          f"(load average {loadavg()})")
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            results.append(asyncio.run(idle_check(Path(tmp), topics)))
    for label, index in (("broker's settings only", 0), ("namespace policies from metadata", 1)):
        seconds = statistics.median(r[index] for r in results)
        each = ", ".join(f"{r[index]:.2f}" for r in results)
        print(f"  {label:<34} {seconds:6.2f} s  ({seconds / topics * 1e6:,.0f} µs a topic; runs: {each})")
    print(f"median of {runs} runs; load average at end: {loadavg()}")


if __name__ == "__main__":
    main()
