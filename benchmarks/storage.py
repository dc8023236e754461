"""What does the storage engine buy? Four questions, one table each, in one run (ME-1..ME-7).

    a) group commit: 1, 100 and 1000 topics appending at once, with fsync. One shared journal
       (one write and one fsync per group) against a per-topic-fsync baseline (each topic its own
       log file; a group fsyncs every file it touched, which is what storage v1 did).
    b) the memory-model experiment: a tail read (the consumer keeps up: every entry from the tail
       cache, none from a ledger file) against a catch-up read (the consumer starts a backlog
       behind, files cold in the page cache: served through read-ahead). The experiment's backlog is
       10 minutes of production; here it is `--backlog-s` seconds of it (default 10, i.e. 1/60).
    c) burst: producers push as fast as they can for `--burst-s` seconds (default 30) with a
       256 MiB budget, in a child process: its peak RSS against budget + 150 MiB, the only error
       allowed being backpressure. Drives the storage library directly (its publish buffer), not a
       broker: the broker-side hook of the publish buffer is the lead's to wire.
    d) journal append throughput (the journal alone, with fsync) as a fraction of this machine's
       sequential write bandwidth with an fdatasync per block, blocks of the same size as the
       journal's group commits.
    e) many topics on shared entry logs: creation rate, files and bytes in the data dir, RSS per
       topic loaded and unloaded, stop, restart, first read and append after the restart, for
       N = `--topics` (default 1000,10000,100000); see _storage_many.
    f) garbage collection: space of 90 deleted topics out of 100 back, copy rate with and without
       a bandwidth limit (`--gc-mib` MiB written, default 256).

    .venv/bin/python benchmarks/storage.py                 # a..d, about 2-3 minutes
    .venv/bin/python benchmarks/storage.py --only e,f --topics 1000,10000,100000,1000000
    .venv/bin/python benchmarks/storage.py --only a,d      # some of it
    .venv/bin/python benchmarks/storage.py --seconds 2     # shorter runs per row

Data goes to a temporary directory under --dir (default: the system temp dir; say where the disk
under test is). Every row runs in this process on its own fresh Storage, except c (a child).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import queue
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c

from velamq._clock import system_clock
from velamq.storage import Position, Storage, StorageConfig
from velamq.storage._layout import write_all
from velamq.storage.journal._journal import AppendOp, Journal, JournalGroup, LedgerHandle

sys.path.insert(0, str(Path(__file__).parent))
from _storage_many import many_child, part_e, part_f

MIB = 1024 * 1024


# -- output ------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[h for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        lines.append("| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |")
    return "\n".join(lines)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def machine() -> str:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem:.1f} GiB RAM, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def drop_from_page_cache(root: Path) -> None:
    """Evict our own files from the page cache (POSIX_FADV_DONTNEED), so reads hit the disk."""
    for path in root.rglob("*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# -- a) group commit ---------------------------------------------------------------------------


class PerTopicFsyncLog:
    """The baseline: each topic its own file; a group writes each topic's records to its file with
    one writev and fsyncs every file it touched (storage v1's writer), then resolves the group."""

    def __init__(self, directory: Path, topics: int, loop: asyncio.AbstractEventLoop) -> None:
        directory.mkdir(parents=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self._fds = [os.open(directory / f"{t}.log", flags, 0o644) for t in range(topics)]
        self._loop = loop
        self._queue: queue.SimpleQueue[tuple[int, bytes, asyncio.Future[None]] | None] = queue.SimpleQueue()
        self.fsyncs = 0
        self.appends = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def append(self, topic: int, data: bytes) -> asyncio.Future[None]:
        future = self._loop.create_future()
        self._queue.put((topic, data, future))
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while True:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            per_topic: dict[int, list[bytes]] = {}
            for topic, data, _ in batch:
                header = len(data).to_bytes(4, "little") + int(crc32c.crc32c(data)).to_bytes(4, "little")
                per_topic.setdefault(topic, []).extend((header, data))
            for topic, buffers in per_topic.items():
                write_all(self._fds[topic], buffers)
            for topic in per_topic:
                os.fdatasync(self._fds[topic])
                self.fsyncs += 1
            self.appends += len(batch)
            self._loop.call_soon_threadsafe(_resolve_all, [f for _, _, f in batch])

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        for fd in self._fds:
            os.close(fd)


def _resolve_all(futures: list[asyncio.Future[None]]) -> None:
    for f in futures:
        if not f.done():
            f.set_result(None)


async def _drive(append: Callable[[int], Any], topics: int, in_flight: int, seconds: float) -> tuple[int, float]:
    """in_flight producers spread over the topics, each appending and awaiting in a loop."""
    stop = time.perf_counter() + seconds
    done = 0

    async def producer(topic: int) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await append(topic)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(producer(k % topics) for k in range(max(in_flight, topics))))
    return done, time.perf_counter() - started


async def group_commit_row(base: Path, topics: int, size: int, in_flight: int, seconds: float) -> list[list[object]]:
    data = os.urandom(size)
    rows: list[list[object]] = []
    storage = Storage(StorageConfig(base / f"journal-{topics}", sync_policy="fsync"))
    await storage.start()
    try:
        mls = [await storage.open_ledger(f"persistent://public/default/t{t}") for t in range(topics)]
        m0 = storage.metrics()
        n, elapsed = await _drive(lambda t: mls[t].append(data), topics, in_flight, seconds)
        m = storage.metrics()
        fsyncs = m["velamq_storage_journal_fsyncs_total"] - m0["velamq_storage_journal_fsyncs_total"]
        rows.append(["shared journal", topics, n / elapsed, n * size / elapsed / 1e6, n / fsyncs, fsyncs / elapsed])
    finally:
        await storage.close()
    log = PerTopicFsyncLog(base / f"per-topic-{topics}", topics, asyncio.get_running_loop())
    try:
        n, elapsed = await _drive(lambda t: log.append(t, data), topics, in_flight, seconds)
        rows.append(
            ["per-topic fsync", topics, n / elapsed, n * size / elapsed / 1e6, n / log.fsyncs, log.fsyncs / elapsed]
        )
    finally:
        log.close()
    return rows


def part_a(base: Path, seconds: float) -> str:
    size, in_flight = 1024, 1000
    rows: list[list[object]] = []
    for topics in (1, 100, 1000):
        rows += asyncio.run(group_commit_row(base, topics, size, in_flight, seconds))
    return (
        f"a) group commit: {size} B entries, {in_flight} appends in flight over all topics, fsync, "
        f"{seconds:.0f} s per row\n\n"
        + table(["writer", "topics", "appends/s", "MB/s", "entries per fsync", "fsyncs/s"], rows)
    )


# -- b) tail read vs catch-up read (Pulsar's memory model) --------------------------------------


@dataclass(slots=True)
class ReadFigures:
    entries: int
    seconds: float
    size: int
    metrics: dict[str, float]

    def row(self, label: str, produced_per_s: float) -> list[object]:
        m = self.metrics
        tail, write = m["velamq_storage_tail_cache_hits_total"], m["velamq_storage_write_cache_hits_total"]
        read, disk = m["velamq_storage_read_cache_hits_total"], m["velamq_storage_read_entries_disk_total"]
        ratio = read / (read + disk) if read + disk else 0.0
        return [
            label,
            produced_per_s,
            self.entries,
            self.entries / self.seconds,
            self.entries * self.size / self.seconds / 1e6,
            int(tail), int(write), int(read), int(disk), int(m["velamq_storage_ledger_file_reads_total"]),
            f"{ratio:.1%}" if read + disk else "-",
        ]


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0.0) for k in after}


async def tail_read(base: Path, size: int, seconds: float) -> tuple[ReadFigures, float]:
    """A producer appends as fast as it can; one consumer keeps up, reading what is new."""
    storage = Storage(StorageConfig(base / "tail", sync_policy="fsync", memory_bytes=512 * MIB))
    await storage.start()
    try:
        ml = await storage.open_ledger("persistent://public/default/tail")
        cursor = await ml.open_cursor("sub", "latest")
        data = os.urandom(size)
        produced = 0
        stop = time.perf_counter() + seconds
        wake = asyncio.Event()

        async def producer() -> None:
            nonlocal produced
            while time.perf_counter() < stop:
                await ml.append(data)
                produced += 1
                wake.set()

        before = storage.metrics()
        started = time.perf_counter()
        producers = asyncio.gather(*(producer() for _ in range(200)))
        read = 0
        pos = ml.next_position(cursor.mark_delete_position)
        while not producers.done() or (ml.last_confirmed is not None and pos <= ml.last_confirmed):
            entries = await ml.read_entries(pos, 100)
            if not entries:
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), 0.1)
                except TimeoutError:
                    pass
                continue
            read += len(entries)
            pos = ml.next_position(entries[-1].position)
            cursor.ack_cumulative(entries[-1].position)
        await producers
        elapsed = time.perf_counter() - started
        return ReadFigures(read, elapsed, size, _delta(storage.metrics(), before)), produced / elapsed
    finally:
        await storage.close()


async def catch_up_read(base: Path, size: int, backlog: int, produce_per_s: float) -> ReadFigures:
    """A backlog built, flushed and evicted from the page cache; then the consumer reads it from the
    start while the producer keeps producing at `produce_per_s`."""
    directory = base / "catch-up"
    storage = Storage(StorageConfig(directory, sync_policy="fsync", memory_bytes=512 * MIB))
    await storage.start()
    try:
        ml = await storage.open_ledger("persistent://public/default/catch-up")
        cursor = await ml.open_cursor("sub", "earliest")  # subscribed, but paused: it does not read
        data = os.urandom(size)
        sem = asyncio.Semaphore(500)

        async def one() -> None:
            async with sem:
                await ml.append(data)

        await asyncio.gather(*(one() for _ in range(backlog)))
        await storage.flush()
        drop_from_page_cache(directory)
        stop = asyncio.Event()

        async def producer() -> None:
            interval = 100 / produce_per_s
            while not stop.is_set():
                await asyncio.gather(*(ml.append(data) for _ in range(100)))
                await asyncio.sleep(interval)

        before = storage.metrics()
        background = asyncio.ensure_future(producer())
        started = time.perf_counter()
        read = 0
        pos = ml.next_position(cursor.mark_delete_position)
        while read < backlog:
            entries = await ml.read_entries(pos, min(100, backlog - read))
            read += len(entries)
            pos = ml.next_position(entries[-1].position)
            cursor.ack_cumulative(entries[-1].position)
        elapsed = time.perf_counter() - started
        stop.set()
        await background
        return ReadFigures(read, elapsed, size, _delta(storage.metrics(), before))
    finally:
        await storage.close()


def part_b(base: Path, seconds: float, backlog_s: float) -> str:
    size = 1024
    tail, produced_per_s = asyncio.run(tail_read(base, size, seconds))
    backlog = int(produced_per_s * backlog_s)
    catch_up = asyncio.run(catch_up_read(base, size, backlog, produced_per_s / 5))
    rows = [tail.row("tail read", produced_per_s), catch_up.row("catch-up read", produced_per_s / 5)]
    return (
        f"b) memory-model experiment: tail read vs catch-up read, {size} B entries. Tail: {seconds:.0f} s of producing "
        f"while one consumer keeps up. Catch-up: a backlog of {backlog:,} entries ({backlog_s:.0f} s of "
        f"production, the original 10 minutes scaled by {backlog_s / 600:.3f}), flushed and evicted from the "
        f"page cache, read from the start while the producer goes on at a fifth of its rate\n\n"
        + table(
            [
                "scenario", "produced/s", "entries read", "read/s", "read MB/s", "tail cache hits",
                "write cache hits", "read cache hits", "from ledger files", "file reads", "read-ahead hit ratio",
            ],
            rows,
        )
    )


# -- c) burst ------------------------------------------------------------------------------------


def rss_bytes() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process, from /proc/self/status."""
    cur = peak = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            cur = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return cur, peak


async def burst_child(directory: Path, seconds: float, budget: int, size: int) -> dict[str, Any]:
    storage = Storage(StorageConfig(directory, sync_policy="fsync", memory_bytes=budget))
    await storage.start()
    base_rss, _ = rss_bytes()
    buffer = storage.publish_buffer
    errors: dict[str, int] = {}
    durable = 0
    samples: list[int] = []
    block = os.urandom(size)
    # How fast could producers make entries with nobody pushing back?
    t = time.perf_counter()
    made = 0
    while time.perf_counter() - t < 0.3:
        _ = b"%12d" % made + block
        made += 1
    demand_per_s = made * size / (time.perf_counter() - t)
    paused_s = 0.0
    try:
        mls = [await storage.open_ledger(f"persistent://public/default/burst-{k}") for k in range(4)]
        pending: set[asyncio.Future[Position]] = set()

        def done(f: asyncio.Future[Position]) -> None:
            nonlocal durable
            pending.discard(f)
            if f.cancelled() or f.exception() is not None:
                name = type(f.exception()).__name__ if not f.cancelled() else "cancelled"
                errors[name] = errors.get(name, 0) + 1
            else:
                durable += 1

        stop = time.perf_counter() + seconds

        async def producer(k: int) -> None:
            nonlocal paused_s
            i = 0
            while time.perf_counter() < stop:
                if buffer.full:
                    t0 = time.perf_counter()
                    await buffer.wait_for_room()
                    paused_s += time.perf_counter() - t0
                entry = b"%12d" % i + block
                f = asyncio.ensure_future(mls[k % 4].append(entry))
                pending.add(f)
                f.add_done_callback(done)
                i += 1
                await asyncio.sleep(0)

        async def sampler() -> None:
            while time.perf_counter() < stop:
                samples.append(rss_bytes()[0])
                await asyncio.sleep(0.2)

        started = time.perf_counter()
        await asyncio.gather(sampler(), *(producer(k) for k in range(8)))
        while pending:
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        m = storage.metrics()
    finally:
        await storage.close()
    _, peak = rss_bytes()
    return {
        "seconds": elapsed,
        "durable_mb_per_s": durable * (size + 12) / elapsed / 1e6,
        "demand_mb_per_s": demand_per_s / 1e6,
        "paused_fraction": paused_s / 8 / elapsed,
        "base_rss": base_rss,
        "peak_rss": peak,
        "max_sampled_rss": max(samples),
        "publish_buffer_peak": m["velamq_storage_publish_buffer_bytes_peak"],
        "publish_buffer_max": m["velamq_storage_publish_buffer_bytes_max"],
        "write_cache_peak": m["velamq_storage_write_cache_bytes_peak"],
        "write_cache_max": m["velamq_storage_write_cache_bytes_max"],
        "pauses": m["velamq_storage_publish_buffer_pauses_total"],
        "parked_groups": m["velamq_storage_write_cache_parked_groups_total"],
        "errors": errors,
        "entries": durable,
    }


def _mib_pair(a: float, b: float) -> str:
    return f"{a / MIB:,.0f} / {b / MIB:,.0f}"


def part_c(base: Path, seconds: float) -> str:
    budget, size = 256 * MIB, 256 * 1024
    cmd = [sys.executable, __file__, "--burst-child", str(base / "burst"), str(seconds), str(budget), str(size)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    limit = budget + 150 * MIB
    rows = [
        ["producers could make (MB/s)", f"{r['demand_mb_per_s']:,.0f}"],
        ["storage took, durable (MB/s)", f"{r['durable_mb_per_s']:,.0f}"],
        ["offered / taken", f"{r['demand_mb_per_s'] / r['durable_mb_per_s']:,.0f}x"],
        ["time producers spent paused", f"{r['paused_fraction']:.0%}"],
        ["publish buffer pauses", f"{r['pauses']:,.0f}"],
        ["groups parked for a slow flush", f"{r['parked_groups']:,.0f}"],
        ["publish buffer peak / bound (MiB)", _mib_pair(r["publish_buffer_peak"], r["publish_buffer_max"])],
        ["write cache peak / bound (MiB)", _mib_pair(r["write_cache_peak"], r["write_cache_max"])],
        ["RSS at start (MiB)", f"{r['base_rss'] / MIB:,.0f}"],
        ["peak RSS (MiB)", f"{r['peak_rss'] / MIB:,.0f}"],
        ["budget + 150 MiB (MiB)", f"{limit / MIB:,.0f}"],
        ["peak RSS under budget + 150 MiB", "yes" if r["peak_rss"] <= limit else "NO"],
        ["errors other than backpressure", str(r["errors"] or "none")],
    ]
    return (
        f"c) burst: 8 producers, 4 topics, {size // 1024} KiB entries, as fast as they can for {seconds:.0f} s, "
        f"budget {budget // MIB} MiB, fsync; storage library driven directly, in a child process\n\n"
        + table(["figure", "value"], rows)
    )


# -- d) journal vs raw sequential write ---------------------------------------------------------


async def journal_alone(directory: Path, size: int, in_flight: int, seconds: float) -> tuple[float, float]:
    """The journal thread by itself (no write cache, no flush): MB/s and average bytes per fsync."""
    loop = asyncio.get_running_loop()

    def deliver(group: JournalGroup) -> None:
        for op in group.appends:
            op.future.set_result(None)
        for op, error in group.failed:
            op.future.set_exception(error)

    journal = Journal(
        directory / "journal", 1, policy="fsync", sync_interval_ms=100,
        segment_bytes=256 * MIB, deliver=deliver, loop=loop, clock=system_clock,
    )
    await loop.run_in_executor(None, journal.open)
    journal.start()
    handle = LedgerHandle(1, None)
    data = os.urandom(size)
    entry_id = 0

    async def append() -> None:
        nonlocal entry_id
        future: asyncio.Future[None] = loop.create_future()
        journal.submit(AppendOp(handle, entry_id, data, future))
        entry_id += 1
        await future

    try:
        _, elapsed = await _drive(lambda _t: append(), 1, in_flight, seconds)
    finally:
        await loop.run_in_executor(None, journal.stop)
    return journal.stats.bytes_total / elapsed / 1e6, journal.stats.bytes_total / max(1, journal.stats.fsyncs_total)


def raw_sequential(path: Path, block: int, seconds: float) -> float:
    """write(block) + fdatasync, again and again: MB/s."""
    buf = os.urandom(block)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    written = 0
    try:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            os.write(fd, buf)
            os.fdatasync(fd)
            written += block
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return written / elapsed / 1e6


def part_d(base: Path, seconds: float) -> str:
    rows: list[list[object]] = []
    for size, in_flight in ((1024, 1000), (64 * 1024, 64), (1024 * 1024, 16)):
        directory = base / f"journal-alone-{size}"
        directory.mkdir()
        mb_s, group_bytes = asyncio.run(journal_alone(directory, size, in_flight, seconds))
        block = max(4096, int(group_bytes))
        # Shared disks vary from second to second: the raw figure is the best of one run before
        # and one after the journal's (the journal row itself runs between them).
        raw_before = raw_sequential(base / f"raw-{size}", block, seconds)
        mb_s, group_bytes = asyncio.run(journal_alone(directory, size, in_flight, seconds))
        raw_after = raw_sequential(base / f"raw-{size}", block, seconds)
        raw = max(raw_before, raw_after)
        raws = f"{raw_before:,.0f} / {raw_after:,.0f}"
        rows.append([size, in_flight, block // 1024, mb_s, raws, f"{mb_s / raw:.0%}"])
        shutil.rmtree(directory)
    return (
        f"d) the journal alone (fsync per group) against write + fdatasync of blocks the size of its groups, "
        f"{seconds:.0f} s each\n\n"
        + table(
            ["entry B", "in flight", "group KiB", "journal MB/s", "raw write+fdatasync MB/s, before / after",
             "journal / best raw"],
            rows,
        )
    )


# -- main -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="a,b,c,d", help="which parts, e.g. a,d")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each timed row in a, b and d")
    parser.add_argument("--backlog-s", type=float, default=10.0, help="b: seconds of production in the backlog")
    parser.add_argument("--burst-s", type=float, default=30.0, help="c: how long producers push")
    parser.add_argument("--dir", type=Path, default=None, help="where the data goes (a temporary dir inside it)")
    parser.add_argument("--topics", default="1000,10000,100000", help="e: numbers of topics")
    parser.add_argument("--create-concurrency", type=int, default=200, help="e: topics created at a time")
    parser.add_argument("--gc-mib", type=int, default=256, help="f: MiB written before the deletions")
    parser.add_argument("--burst-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--many-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.many_child:
        directory, topics, concurrency = args.many_child
        print(json.dumps(asyncio.run(many_child(Path(directory), int(topics), int(concurrency)))))
        return 0
    if args.burst_child:
        directory, seconds, budget, size = args.burst_child
        result = asyncio.run(burst_child(Path(directory), float(seconds), int(budget), int(size)))
        print(json.dumps(result))
        return 0
    parts = set(args.only.split(","))
    base = Path(tempfile.mkdtemp(prefix="velamq-bench-storage-", dir=args.dir))
    print(f"# benchmarks/storage.py on {machine()}\n# data in {base}\n")
    started = time.perf_counter()
    try:
        steps: list[tuple[str, Callable[[], str]]] = [
            ("d", lambda: part_d(base, args.seconds)),
            ("a", lambda: part_a(base, args.seconds)),
            ("b", lambda: part_b(base, args.seconds, args.backlog_s)),
            ("c", lambda: part_c(base, args.burst_s)),
            ("e", lambda: part_e(base, [int(n) for n in args.topics.split(",")], args.create_concurrency, table)),
            ("f", lambda: part_f(base, args.gc_mib, table)),
        ]
        for name, step in steps:  # d first: the disk's own figure before the others load it
            if name in parts:
                print(step(), end="\n\n", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"# {time.perf_counter() - started:.0f} s, {usage.ru_utime + usage.ru_stime:.0f} CPU-s in this process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
