"""How much does key-hash parallelism inside a partition speed up ordered consumption, and what does
the consumer itself cost per message? (OC-1..OC-4)

The scenario of ZTO's ordered consumption: a backlog on a partitioned topic, a handler that takes a
fixed time per message, and strict order per key. The script produces --messages messages over
--keys keys to an 8-partition topic (uniform keys, and a second topic with Zipf-skewed keys), then
consumes the backlog with velamq's OrderedConsumer (a fresh subscription each run), --runs times per
setting, and prints the run with the median rate. Three handler modes:

    async     `await asyncio.sleep(handler_ms)`: I/O-like work on the loop
    thread    `time.sleep(handler_ms)` in the consumer's thread pool
    process   --cpu-ms of pure-Python arithmetic (CPU-bound) in handler processes, with
              processes=1 and processes=2, against the same handler in the thread pool (the GIL)

Two key assignments (OrderedConsumer's key_assignment, --assignment): "hash" (OC-1: a key always
on worker hash(key) % N) and "free_worker" (a key's next message on whichever worker is free).
--loop uvloop runs the consumer on uvloop instead of asyncio's own loop.

Every run checks the order per key (each key's sequence numbers arrive increasing) and that every
message was handled exactly once. Columns: msg/s; the speed-up over N=1 (or over one process); the
nominal ideal (partitions x N / nominal handler time, the rate of every worker always busy with
a handler that takes exactly what it asks for) and the share of it reached; the measured handler
time; the consumer process's CPU per message, in all and without the handler's own CPU (the
handler calibrated alone, with the same concurrency), which is what the consumer costs.

    .venv/bin/python benchmarks/ordered_consumer.py                 # starts its own broker, ~4 min
    .venv/bin/python benchmarks/ordered_consumer.py --modes async --parallelism 1 16 --runs 3
    .venv/bin/python benchmarks/ordered_consumer.py --modes async --parallelism 16 --runs 1 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from _machine import machine_facts
from _pyspy import py_spy_path, recording, summarise

from velamq.client import AsyncClient, Message, MessageId, OrderedConsumer
from velamq.client.ordered._progress import worker_of

# The process handler's work and where it records what it handled: set in the environment before
# the handler processes start, read by them when they import this module.
_SPIN = int(os.environ.get("VELAMQ_BENCH_SPIN", "0"))
_OUT_DIR = os.environ.get("VELAMQ_BENCH_OUT", "")
_out_file: list[object] = []
_out_lock = threading.Lock()  # the same handler in the thread pool writes from several threads


def spin(iterations: int) -> int:
    x = 0
    for i in range(iterations):
        x += i * i % 7
    return x


def cpu_handler(message: Message) -> None:
    """Pure-Python work, then one line "key seq time spin-seconds" in this process's record file."""
    t0 = time.perf_counter()
    spin(_SPIN)
    took = time.perf_counter() - t0
    key, seq = json.loads(message.value)
    with _out_lock:
        if not _out_file:
            _out_file.append(open(os.path.join(_OUT_DIR, f"{os.getpid()}.txt"), "a", buffering=1))  # noqa: SIM115
        _out_file[0].write(f"{key} {seq} {time.time()} {took}\n")  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Row:
    mode: str
    keys: str
    parallelism: int
    processes: int
    messages: int
    partitions: int
    nominal_ms: float
    seconds: float
    cpu_s: float
    handler_cpu_us: float  # the handler's own CPU per call, calibrated alone
    effective_max: float
    hot_share: float
    ordered: bool
    duplicates: int
    handler_s: float  # measured mean time of one handler call (0 when not measured)
    busiest_lane: int = 0  # messages of the busiest (partition, worker): a lane runs them one by one
    rates: tuple[float, ...] = ()
    load: str = ""
    assignment: str = "hash"  # OrderedConsumer's key_assignment

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else float("inf")

    @property
    def nominal_ideal(self) -> float:
        # Processes: that many handlers at once; the same handler in threads: one (the GIL).
        workers = self.partitions * self.parallelism if self.mode != "process" else max(1, self.processes)
        return workers / (self.nominal_ms / 1000) if self.nominal_ms > 0 else 0.0

    @property
    def lane_bound(self) -> float:
        """What the key distribution allows at the nominal handler time: the busiest lane busy
        throughout (hash: a (partition, worker) pair; free_worker: a key, and never more than the
        nominal ideal)."""
        if not self.busiest_lane or self.nominal_ms <= 0:
            return 0.0
        bound = self.messages / (self.busiest_lane * self.nominal_ms / 1000)
        return min(bound, self.nominal_ideal) if self.assignment == "free_worker" else bound

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.messages * 1e6

    @property
    def consumer_cpu_us(self) -> float:
        return self.cpu_us - self.handler_cpu_us


def zipf_keys(n: int, keys: int, s: float, rng: random.Random) -> list[str]:
    weights = [1 / (k + 1) ** s for k in range(keys)]
    return [f"key-{k}" for k in rng.choices(range(keys), weights=weights, k=n)]


def create_partitioned_topic(admin_url: str, topic: str, partitions: int) -> None:
    url = f"{admin_url}/admin/v2/persistent/public/default/{topic}/partitions"
    req = urllib.request.Request(url, data=json.dumps(partitions).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        if resp.status not in (200, 204):
            raise RuntimeError(f"cannot create {topic}: HTTP {resp.status}")


async def produce(client: AsyncClient, topic: str, keys: list[str]) -> None:
    producer = await client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    seq: dict[str, int] = defaultdict(int)
    futures = []
    for key in keys:
        futures.append(await producer.send_async(json.dumps([key, seq[key]]).encode(), key=key))
        seq[key] += 1
    await asyncio.gather(*futures)
    await producer.close()


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def load_average() -> str:
    with contextlib.suppress(OSError), open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
    return "?"


Handlers = tuple[Callable[[Message], object], Callable[[Message], object], list[float]]


def sleep_handlers(delay_s: float, n: int, done: asyncio.Event, seen: dict[str, list[int]],
                   partitions: dict[str, int] | None = None) -> Handlers:
    """(async handler, thread handler, [total handler seconds]); done is set at the n-th message;
    partitions gets each key's partition."""
    loop = asyncio.get_running_loop()
    handler_time = [0.0]
    count = [0]
    where = partitions if partitions is not None else {}

    def record(message: Message, started: float) -> None:
        # += and append from several threads: one key is only ever on one thread, and the handler
        # time is a statistic (a lost update would not matter); the count is checked exactly at the end.
        handler_time[0] += time.perf_counter() - started
        key, seq = json.loads(message.value)
        seen[key].append(seq)
        where[key] = message.partition
        count[0] += 1
        if count[0] >= n:
            loop.call_soon_threadsafe(done.set)

    async def handle_async(message: Message) -> None:
        started = time.perf_counter()
        await asyncio.sleep(delay_s)
        record(message, started)

    def handle_thread(message: Message) -> None:
        started = time.perf_counter()
        time.sleep(delay_s)
        record(message, started)

    return handle_async, handle_thread, handler_time


async def calibrate(mode: str, handler: Callable[[Message], object], concurrency: int, calls: int) -> float:
    """CPU µs of one handler call, the handler alone: `calls` calls over `concurrency` coroutines
    (async) or threads (thread: a sleeping thread's wake-ups cost CPU too, more than in a row)."""
    message = Message(value=json.dumps(["calibration", 0]).encode(), message_id=MessageId(1, 1, 0), key="calibration")
    c0 = cpu_s()
    if mode == "async":
        per = max(1, calls // concurrency)

        async def lane() -> None:
            for _ in range(per):
                await handler(message)  # type: ignore[misc]

        await asyncio.gather(*(lane() for _ in range(concurrency)))
    else:
        per = max(1, calls // concurrency)

        def lane_in_thread(_: int) -> None:
            for _ in range(per):
                handler(message)

        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(lane_in_thread, range(concurrency)))
    return (cpu_s() - c0) / (per * concurrency) * 1e6


async def consume(client: AsyncClient, topic: str, row: Row, max_in_flight: int, profile: str | None) -> Row:
    seen: dict[str, list[int]] = defaultdict(list)
    partitions: dict[str, int] = {}
    done = asyncio.Event()
    handle_async, handle_thread, handler_time = sleep_handlers(row.nominal_ms / 1000, row.messages, done, seen,
                                                               partitions)
    options: dict[str, object] = {}
    handler: Callable[[Message], object]
    if row.mode == "async":
        handler = handle_async
    elif row.mode == "thread":
        handler = handle_thread
    else:
        handler = cpu_handler
        fresh_record_dir()
        if row.processes:
            options = {"handler_mode": "process", "processes": row.processes}
    if row.assignment != "hash":
        options["key_assignment"] = row.assignment
    consumer = OrderedConsumer(client, topic, f"bench-{row.parallelism}-{uuid.uuid4().hex[:6]}", handler,
                               partition_parallelism=row.parallelism, max_in_flight=max_in_flight,
                               initial_position="earliest", **options)  # type: ignore[arg-type]
    spy = recording(py_spy_path() or "py-spy", os.getpid(), profile, gil_only=True) if profile else \
        contextlib.nullcontext()
    with spy:
        c0 = cpu_s()
        t0 = time.perf_counter()
        await consumer.start()
        if row.mode == "process" and row.processes:
            # Not counted: starting the handler processes (each imports the handler's module), which
            # happens before the consumer subscribes.
            c0, t0 = cpu_s(), time.perf_counter()
        wall0 = time.time() - (time.perf_counter() - t0)
        if row.mode == "process":
            while consumer.metrics().completed < row.messages:
                await asyncio.sleep(0.2)
        else:
            await done.wait()
        elapsed = time.perf_counter() - t0
        cpu = cpu_s() - c0
    m = consumer.metrics()
    await consumer.close()
    if row.mode == "process":
        seen, last, spent = read_records(Path(_OUT_DIR))
        handler_time[0] = spent
        shutil.rmtree(_OUT_DIR, ignore_errors=True)
        elapsed = last - wall0  # the last message's end, not when the (coarse) poll saw it
    processed = sum(len(v) for v in seen.values())
    ordered = all(v == sorted(v) and len(set(v)) == len(v) for v in seen.values())
    busy = [p for p in m.partitions if p.active_seconds > 0]
    # A lane runs its messages one at a time: a (partition, worker) pair with hash lanes, a key with
    # free workers.
    lanes: Counter[tuple[int, int | str]] = Counter()
    for key, seqs in seen.items():
        if key in partitions:
            lane: int | str = worker_of(key, row.parallelism) if row.assignment == "hash" else key
            lanes[partitions[key], lane] += len(seqs)
    return replace(row, seconds=elapsed, busiest_lane=max(lanes.values(), default=0), cpu_s=cpu,
                   effective_max=max(p.effective_parallelism for p in busy),
                   hot_share=max(p.hottest_key_share for p in m.partitions), ordered=ordered,
                   duplicates=processed - row.messages,
                   handler_s=handler_time[0] / processed if processed else 0.0,
                   load=load_average())


def fresh_record_dir() -> None:
    """A new directory for the process handler's records, for this run's handler processes (they
    read the environment when they start) and for this process (the same handler in threads)."""
    global _OUT_DIR
    _OUT_DIR = os.environ["VELAMQ_BENCH_OUT"] = tempfile.mkdtemp(prefix="ordered-bench-")
    with _out_lock:
        for f in _out_file:
            f.close()  # type: ignore[attr-defined]
        _out_file.clear()


def read_records(out_dir: Path) -> tuple[dict[str, list[int]], float, float]:
    """What the handler processes recorded, per key (a key is only ever in one process's file),
    when the last one finished, and the handler's total time (its wall time, summed)."""
    seen: dict[str, list[int]] = defaultdict(list)
    last = spent = 0.0
    for path in sorted(out_dir.glob("*.txt")):
        for line in path.read_text().splitlines():
            key, seq, at, took = line.split()
            seen[key].append(int(seq))
            last = max(last, float(at))
            spent += float(took)
    return seen, last, spent


def table(rows: list[Row]) -> str:
    head = ["mode", "assignment", "keys", "N", "procs", "msg/s (median)", "runs msg/s", "speed-up", "nominal ideal",
            "of nominal", "bound", "of bound", "handler ms", "eff. par.", "hot key", "CPU us/msg",
            "consumer CPU us/msg", "load avg", "order per key"]
    lines = [head]
    base: dict[tuple[str, str, str], float] = {}
    for r in rows:
        unit = (r.mode, r.keys, r.assignment)
        first = r.processes == 1 if r.mode == "process" else r.parallelism == 1
        if first and unit not in base:
            base[unit] = r.rate
        speedup = f"{r.rate / base[unit]:.2f}x" if unit in base else "-"
        lines.append([r.mode, r.assignment, r.keys, str(r.parallelism), str(r.processes or "-"), f"{r.rate:,.0f}",
                      " ".join(f"{x:,.0f}" for x in r.rates), speedup,
                      f"{r.nominal_ideal:,.0f}" if r.nominal_ideal else "-",
                      f"{r.rate / r.nominal_ideal:.0%}" if r.nominal_ideal else "-",
                      f"{r.lane_bound:,.0f}" if r.lane_bound else "-",
                      f"{r.rate / r.lane_bound:.0%}" if r.lane_bound else "-",
                      f"{r.handler_s * 1000:.2f}" if r.handler_s else "-",
                      f"{r.effective_max:.2f}", f"{r.hot_share:.0%}", f"{r.cpu_us:.1f}",
                      f"{r.consumer_cpu_us:.1f}", r.load,
                      "ok" if r.ordered and r.duplicates == 0 else f"BROKEN ({r.duplicates} dup)"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["| " + " | ".join(cell.ljust(w) if i < 3 else cell.rjust(w)
                             for i, (cell, w) in enumerate(zip(line, widths, strict=True))) + " |"
           for line in lines]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


@contextlib.contextmanager
def broker(service_url: str | None, admin_url: str | None) -> Iterator[tuple[str, str]]:
    if service_url:
        yield service_url, admin_url or "http://localhost:8080"
        return
    from velamq.testing import run_broker

    with run_broker() as b:
        yield b.service_url, b.admin_url


Setting = tuple[str, str, int, int, int, float, str]


def plan(args: argparse.Namespace) -> list[Setting]:
    """(mode, key set, N, processes, messages, nominal handler ms, key assignment) per setting."""
    out: list[Setting] = []
    for mode in args.modes:
        if mode == "process":
            n = args.process_parallelism
            out += [("process", "uniform", n, p, args.process_messages, args.cpu_ms, "hash") for p in args.processes]
            # the same handler, in threads
            out.append(("process", "uniform", n, 0, args.process_messages, args.cpu_ms, "hash"))
            continue
        for how in args.assignment:
            out += [(mode, "uniform", n, 0, args.messages, args.handler_ms, how) for n in args.parallelism]
            if mode == "async":
                out += [(mode, "zipf", n, 0, args.messages, args.handler_ms, how) for n in args.skewed]
    return out


def calibrate_spin(cpu_ms: float) -> int:
    """Iterations of spin() that take cpu_ms of CPU here (the best of five)."""
    trial = 20_000
    best = min(_timed(trial) for _ in range(5))
    return max(1, int(trial * cpu_ms / 1000 / best))


def _timed(iterations: int) -> float:
    t0 = time.process_time()
    spin(iterations)
    return time.process_time() - t0


async def run(args: argparse.Namespace, url: str, admin_url: str) -> list[Row]:
    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:6]
    longest = max(args.messages, args.process_messages)
    key_sets = {"uniform": [f"key-{rng.randrange(args.keys)}" for _ in range(longest)],
                "zipf": zipf_keys(longest, args.keys, args.zipf_s, rng)}
    rows: list[Row] = []
    async with AsyncClient(url, operation_timeout_s=60) as client:
        for mode, keys, n, processes, messages, nominal_ms, how in plan(args):
            runs: list[Row] = []
            for attempt in range(args.runs):
                topic = f"ordered-{mode}-{how}-{keys}-{n}-{processes}-{attempt}-{run_id}"
                create_partitioned_topic(admin_url, topic, args.partitions)
                await produce(client, topic, key_sets[keys][:messages])
                row = Row(mode, keys, n, processes, messages, args.partitions, nominal_ms, 0.0, 0.0, 0.0, 0.0, 0.0,
                          False, 0, 0.0, assignment=how)
                profile = args.profile_out if args.profile and not runs else None
                runs.append(await consume(client, topic, row, args.max_in_flight, profile))
                print(f"  {mode} {how} {keys} N={n} procs={processes or '-'}: {runs[-1].rate:,.0f} msg/s, "
                      f"{runs[-1].cpu_us:.1f} CPU us/msg, order {'ok' if runs[-1].ordered else 'BROKEN'}",
                      file=sys.stderr, flush=True)
            median = statistics.median_low(r.rate for r in runs)
            chosen = next(r for r in runs if r.rate == median)
            rows.append(replace(chosen, handler_cpu_us=await handler_cpu(chosen),
                                rates=tuple(r.rate for r in runs)))
    return rows


async def handler_cpu(row: Row) -> float:
    if row.mode == "process" and row.processes:
        return 0.0  # the handler runs in other processes: all of this process's CPU is the consumer's
    done = asyncio.Event()
    seen: dict[str, list[int]] = defaultdict(list)
    handle_async, handle_thread, _ = sleep_handlers(row.nominal_ms / 1000, 10**9, done, seen)
    if row.mode == "async":
        return await calibrate("async", handle_async, row.partitions * row.parallelism, 4000)
    if row.mode == "thread":
        threads = min(256, row.partitions * row.parallelism)
        return await calibrate("thread", handle_thread, threads, max(threads * 8, 1000))
    return await calibrate("thread", cpu_handler, 1, 300)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--service-url", help="use this broker instead of starting one")
    ap.add_argument("--admin-url", help="its admin URL (with --service-url)")
    ap.add_argument("--modes", nargs="+", default=["async", "thread", "process"],
                    choices=["async", "thread", "process"])
    ap.add_argument("--messages", type=int, default=16_000, help="messages per run (async, thread)")
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--handler-ms", type=float, default=2.0, help="the sleeping handlers' time per message")
    ap.add_argument("--max-in-flight", type=int, default=1000, help="per partition")
    ap.add_argument("--parallelism", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--skewed", type=int, nargs="*", default=[16], help="parallelisms for Zipf-skewed keys (async)")
    ap.add_argument("--zipf-s", type=float, default=1.1, help="skew of the second topic's keys")
    ap.add_argument("--cpu-ms", type=float, default=1.0, help="the process handler's pure-Python CPU per message")
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--process-messages", type=int, default=4000)
    ap.add_argument("--process-parallelism", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3, help="runs per setting; the median is shown")
    ap.add_argument("--profile", action="store_true", help="py-spy the first run of each setting (GIL holder)")
    ap.add_argument("--profile-out", default=os.path.join(tempfile.gettempdir(), "ordered-consumer.raw"))
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--assignment", nargs="+", choices=["hash", "free_worker"], default=["hash", "free_worker"],
                    help="OrderedConsumer key_assignment(s) for the async and thread rows")
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio",
                    help="the consumer process's event loop (uvloop: libuv's, with finer timers)")
    args = ap.parse_args(argv)
    if "process" in args.modes:
        os.environ["VELAMQ_BENCH_SPIN"] = str(calibrate_spin(args.cpu_ms))
        global _SPIN
        _SPIN = int(os.environ["VELAMQ_BENCH_SPIN"])
    with broker(args.service_url, args.admin_url) as (url, admin_url):
        if args.loop == "uvloop":
            import uvloop

            rows = uvloop.run(run(args, url, admin_url))
        else:
            rows = asyncio.run(run(args, url, admin_url))
    print(f"\nOrderedConsumer: {args.keys} keys, {args.partitions} partitions, max_in_flight {args.max_in_flight} "
          f"per partition; async/thread: {args.messages:,} messages, handler sleeps {args.handler_ms:g} ms; "
          f"process: {args.process_messages:,} messages, {args.cpu_ms:g} ms of pure-Python CPU each\n")
    print(table(rows))
    print("\nN = partition_parallelism; procs = handler processes (process mode; '-' in that block: the same CPU"
          "\nhandler in the thread pool). speed-up: over N=1, or over one process. nominal ideal: partitions x N"
          "\n(or processes) / the nominal handler time. bound: what the key distribution allows, whatever the"
          "\nconsumer does: messages / (messages of the busiest lane x the nominal handler time), a lane being a"
          "\n(partition, worker) pair with assignment hash and a key with free_worker (at most the nominal ideal),"
          "\nsince a lane runs its messages one at a time. eff. par.: the highest partition's"
          "\neffective parallelism (OC-4). consumer CPU: this process's CPU per message minus the handler's own,"
          "\ncalibrated alone (as many coroutines or threads at once as the run had workers)."
          f"\nMedian of {args.runs} runs by rate; load average (1, 5, 15 min) at the end of the median run.\n")
    if args.profile and py_spy_path():
        with contextlib.suppress(OSError), open(args.profile_out) as f:
            samples, top = summarise(f.read(), 25)
            print(f"py-spy, first run of the last setting ({samples} samples, GIL holder):")
            for name, own, total in top:
                print(f"  {own / max(samples, 1):6.1%} self {total / max(samples, 1):6.1%} total  {name}")
    for k, v in machine_facts(()):
        print(f"- {k}: {v}")
    return 0 if all(r.ordered and r.duplicates == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
