"""Broker CPU per created topic, with a load that costs almost nothing (issue 22, scope 5).

Two ways a topic comes to exist, each against a fresh broker per run:

- **producer**: one plain connection sends PRODUCER commands for new topics (auto-creation),
  `--in-flight` at a time, each answered by PRODUCER_SUCCESS; then CLOSE_PRODUCER for each (timed
  apart: "close").
- **admin**: `PUT /admin/v2/persistent/public/default/<topic>` for new topics over a few
  keep-alive HTTP connections (`--admin-threads`).
- **client** (`--client-topics`, 0 by default): the whole path of a new user's topic as
  benchmarks/topics.py drives it: velamq's client subscribes, creates a producer, sends one message
  and closes both, `--in-flight` topics at a time over `--clients` client processes (each runs the
  client of the tree measured: with `--tree`, each build's broker with its own client).
- **commands** (`--commands`, 0 by default): the commands of that path one kind at a time, each
  pipelined for that many new topics on one connection: broker CPU per command of each kind, and
  their sum (_topic_commands.py). Steadier than the client path, whose figure also holds the
  clients' pattern of wake-ups and their processes on the same cores.

The broker's CPU (all threads, /proc) over each phase, divided by the topics; median of --runs,
load average before and after. `--tree NAME=PATH` (repeatable) measures builds side by side, runs
alternating; `--profile` records one extra run per tree under py-spy (GIL holder only) and
prints the top frames; `--profile-threads` does the same for every thread that is not waiting
(no --gil: SQLite, fsync and the storage threads show too), with each thread's share.

    .venv/bin/python benchmarks/topic_create.py --topics 5000
    .venv/bin/python benchmarks/topic_create.py --tree before=../old --tree after=.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator

import lean_publish as lean
import topics as topics_bench
from _machine import facts_and_load, machine_facts
from _pyspy import py_spy_path, recording, thread_shares, top_table
from _topic_commands import Replies, commands_phase, median_table

from velamq.cli._perf_frames import connect_command, producer_command
from velamq.protocol import encode_command, pb

T = pb.BaseCommand


def pipelined(sock: socket.socket, replies: Iterator[pb.BaseCommand], frames: list[bytes], wanted: int,
              in_flight: int) -> None:
    """Write `frames` keeping `in_flight` unanswered; every answer must be of type `wanted`."""
    sent = answered = 0
    while answered < len(frames):
        if sent < len(frames) and sent - answered < in_flight:
            n = min(in_flight - (sent - answered), len(frames) - sent)
            sock.sendall(b"".join(frames[sent:sent + n]))
            sent += n
            continue
        reply = next(replies)
        if reply.type != wanted:
            raise RuntimeError(f"expected {T.Type.Name(wanted)}, got {reply}")
        answered += 1


def producer_phase(port: int, pid: int, args: argparse.Namespace) -> tuple[float, float]:
    """(broker CPU s for the PRODUCERs, for the CLOSE_PRODUCERs)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(connect_command("topic-create"))
    replies = iter(Replies(sock))
    if next(replies).type != T.CONNECTED:
        raise RuntimeError("CONNECT refused")
    prefix = f"persistent://public/default/tc-{uuid.uuid4().hex[:8]}"
    opens = [producer_command(f"{prefix}-{i}", i + 1, i + 1) for i in range(args.topics)]
    closes = []
    for i in range(args.topics):
        command = pb.BaseCommand(type=T.CLOSE_PRODUCER)
        command.close_producer.producer_id, command.close_producer.request_id = i + 1, args.topics + i + 1
        closes.append(encode_command(command))
    before = lean.thread_cpu_s(pid)
    pipelined(sock, replies, opens, T.PRODUCER_SUCCESS, args.in_flight)
    middle = lean.thread_cpu_s(pid)
    pipelined(sock, replies, closes, T.SUCCESS, args.in_flight)
    after = lean.thread_cpu_s(pid)
    sock.close()
    return sum(middle.values()) - sum(before.values()), sum(after.values()) - sum(middle.values())


def admin_phase(admin_url: str, pid: int, args: argparse.Namespace) -> float:
    host, port = admin_url.split("//", 1)[1].split(":")
    prefix = f"/admin/v2/persistent/public/default/ta-{uuid.uuid4().hex[:8]}"

    def create(indexes: range) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        for i in indexes:
            conn.request("PUT", f"{prefix}-{i}", body=b"", headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status not in (200, 204):
                raise RuntimeError(f"PUT {prefix}-{i}: HTTP {response.status}")
        conn.close()

    n = args.admin_threads
    before = lean.thread_cpu_s(pid)
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        list(pool.map(create, [range(k, args.admin_topics, n) for k in range(n)]))
    return sum(lean.thread_cpu_s(pid).values()) - sum(before.values())


def client_phase(port: int, pid: int, args: argparse.Namespace, tree: str) -> float:
    """Broker CPU s for `--client-topics` topics created as topics.py creates them, by client
    processes running the client of `tree` (the broker's own tree: a build's figure is its broker
    with its client, and a client change shows in it)."""
    names = [f"persistent://public/default/tu-{uuid.uuid4().hex[:8]}-{i}" for i in range(args.client_topics)]
    per_process = max(1, args.in_flight // args.clients)
    url = f"pulsar://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--client-worker", url, str(per_process)],
                              stdin=subprocess.PIPE, env=env, text=True)
             for _ in range(args.clients)]
    before = lean.thread_cpu_s(pid)
    for k, p in enumerate(procs):
        assert p.stdin is not None
        p.stdin.write("\n".join(names[k::args.clients]))
        p.stdin.close()
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError(f"a client process failed (exit {p.returncode})")
    return sum(lean.thread_cpu_s(pid).values()) - sum(before.values())


def client_worker(url: str, in_flight: int) -> int:
    """One client process of the client phase: the topics named on stdin, as topics.py creates them."""
    topics_bench.create_process(url, sys.stdin.read().split("\n"), in_flight, None)
    return 0


Phases = tuple[float, float, float, float]


def one_run(path: str, args: argparse.Namespace, profile: str | None = None,
            gil_only: bool = True) -> tuple[Phases, dict[str, float]]:
    """(ms of broker CPU per topic: PRODUCER, CLOSE_PRODUCER, admin create, client path), and
    µs per command of each kind (--commands; empty without)."""
    with lean.velamq_broker(path, args.policy, args.broker_conf) as (port, admin_url, pid):
        spy = py_spy_path()
        with (recording(spy, pid, profile, gil_only=gil_only) if profile and spy else contextlib.nullcontext()):
            opened, closed = producer_phase(port, pid, args) if args.topics else (0.0, 0.0)
            admin = admin_phase(admin_url, pid, args) if args.admin_topics else 0.0
            client = client_phase(port, pid, args, path) if args.client_topics else 0.0
            commands = commands_phase(port, pid, args.commands, args.in_flight) if args.commands else {}
    return (opened / max(args.topics, 1) * 1e3, closed / max(args.topics, 1) * 1e3,
            admin / max(args.admin_topics, 1) * 1e3, client / max(args.client_topics, 1) * 1e3), commands


def main() -> int:
    if sys.argv[1:2] == ["--client-worker"]:
        return client_worker(sys.argv[2], int(sys.argv[3]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=5000, help="topics created by PRODUCER per run")
    ap.add_argument("--admin-topics", type=int, default=2000, help="topics created through the admin API per run")
    ap.add_argument("--client-topics", type=int, default=0,
                    help="topics created through velamq's client, as topics.py does, per run")
    ap.add_argument("--clients", type=int, default=2, help="client processes of the client phase")
    ap.add_argument("--commands", type=int, default=0,
                    help="new topics of the per-command phase (each kind of command pipelined on its own)")
    ap.add_argument("--in-flight", type=int, default=200)
    ap.add_argument("--admin-threads", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--broker-conf", help="a broker.conf of overrides for every broker")
    ap.add_argument("--policy", default="fsync")
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH (repeatable; default: this tree)")
    ap.add_argument("--profile", action="store_true", help="one extra py-spy run per tree (GIL holder)")
    ap.add_argument("--profile-threads", action="store_true",
                    help="one extra py-spy run per tree, every thread not waiting, with each thread's share")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [t.split("=", 1) for t in args.tree] or [["this", here]]
    load_before = os.getloadavg()
    profiles = []
    modes = [(True, "of the thread holding the GIL")] if args.profile else []
    modes += [(False, "of every thread not waiting")] if args.profile_threads else []
    for gil_only, what in modes:
        for name, path in trees:
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "profile.txt")
                one_run(path, args, out, gil_only)
                with open(out) as f:
                    raw = f.read()
            samples, lines = top_table(raw, args.top)
            threads = "" if gil_only else "threads: " + ", ".join(thread_shares(raw)) + "\n\n"
            profiles.append(f"#### {name}: {samples} samples {what}\n\n{threads}" + "\n".join(lines))
    results: dict[str, list[Phases]] = {name: [] for name, _ in trees}
    commands: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(args.runs):
        for name, path in trees:
            phases, per_command = one_run(path, args)
            results[name].append(phases)
            commands[name].append(per_command)
            print(f"  {name}: {phases} {sum(per_command.values()):.1f} µs", file=sys.stderr, flush=True)
            time.sleep(0.1)
    load_after = os.getloadavg()
    print(facts_and_load(machine_facts(["protobuf"]), load_before, load_after))
    print(f"- {args.topics} topics by PRODUCER ({args.in_flight} in flight), {args.admin_topics} by admin PUT "
          f"({args.admin_threads} connections), {args.client_topics} through velamq's client ({args.clients} "
          f"processes), {args.commands} by the per-command phase, --sync-policy {args.policy}, median of "
          f"{args.runs}\n")
    print("| build | PRODUCER on a new topic ms | CLOSE_PRODUCER ms | admin create ms | client path ms |")
    print("|---|---|---|---|---|")
    for name, _ in trees:
        columns = [sorted(r[i] for r in results[name])[len(results[name]) // 2] for i in range(4)]
        print(f"| {name} | " + " | ".join(f"{c:.3f}" for c in columns) + " |")
    if args.commands:
        print("\nBroker CPU per command, each kind pipelined on its own (" + f"{args.in_flight} in flight):\n")
        print("\n".join(median_table(commands)))
    for profile in profiles:
        print(f"\n{profile}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
