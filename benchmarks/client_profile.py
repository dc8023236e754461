"""Where the client's time goes, path by path: each path runs alone under py-spy (a sampling
profiler: `.venv/bin/pip install -e '.[dev]'` brings it) and the samples are summed per function.

    .venv/bin/python benchmarks/client_profile.py                       # every path, ~2 min
    .venv/bin/python benchmarks/client_profile.py --paths async-receive blocking-receive
    .venv/bin/python benchmarks/client_profile.py --paths async-receive --unbatched -n 50000

Paths (100-byte messages, batches of 1000, one topic, a broker of its own):

    async-receive     AsyncClient consumer: receive() + acknowledge() per message
    blocking-receive  Client (blocking) consumer: receive() + acknowledge() per message
    bulk-receive      batch_receive() + one acknowledge() per batch
    bulk-arrow        batch_receive() + to_arrow() + one acknowledge() per batch
    single-send       send_async() per message, batched
    bulk-send         send_many() of all messages

For each path: messages per second while profiled (py-spy's sampling slows it a little) and the
functions with the most samples on the client's threads, by own time ("self") and including what
they call ("total"), as percentages of the path's samples.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time

from _pyspy import py_spy_path, summarise

from velamq.client import AsyncClient, Client

PATHS = ("async-receive", "blocking-receive", "bulk-receive", "bulk-arrow", "single-send", "bulk-send")
PRODUCER = {"batching_enabled": True, "batching_max_messages": 1000, "batching_max_publish_delay_ms": 10,
            "max_pending_messages": 10_000, "block_if_queue_full": True}


async def _fill(url: str, topic: str, n: int, size: int) -> None:
    async with AsyncClient(url) as client:
        batched = os.environ.get("PROFILE_UNBATCHED") != "1"
        producer = await client.create_producer(topic, **{**PRODUCER, "batching_enabled": batched})
        futures = await producer.send_many_async([os.urandom(size)] * n)
        await futures


async def _async_path(url: str, path: str, topic: str, n: int, size: int) -> float:
    async with AsyncClient(url) as client:
        if path == "single-send":
            producer = await client.create_producer(topic, **PRODUCER)
            payload = os.urandom(size)
            t0 = time.perf_counter()
            for _ in range(n):
                await producer.send_async(payload)
            await producer.flush()  # every receipt is in (a send that failed would show in the log)
            return n / (time.perf_counter() - t0)
        if path == "bulk-send":
            producer = await client.create_producer(topic, **PRODUCER)
            values = [os.urandom(size)] * n
            t0 = time.perf_counter()
            await producer.send_many(values)
            return n / (time.perf_counter() - t0)
        consumer = await client.subscribe(topic, "profile", initial_position="earliest", receiver_queue_size=10_000)
        t0 = time.perf_counter()
        got = 0
        if path == "async-receive":
            for _ in range(n):
                await consumer.acknowledge(await consumer.receive())
            got = n
        while got < n:
            messages = await consumer.batch_receive()
            if path == "bulk-arrow":
                messages.to_arrow()
            await consumer.acknowledge(messages)
            got += len(messages)
        return n / (time.perf_counter() - t0)


def _blocking_receive(url: str, topic: str, n: int) -> float:
    with Client(url) as client:
        consumer = client.subscribe(topic, "profile", initial_position="earliest", receiver_queue_size=10_000)
        t0 = time.perf_counter()
        for _ in range(n):
            consumer.acknowledge(consumer.receive())
        return n / (time.perf_counter() - t0)


def run_path(url: str, path: str, n: int, size: int) -> None:
    """Runs inside py-spy: fill a topic (not profiled), signal, run the path."""
    topic = f"profile-{path}-{os.getpid()}"
    if path not in ("single-send", "bulk-send"):
        asyncio.run(_fill(url, topic, n, size))
    if path == "bulk-arrow":  # pyarrow's imports (some happen on first use) are not part of the path
        from velamq.client import Messages

        Messages([]).to_arrow()
    print("ready", flush=True)
    sys.stdin.readline()  # the profiler starts now
    if path == "blocking-receive":
        rate = _blocking_receive(url, topic, n)
    else:
        rate = asyncio.run(_async_path(url, path, topic, n, size))
    print(f"rate {rate:.0f}", flush=True)


def profile(py_spy: str, url: str, path: str, n: int, size: int, top: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "profile.txt")
        child = subprocess.Popen([sys.executable, __file__, "--run", path, "--service-url", url, "-n", str(n),
                                  "--size", str(size)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdin is not None and child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{path}: the child did not start")
        spy = subprocess.Popen([py_spy, "record", "--format", "raw", "--rate", "200", "--nonblocking", "-o", out,
                                "--pid", str(child.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # py-spy attaches
        child.stdin.write("go\n")
        child.stdin.flush()
        rate_line = child.stdout.readline()
        child.wait(600)
        spy.wait(60)
        with open(out) as f:
            samples, rows = summarise(f.read(), top)
    lines = [f"### {path}: {float(rate_line.split()[1]):,.0f} msg/s under the profiler, {samples} samples", "",
             "| function | self | total |", "|---|---|---|"]
    for name, own, total in rows:
        lines.append(f"| `{name}` | {own / samples:.0%} | {total / samples:.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--paths", nargs="*", default=list(PATHS), choices=PATHS)
    ap.add_argument("-n", type=int, default=300_000, help="messages per path")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--unbatched", action="store_true", help="the topics to receive from are filled unbatched")
    ap.add_argument("--service-url")
    ap.add_argument("--run", choices=PATHS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run:
        run_path(args.service_url, args.run, args.n, args.size)
        return 0
    if args.unbatched:
        os.environ["PROFILE_UNBATCHED"] = "1"  # for the children
    py_spy = py_spy_path()
    if py_spy is None:
        print("py-spy is not installed: .venv/bin/pip install -e '.[dev]'", file=sys.stderr)
        return 2
    from velamq.testing import run_broker

    with run_broker() as broker:
        for path in args.paths:
            print(profile(py_spy, broker.service_url, path, args.n, args.size, args.top), flush=True)
            print(flush=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average after the run: {load}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
