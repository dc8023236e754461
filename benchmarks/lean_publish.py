"""The broker's CPU per published message at saturation, driven by a load generator that costs
almost nothing, with NATS JetStream beside it when `nats-server` is installed (issue 22).

The generator is this process: no client library on either side. For velamq it pre-encodes
SEND frames (one 100-byte message each, unbatched, or --batch messages per entry) with their
CRC32C and ascending sequence ids, writes them in large writes over plain non-blocking sockets
keeping at most --window sends in flight per connection, and counts the SEND_RECEIPTs (each one's
frame type is checked, the sequence ids of the last receipt of every read must ascend). After
a run the receipts are checked against the topic's msgInCounter (admin stats). For NATS
JetStream it does the same with pre-encoded PUB commands to a file-store stream, each with a
reply subject, and counts the JetStream acks (checked against the stream's message count).

Server CPU is user + system time of the server process, all its threads (from /proc/PID/stat),
over the timed window (first write to last receipt), divided by the messages. Each setting is
run --runs times (median printed) against one server of its own; the load average is printed
before and after. Per thread (from /proc/PID/task/*/stat): the loop thread (the main one) and
the others by CPU.

    .venv/bin/python benchmarks/lean_publish.py                        # velamq fsync/none, 1 and 4 connections, NATS
    .venv/bin/python benchmarks/lean_publish.py --tree before=/path/to/old/tree --tree after=.
    .venv/bin/python benchmarks/lean_publish.py --batch 100            # batched entries of 100 messages

The frames and the receipt counting are `velamq perf produce --lean`'s (velamq/cli/_perf_frames.py).

`--tree NAME=PATH` starts the velamq brokers with PYTHONPATH=PATH, so two builds are measured
side by side in one invocation (runs alternate between the trees).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import shutil
import socket
import struct
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _machine import facts_and_load, machine_facts
from _nats import NatsAckCounter, nats_connect, nats_request, nats_server, nats_version
from _pyspy import py_spy_path, recording, top_table

from velamq.cli._perf_frames import ReceiptCounter, SendFrames, connect_command, producer_command
from velamq.protocol import build_batch, encode_command, pb
from velamq.testing import run_broker

T = pb.BaseCommand
_HEADER = struct.Struct(">II")
_U32 = struct.Struct(">I")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---- server CPU --------------------------------------------------------------------------------


def _stat_cpu_s(path: str) -> float:
    return sum(_stat_user_system_s(path))


def _stat_user_system_s(path: str) -> tuple[float, float]:
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / _CLK_TCK, int(fields[12]) / _CLK_TCK


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds of every thread of `pid`, by thread id."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[int(tid)] = _stat_cpu_s(f"/proc/{pid}/task/{tid}/stat")
    return out


# ---- the generic driver ------------------------------------------------------------------------


class Stream:
    """One connection's side of a run: what to write and how to count what comes back."""

    def __init__(self, sock: socket.socket, frames: list[bytes], window: int, chunk: int,
                 count_replies: Callable[[bytes], int]) -> None:
        self.sock = sock
        self.frames = frames
        self.window = window
        self.chunk = chunk
        self.count_replies = count_replies
        self.next = 0
        self.in_flight = 0
        self.acked = 0
        self.out = memoryview(b"")

    @property
    def done(self) -> bool:
        return self.acked >= len(self.frames)

    def refill(self) -> None:
        if self.out or self.next >= len(self.frames):
            return
        room = min(self.window - self.in_flight, self.chunk, len(self.frames) - self.next)
        if room < max(1, min(self.chunk, self.window) // 4) and self.next + room < len(self.frames):
            return  # wait for more room: writes stay large
        if room <= 0:
            return
        self.out = memoryview(b"".join(self.frames[self.next:self.next + room]))
        self.next += room
        self.in_flight += room


def drive(streams: list[Stream], timeout_s: float = 300.0) -> float:
    """Write and count until every frame of every stream is acknowledged; returns the seconds."""
    sel = selectors.DefaultSelector()
    for s in streams:
        s.sock.setblocking(False)
        sel.register(s.sock, selectors.EVENT_READ, s)
    t0 = time.perf_counter()
    deadline = t0 + timeout_s
    while not all(s.done for s in streams):
        for s in streams:
            s.refill()
            while s.out:
                try:
                    sent = s.sock.send(s.out)
                except BlockingIOError:
                    break
                s.out = s.out[sent:]
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if s.out else 0)
            sel.modify(s.sock, events, s)
        for key, mask in sel.select(1.0):
            s = key.data
            if mask & selectors.EVENT_READ:
                try:
                    data = s.sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    raise RuntimeError("the server closed the connection")
                n = s.count_replies(data)
                s.in_flight -= n
                s.acked += n
        if time.perf_counter() > deadline:
            raise RuntimeError(f"timed out: {[s.acked for s in streams]} of {[len(s.frames) for s in streams]}")
    elapsed = time.perf_counter() - t0
    sel.close()
    return elapsed


# ---- velamq ------------------------------------------------------------------------------------


def velamq_frames(producer_id: int, count: int, size: int, batch: int, producer_name: str) -> list[bytes]:
    """`count` SEND frames, sequence ids 0.., each entry one message of `size` bytes (or a batch);
    built by `velamq perf produce --lean`'s SendFrames."""
    payload = os.urandom(size)
    body = build_batch([(pb.SingleMessageMetadata(), payload) for _ in range(batch)]) if batch > 1 else payload
    frames = SendFrames(producer_id, producer_name, body, batch)
    publish_time = int(time.time() * 1000)
    return [frames.frame(seq, publish_time) for seq in range(count)]


def _read_command(sock: socket.socket) -> pb.BaseCommand:
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + _U32.unpack_from(buf)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the broker closed the connection")
        buf += chunk
    _total, size = _HEADER.unpack_from(buf)
    command = pb.BaseCommand()
    command.ParseFromString(buf[8:8 + size])
    return command


def velamq_connect(host: str, port: int, topic: str, producer_id: int) -> tuple[socket.socket, str]:
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect_command("lean-publish"))
    reply = _read_command(sock)
    if reply.type != T.CONNECTED:
        raise RuntimeError(f"CONNECT answered {reply}")
    sock.sendall(producer_command(topic, producer_id, request_id=1))
    reply = _read_command(sock)
    if reply.type != T.PRODUCER_SUCCESS:
        raise RuntimeError(f"PRODUCER answered {reply}")
    return sock, reply.producer_success.producer_name


def create_subscription(host: str, port: int, topic: str, name: str) -> None:
    """A durable subscription on `topic`, its consumer gone again (as pulsar-perf and
    produce_consume.py leave one before producing)."""
    sock = socket.create_connection((host, port))
    sock.sendall(connect_command("lean-publish"))
    if _read_command(sock).type != T.CONNECTED:
        raise RuntimeError("CONNECT refused")
    command = pb.BaseCommand(type=T.SUBSCRIBE)
    sub = command.subscribe
    sub.topic, sub.subscription, sub.subType = topic, name, pb.CommandSubscribe.Exclusive
    sub.consumer_id, sub.request_id = 1, 1
    sock.sendall(encode_command(command))
    if _read_command(sock).type != T.SUCCESS:
        raise RuntimeError("SUBSCRIBE refused")
    sock.close()


def msg_in_counter(admin_url: str, topic: str) -> int:
    url = f"{admin_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=30) as response:
        return int(json.load(response)["msgInCounter"])


# ---- runs --------------------------------------------------------------------------------------


@dataclass
class Run:
    seconds: float
    messages: int
    server_cpu_s: float
    threads: list[float] = field(default_factory=list)  # loop first, then the others by CPU
    loop_system_s: float = 0.0  # the loop thread's system time (in threads[0])
    client_cpu_s: float = 0.0  # this process's (the load generator's)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def us_per_message(self) -> float:
        return self.server_cpu_s / self.messages * 1e6


def timed(pid: int, streams: list[Stream], messages: int) -> Run:
    before = thread_cpu_s(pid)
    loop_before = _stat_user_system_s(f"/proc/{pid}/task/{pid}/stat")
    client_before = time.process_time()
    seconds = drive(streams)
    client_cpu_s = time.process_time() - client_before
    loop_after = _stat_user_system_s(f"/proc/{pid}/task/{pid}/stat")
    after = thread_cpu_s(pid)
    per_thread = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    loop = per_thread.pop(pid, 0.0)
    others = sorted(per_thread.values(), reverse=True)
    loop_system = loop_after[1] - loop_before[1]
    return Run(seconds, messages, loop + sum(others), [loop, *others], loop_system, client_cpu_s)


def velamq_run(broker_port: int, admin_url: str, pid: int, args: argparse.Namespace, connections: int,
               profile: str | None = None) -> Run:
    topic = f"lean-{uuid.uuid4().hex[:10]}"
    full = f"persistent://public/default/{topic}"
    entries = args.messages // args.batch // connections
    if args.subscribe:
        create_subscription("127.0.0.1", broker_port, full, "lean")
    streams = []
    for c in range(connections):
        sock, name = velamq_connect("127.0.0.1", broker_port, full, c + 1)
        frames = velamq_frames(c + 1, entries, args.size, args.batch, name)
        streams.append(Stream(sock, frames, args.window, args.chunk, ReceiptCounter(sock.sendall)))
    spy = py_spy_path()
    with (recording(spy, pid, profile, gil_only=args.profile == "gil") if profile and spy
          else contextlib.nullcontext()):
        run = timed(pid, streams, entries * connections * args.batch)
    for s in streams:
        s.sock.close()
    stored = msg_in_counter(admin_url, topic)
    if stored != entries * connections * args.batch:
        raise RuntimeError(f"msgInCounter {stored}, receipts for {entries * connections * args.batch} messages")
    return run


def nats_run(port: int, pid: int, args: argparse.Namespace, connections: int, messages: int) -> Run:
    stream_name = f"LEAN{uuid.uuid4().hex[:8]}"
    subject = f"lean.{stream_name}"
    control = nats_connect(port)
    created = nats_request(control, f"$JS.API.STREAM.CREATE.{stream_name}",
                            json.dumps({"name": stream_name, "subjects": [subject], "storage": "file"}).encode())
    if "error" in created:
        raise RuntimeError(f"stream not created: {created}")
    count = messages // connections
    payload = os.urandom(args.size)
    streams = []
    for c in range(connections):
        sock = nats_connect(port)
        inbox = f"_INBOX.lean{c}"
        sock.sendall(f"SUB {inbox} 1\r\nPING\r\n".encode())
        while b"PONG" not in sock.recv(65536):
            pass
        frame = f"PUB {subject} {inbox} {len(payload)}\r\n".encode() + payload + b"\r\n"
        streams.append(Stream(sock, [frame] * count, args.window, args.chunk, NatsAckCounter(sock)))
    run = timed(pid, streams, count * connections)
    for s in streams:
        s.sock.close()
    info = nats_request(control, f"$JS.API.STREAM.INFO.{stream_name}", b"")
    state = info.get("state")
    stored = state.get("messages") if isinstance(state, dict) else None
    control.close()
    if stored != count * connections:
        raise RuntimeError(f"the stream holds {stored} messages, acks for {count * connections}")
    return run


@contextlib.contextmanager
def velamq_broker(tree: str, sync_policy: str, config_file: str | None = None) -> Iterator[tuple[int, str, int]]:
    """(broker port, admin URL, pid) of a broker of the tree at `tree` (with a broker.conf of
    overrides, e.g. diskUsageThreshold=0.99 on a disk the default 95 % would make read-only)."""
    old, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = os.path.abspath(tree)
    # `python -m velamq` puts its working directory first on sys.path, before PYTHONPATH: the
    # broker starts in the tree's directory, or a run from another tree would import that one.
    os.chdir(tree)
    try:
        conf = Path(config_file).resolve() if config_file else None
        with run_broker(extra_args=["--sync-policy", sync_policy], config_file=conf) as b:
            os.chdir(cwd)
            assert b.pid is not None
            yield b.broker_port, b.admin_url, b.pid
    finally:
        os.chdir(cwd)
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def profiled(name: str, path: str, policy: str, connections: int, args: argparse.Namespace) -> str:
    """A run of its own under py-spy: the top frames as a markdown table."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "profile.txt")
        with velamq_broker(path, policy, args.broker_conf) as (port, admin_url, pid):
            velamq_run(port, admin_url, pid, args, connections, out)
        with open(out) as f:
            samples, lines = top_table(f.read(), args.top)
    what = "samples of the thread holding the GIL" if args.profile == "gil" else "samples, every thread, waits included"
    return f"#### {name} {policy} {connections} conn: {samples} {what}\n\n" + "\n".join(lines)


def median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.us_per_message)[len(runs) // 2]


Result = tuple[str, str, int, Run]  # (server, setting, connections, the median run)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000, help="messages per run (all connections)")
    ap.add_argument("--size", type=int, default=100, help="payload bytes per message")
    ap.add_argument("--batch", type=int, default=1, help="messages per entry (1: unbatched)")
    ap.add_argument("--window", type=int, default=5000, help="sends in flight per connection")
    ap.add_argument("--chunk", type=int, default=1000, help="frames per write at most")
    ap.add_argument("--subscribe", action="store_true",
                    help="leave a durable subscription (no consumer) on each topic before publishing")
    ap.add_argument("--runs", type=int, default=3, help="runs per setting (the median is printed)")
    ap.add_argument("--connections", default="1,4", help="connection counts")
    ap.add_argument("--policies", default="fsync,none", help="velamq --sync-policy values")
    ap.add_argument("--tree", action="append", default=[],
                    help="NAME=PATH: a velamq source tree to start brokers from (repeatable; default: this one)")
    ap.add_argument("--broker-conf", help="a broker.conf of overrides for every velamq broker")
    ap.add_argument("--profile", choices=("all", "gil"),
                    help="sample each tree's first velamq run with py-spy --threads (gil: --gil too) and print "
                         "the top frames (the profiler costs the broker CPU: those runs' figures are not kept)")
    ap.add_argument("--top", type=int, default=20, help="functions listed per profile")
    ap.add_argument("--nats-sync-messages", type=int, default=20_000,
                    help="messages per run with sync_interval: always (a few thousand per second)")
    ap.add_argument("--nats", default=shutil.which("nats-server") or "", help="nats-server binary ('' to skip)")
    return ap


def velamq_results(args: argparse.Namespace, trees: list[list[str]], conns: list[int],
                   profiles: list[str]) -> list[Result]:
    """Every policy and connection count against every tree, runs alternating between the trees
    (so they see the same load); with --profile, one extra profiled run per tree and setting."""
    results: list[Result] = []
    for policy in [p for p in args.policies.split(",") if p]:
        for c in conns:
            per_tree: dict[str, list[Run]] = {name: [] for name, _ in trees}
            for _ in range(args.runs):
                for name, path in trees:
                    if args.profile and not per_tree[name]:
                        profiles.append(profiled(name, path, policy, c, args))
                    with velamq_broker(path, policy, args.broker_conf) as (port, admin_url, pid):
                        per_tree[name].append(velamq_run(port, admin_url, pid, args, c))
                    last = per_tree[name][-1]
                    print(f"  velamq {name} {policy} {c} conn: {last.rate:,.0f} msg/s, "
                          f"{last.us_per_message:.1f} µs", file=sys.stderr, flush=True)
            for name, _ in trees:
                results.append((f"velamq ({name})", f"--sync-policy {policy}", c, median_run(per_tree[name])))
    return results


def nats_results(args: argparse.Namespace, conns: list[int]) -> list[Result]:
    results: list[Result] = []
    for sync_always, label in ((False, "default (background sync)"), (True, "sync_interval: always")):
        messages = args.nats_sync_messages if sync_always else args.messages
        for c in conns:
            runs = []
            for _ in range(args.runs):
                with nats_server(args.nats, sync_always) as (port, pid):
                    runs.append(nats_run(port, pid, args, c, messages))
                print(f"  nats {label} {c} conn: {runs[-1].rate:,.0f} msg/s, {runs[-1].us_per_message:.1f} µs",
                      file=sys.stderr, flush=True)
            results.append(("NATS JetStream", label, c, median_run(runs)))
    return results


def report(args: argparse.Namespace, results: list[Result], profiles: list[str],
           load_before: tuple[float, float, float], load_after: tuple[float, float, float]) -> None:
    facts = machine_facts(["protobuf", "uvloop"])
    if args.nats:
        facts.append(("nats-server", nats_version(args.nats)))
    print(facts_and_load(facts, load_before, load_after))
    print(f"- {args.messages:,} messages of {args.size} bytes per run, {args.batch} per entry, "
          f"window {args.window} per connection, median of {args.runs} runs by server CPU per message\n")
    print("| server | setting | conns | msg/s | server CPU µs/msg | main thread µs (system) | other threads µs "
          "| generator µs/msg |")
    print("|---|---|---|---|---|---|---|---|")
    for server, setting, c, run in results:
        loop_us = run.threads[0] / run.messages * 1e6
        loop_sys_us = run.loop_system_s / run.messages * 1e6
        others = " / ".join(f"{t / run.messages * 1e6:.1f}" for t in run.threads[1:4])
        print(f"| {server} | {setting} | {c} | {run.rate:,.0f} | {run.us_per_message:.2f} "
              f"| {loop_us:.2f} ({loop_sys_us:.2f}) | {others} | {run.client_cpu_s / run.messages * 1e6:.2f} |")
    for profile in profiles:
        print(f"\n{profile}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [t.split("=", 1) for t in args.tree] or [["this", here]]
    conns = [int(c) for c in args.connections.split(",") if c]
    load_before = os.getloadavg()
    profiles: list[str] = []
    results = velamq_results(args, trees, conns, profiles)
    if args.nats and args.batch == 1:
        results += nats_results(args, conns)
    report(args, results, profiles, load_before, os.getloadavg())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
