"""A million topics on one broker (issue 10): N topics created as a new user would, then what they cost.

Each topic gets one durable subscription and one 100-byte message through the Pulsar protocol with
velamq's own client (subscribe, create a producer, send, close both), `--in-flight` topics at a time
(200) spread over `--clients` client processes. The broker is a `velamq standalone` child process with
its defaults, except: topics go to namespaces of `--namespace-topics` (100 000) each, created one
after the other; forceDeleteNamespaceAllowed=true; and, so that deleted topics leave whole entry logs
for the collector and its passes come within the run, logSizeLimit=16 MiB, gcWaitTime=5 s,
minorCompactionInterval=10 s, majorCompactionInterval=20 s. Per N (a fresh data dir each):

    create/s                  topics created per second (wall clock of the whole creation)
    client procs              client processes; `client CPU` / `broker CPU` seconds per topic say who
                              was the bottleneck
    RSS peak                  the broker's RSS peak during creation, and the most topics loaded at once
    RSS/loaded topic          (RSS peak - RSS of the broker before creation) / most topics loaded at once
    RSS/unloaded topic        (RSS after every topic unloaded - RSS of the broker before creation) / N
    unload s                  from the end of creation until no topic is loaded (idle unload, 60 s)
    files, MiB, B/topic       in the data dir, after a clean stop (its journal segment holds every record
                              since it started, up to 64 MiB) and after the restart (which trims it)
    stop s                    SIGTERM to exit
    check s                   `velamq admin storage check` on the stopped data dir (must find nothing)
    restart s                 spawn to "ready" (the broker's own figure in brackets)
    first send p50/p99 ms     create a producer and send one message, to 1000 random old topics, one
                              after the other, after the restart
    /metrics ms, KiB          a scrape with the topics loaded (end of creation) and after the restart
    delete                    (N >= 2 namespaces) force-delete the first namespace (100 000 topics),
                              then wait for the collector: seconds to delete, seconds until the entry
                              logs shrank, entry-log MiB before/after, data dir MiB before/after, and
                              the checker's findings afterwards

    .venv/bin/python benchmarks/topics.py                          # N = 10 000 and 100 000
    .venv/bin/python benchmarks/topics.py --topics 1000000         # the million (about 30 minutes)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _machine import machine_facts

from velamq.client import AsyncClient
from velamq.testing import BrokerProcess

MIB = 1024 * 1024
PAYLOAD = b"x" * 100
BROKER_CONF = """\
forceDeleteNamespaceAllowed=true
logSizeLimit={log_bytes}
gcWaitTime=5000
minorCompactionInterval=10
majorCompactionInterval=20
brokerTopicIdleUnloadSeconds={idle_s}
"""


def namespace_of(i: int, per_namespace: int) -> str:
    return f"bench/n{i // per_namespace:03d}"


def topic_name(i: int, per_namespace: int) -> str:
    return f"persistent://{namespace_of(i, per_namespace)}/t-{i:07d}"


# ---- client processes ---------------------------------------------------------------------------


async def _create(url: str, names: list[str], in_flight: int, done: Any | None) -> None:
    """Create `names` as a new user would, `in_flight` at a time; `done` (a shared counter, or
    None) counts the topics made."""
    async with AsyncClient(url, operation_timeout_s=120) as client:
        pending = iter(names)

        async def worker() -> None:
            for name in pending:
                consumer = await client.subscribe(name, "sub", initial_position="earliest")
                producer = await client.create_producer(name)
                await producer.send(PAYLOAD)
                await producer.close()
                await consumer.close()
                if done is not None:
                    with done.get_lock():
                        done.value += 1

        await asyncio.gather(*(worker() for _ in range(in_flight)))


def create_process(url: str, names: list[str], in_flight: int, done: Any | None) -> None:
    asyncio.run(_create(url, names, in_flight, done))


async def first_sends(url: str, names: list[str]) -> list[float]:
    """Create a producer and send once, one topic after the other: seconds each."""
    out = []
    async with AsyncClient(url, operation_timeout_s=120) as client:
        for name in names:
            started = time.perf_counter()
            producer = await client.create_producer(name)
            await producer.send(PAYLOAD)
            out.append(time.perf_counter() - started)
            await producer.close()
    return out


# ---- the broker as an operator sees it ----------------------------------------------------------


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dir_usage(root: Path) -> tuple[int, int]:
    files = size = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            files += 1
            size += os.lstat(os.path.join(dirpath, name)).st_size
    return files, size


def scrape(broker: BrokerProcess) -> tuple[float, int, dict[str, float]]:
    """(seconds, bytes, {sample without labels or with cluster only: value}) of one /metrics."""
    started = time.perf_counter()
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=120) as response:
        body = response.read()
    elapsed = time.perf_counter() - started
    values: dict[str, float] = {}
    for line in body.decode().splitlines():
        m = re.match(r'^([a-z_:]+)\{cluster="standalone"\} (\S+)$', line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return elapsed, len(body), values


def admin(broker: BrokerProcess, method: str, path: str, body: Any = None, timeout_s: float = 60) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{broker.admin_url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def storage_check(data_dir: Path) -> tuple[float, int, str]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "velamq", "admin", "storage", "check", "--data-dir", str(data_dir)],
        capture_output=True, text=True,
    )
    return time.perf_counter() - started, proc.returncode, proc.stdout + proc.stderr


class RssSampler:
    """The broker's RSS peak and the most topics loaded at once, sampled while topics are created."""

    def __init__(self, broker: BrokerProcess, interval_s: float = 1.0) -> None:
        self._broker = broker
        self._interval_s = interval_s
        self.peak_rss = 0
        self.peak_loaded = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        pid = self._broker.pid
        assert pid is not None
        scrapes = 0
        while not self._stop.wait(self._interval_s):
            self.peak_rss = max(self.peak_rss, rss_bytes(pid))
            scrapes += 1
            if scrapes % 10 == 0:  # the loaded count every 10 s: a scrape costs the broker a little
                self.peak_loaded = max(self.peak_loaded, int(scrape(self._broker)[2].get("velamq_topics_loaded", 0)))


# ---- one N --------------------------------------------------------------------------------------


@dataclass
class Step:
    topics: int
    clients: int
    create_per_s: float = 0.0
    create_s: float = 0.0
    broker_cpu_s_per_topic: float = 0.0
    client_cpu_s_per_topic: float = 0.0
    rss_start_mib: float = 0.0
    rss_peak_mib: float = 0.0
    loaded_peak: int = 0
    rss_loaded_mib: float = 0.0
    loaded_at_end: int = 0
    rss_unloaded_mib: float = 0.0
    rss_per_loaded_topic: float = 0.0
    rss_per_unloaded_topic: float = 0.0
    unload_s: float = 0.0
    files: int = 0
    data_mib: float = 0.0
    bytes_per_topic: float = 0.0
    files_restarted: int = 0
    bytes_per_topic_restarted: float = 0.0
    stop_s: float = 0.0
    check_s: float = 0.0
    check_status: int = -1
    restart_s: float = 0.0
    restart_ready_ms: float = 0.0
    first_send_p50_ms: float = 0.0
    first_send_p99_ms: float = 0.0
    metrics_loaded_ms: float = 0.0
    metrics_loaded_kib: float = 0.0
    metrics_restart_ms: float = 0.0
    metrics_restart_kib: float = 0.0
    delete: dict[str, Any] = field(default_factory=dict)


def wait_for(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


def create_topics(broker: BrokerProcess, names: list[str], clients: int, in_flight: int) -> float:
    done = multiprocessing.Value("q", 0)
    per_process = max(1, in_flight // clients)
    procs = [
        multiprocessing.Process(target=create_process, args=(broker.service_url, names[k::clients], per_process, done))
        for k in range(clients)
    ]
    started = time.perf_counter()
    for p in procs:
        p.start()
    last = started
    while any(p.is_alive() for p in procs):
        time.sleep(0.5)
        if time.perf_counter() - last > 30:
            last = time.perf_counter()
            print(f"  ... {done.value:,} topics created in {last - started:.0f} s", file=sys.stderr, flush=True)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a client process failed (exit {p.exitcode})")
    return time.perf_counter() - started


def run_step(base: Path, n: int, args: argparse.Namespace) -> Step:
    step = Step(topics=n, clients=args.clients)
    data_dir = base / f"topics-{n}"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    conf = base / f"broker-{n}.conf"
    conf.write_text(BROKER_CONF.format(log_bytes=args.log_mib * MIB, idle_s=args.idle_s))
    broker = BrokerProcess(data_dir, ["--config", str(conf)], log_path=base / f"broker-{n}.log")
    if args.broker_malloc:
        os.environ["PYTHONMALLOC"] = "malloc"  # the broker's environment (read at its start only)
    broker.start()
    pid = broker.pid
    assert pid is not None
    try:
        namespaces = sorted({namespace_of(i, args.namespace_topics) for i in range(n)})
        assert admin(broker, "PUT", "/admin/v2/tenants/bench", {"allowedClusters": ["standalone"]}) == 204
        for ns in namespaces:
            assert admin(broker, "PUT", f"/admin/v2/namespaces/{ns}") == 204, ns
        names = [topic_name(i, args.namespace_topics) for i in range(n)]
        step.rss_start_mib = rss_bytes(pid) / MIB
        broker_cpu = cpu_s(pid)
        children_before = os.times()
        with RssSampler(broker) as sampler:
            step.create_s = create_topics(broker, names, args.clients, args.in_flight)
        children_after = os.times()
        step.create_per_s = n / step.create_s
        step.broker_cpu_s_per_topic = (cpu_s(pid) - broker_cpu) / n
        client_cpu = (children_after.children_user - children_before.children_user) + (
            children_after.children_system - children_before.children_system)
        step.client_cpu_s_per_topic = client_cpu / n
        rss_end = rss_bytes(pid)
        step.rss_peak_mib = max(sampler.peak_rss, rss_end) / MIB
        elapsed, size, values = scrape(broker)
        step.metrics_loaded_ms, step.metrics_loaded_kib = elapsed * 1000, size / 1024
        step.loaded_at_end = int(values.get("velamq_topics_loaded", 0))
        step.loaded_peak = max(sampler.peak_loaded, step.loaded_at_end)
        step.rss_loaded_mib = rss_end / MIB
        print(f"  created {n:,} in {step.create_s:.0f} s; {step.loaded_at_end:,} loaded; waiting for the unload",
              file=sys.stderr, flush=True)
        started = time.perf_counter()
        wait_for(lambda: scrape(broker)[2].get("velamq_topics_loaded", 1) == 0, args.idle_s * 3 + 600, "unload")
        step.unload_s = time.perf_counter() - started
        time.sleep(2)  # the last batch's malloc_trim
        rss_unloaded = rss_bytes(pid)
        step.rss_unloaded_mib = rss_unloaded / MIB
        if step.loaded_peak:
            step.rss_per_loaded_topic = (step.rss_peak_mib - step.rss_start_mib) * MIB / step.loaded_peak
        step.rss_per_unloaded_topic = (rss_unloaded - step.rss_start_mib * MIB) / n

        started = time.perf_counter()
        broker.stop(timeout_s=600)
        step.stop_s = time.perf_counter() - started
        step.files, size = dir_usage(data_dir)
        step.data_mib = size / MIB
        step.bytes_per_topic = size / n
        step.check_s, step.check_status, report = storage_check(data_dir)
        if step.check_status != 0:
            print(report, file=sys.stderr)

        started = time.perf_counter()
        broker.start()
        step.restart_s = time.perf_counter() - started
        ready = re.findall(r"started_in_ms=(\d+)", broker.output)
        step.restart_ready_ms = float(ready[-1]) if ready else 0.0
        step.files_restarted, size = dir_usage(data_dir)
        step.bytes_per_topic_restarted = size / n
        sample = random.Random(7).sample(range(n), min(1000, n))
        latencies = asyncio.run(first_sends(broker.service_url, [names[i] for i in sample]))
        step.first_send_p50_ms = statistics.median(latencies) * 1000
        step.first_send_p99_ms = sorted(latencies)[max(0, int(len(latencies) * 0.99) - 1)] * 1000
        elapsed, size, _ = scrape(broker)
        step.metrics_restart_ms, step.metrics_restart_kib = elapsed * 1000, size / 1024
        if n >= args.namespace_topics:
            step.delete = delete_namespace(broker, data_dir, namespaces[0], args)
        broker.stop(timeout_s=600)
    finally:
        broker.kill()
    if not args.keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    return step


def delete_namespace(broker: BrokerProcess, data_dir: Path, namespace: str, args: argparse.Namespace) -> dict[str, Any]:
    """Force-delete one namespace, then wait until the collector has shrunk the entry logs."""
    logs_dir = data_dir / "logs"
    _, logs_before = dir_usage(logs_dir)
    files_before, bytes_before = dir_usage(data_dir)
    started = time.perf_counter()
    path = f"/admin/v2/namespaces/{namespace}?force=true"
    while (status := admin(broker, "DELETE", path, timeout_s=600)) != 204:
        if status != 503:  # 503: the admin request timed out; the deletion goes on, ask again
            raise RuntimeError(f"namespace delete answered {status}")
    delete_s = time.perf_counter() - started
    started = time.perf_counter()
    runs_before = scrape(broker)[2].get("velamq_storage_gc_runs_total", 0.0)

    def collected() -> bool:
        values = scrape(broker)[2]
        return values.get("velamq_storage_gc_runs_total", 0.0) >= runs_before + 6

    wait_for(collected, 300, "six garbage collection passes (a major one among them)")
    gc_s = time.perf_counter() - started
    _, _, after = scrape(broker)
    _, logs_after = dir_usage(logs_dir)
    files_after, bytes_after = dir_usage(data_dir)
    broker.stop(timeout_s=600)
    check_s, status, report = storage_check(data_dir)
    broker.start()
    return {
        "namespace": namespace,
        "delete_s": round(delete_s, 1),
        "gc_wait_s": round(gc_s, 1),
        "entry_log_mib_before": round(logs_before / MIB, 1),
        "entry_log_mib_after": round(logs_after / MIB, 1),
        "gc_reclaimed_mib": round(after.get("velamq_storage_gc_bytes_reclaimed_total", 0.0) / MIB, 1),
        "data_mib_before": round(bytes_before / MIB, 1),
        "data_mib_after": round(bytes_after / MIB, 1),
        "files_before_after": (files_before, files_after),
        "check_s": round(check_s, 1),
        "check_status": status,
        "check_report_tail": report.strip().splitlines()[-3:],
    }


def print_table(steps: list[Step]) -> None:
    rows = [
        ("topics", lambda s: f"{s.topics:,}"),
        ("client procs", lambda s: str(s.clients)),
        ("create/s", lambda s: f"{s.create_per_s:,.0f}"),
        ("broker / client CPU ms per topic", lambda s: f"{s.broker_cpu_s_per_topic * 1000:.2f} / "
                                                      f"{s.client_cpu_s_per_topic * 1000:.2f}"),
        ("RSS start / peak MiB", lambda s: f"{s.rss_start_mib:.0f} / {s.rss_peak_mib:.0f}"),
        ("topics loaded: peak / at end", lambda s: f"{s.loaded_peak:,} / {s.loaded_at_end:,}"),
        ("RSS peak growth B per loaded topic", lambda s: f"{s.rss_per_loaded_topic:,.0f}"),
        ("RSS after unload MiB", lambda s: f"{s.rss_unloaded_mib:.0f}"),
        ("RSS B per unloaded topic", lambda s: f"{s.rss_per_unloaded_topic:,.0f}"),
        ("unload s", lambda s: f"{s.unload_s:.0f}"),
        ("files / MiB in data dir", lambda s: f"{s.files} / {s.data_mib:.1f}"),
        ("disk B per topic: stopped / restarted", lambda s: f"{s.bytes_per_topic:,.0f} / "
                                                            f"{s.bytes_per_topic_restarted:,.0f}"),
        ("clean stop s", lambda s: f"{s.stop_s:.2f}"),
        ("storage check s (exit)", lambda s: f"{s.check_s:.1f} ({s.check_status})"),
        ("restart to ready s (broker's)", lambda s: f"{s.restart_s:.2f} ({s.restart_ready_ms / 1000:.2f})"),
        ("first send p50 / p99 ms", lambda s: f"{s.first_send_p50_ms:.1f} / {s.first_send_p99_ms:.1f}"),
        ("/metrics loaded ms, KiB", lambda s: f"{s.metrics_loaded_ms:.0f}, {s.metrics_loaded_kib:.0f}"),
        ("/metrics after restart ms, KiB", lambda s: f"{s.metrics_restart_ms:.0f}, {s.metrics_restart_kib:.0f}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, cell in rows:
        print(f"| {name:<{width}} | " + " | ".join(f"{cell(s):>22}" for s in steps) + " |")
    for s in steps:
        if s.delete:
            print(f"\ndelete at {s.topics:,}: " + json.dumps(s.delete))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", default="10000,100000", help="comma-separated N (default 10000,100000)")
    parser.add_argument("--clients", type=int, default=2, help="client processes (default 2)")
    parser.add_argument("--in-flight", type=int, default=200, help="topics being created at once (default 200)")
    parser.add_argument("--namespace-topics", type=int, default=100_000, help="topics per namespace")
    parser.add_argument("--idle-s", type=float, default=60.0, help="brokerTopicIdleUnloadSeconds (default 60)")
    parser.add_argument("--log-mib", type=int, default=16, help="logSizeLimit in MiB (default 16)")
    parser.add_argument("--dir", type=Path, default=None, help="where the data dirs go (default a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs")
    parser.add_argument("--broker-malloc", action="store_true",
                        help="run the broker with PYTHONMALLOC=malloc (memory of unloaded topics comes back; more CPU)")
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="velamq-topics-"))
    base.mkdir(parents=True, exist_ok=True)
    for name, value in machine_facts():
        print(f"{name}: {value}")
    steps = []
    for n in (int(x) for x in args.topics.split(",")):
        print(f"N = {n:,}", file=sys.stderr, flush=True)
        step = run_step(base, n, args)
        print(json.dumps(asdict(step)), file=sys.stderr, flush=True)
        steps.append(step)
    print_table(steps)


if __name__ == "__main__":
    main()
