"""Soak: does one broker keep serving, and lose nothing, under everything at once? (issue 16)

One run of N minutes. A normal client (official pulsar-client: one producer at a steady rate, one
consumer acknowledging) runs all along, while the phases below take turns:

    steady   nothing else
    fuzz     a worker process sends fuzzed frames: random commands with random fields, strings
             that are not UTF-8, garbage protobuf, truncated and oversized frames (a pool of
             frames is built first, then sent round and round; a closed connection is reopened)
    storm    a worker process opens connections (CONNECT each) up to the cap and beyond, holds
             them a moment, closes them, again and again
    slow     a worker process subscribes with 1 000 000 permits and never reads its socket
    kill     kill -9 of the broker at random moments, then a restart on the same data dir

At the end every message the normal client had acknowledged is read back from the topic.
Printed: kill rounds survived, acknowledged messages lost (must be 0), fuzzed frames sent,
peak connections, peak RSS against the memory budget, p50/p99 send latency of the normal client
in each phase, and the machine.

    .venv/bin/python benchmarks/soak.py --minutes 12
    .venv/bin/python benchmarks/soak.py --minutes 15 --kills-per-phase 20 --phase-seconds 20

The broker runs with --memory (default 256M) and the default fsync policy.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import pulsar
from _machine import machine_facts

from velamq.protocol import FrameDecoder, encode_command
from velamq.protocol import _pulsar_api_pb2 as pb
from velamq.testing import BrokerProcess

T = pb.BaseCommand
TOPIC = "persistent://public/default/soak"
PHASES = ("steady", "fuzz", "storm", "slow", "kill")


# ---- workers (child processes: their own descriptors, their own cores' share) ---------------------


def _command(kind: int, field: str, **values: Any) -> bytes:
    message = pb.BaseCommand(type=kind)
    getattr(message, field).SetInParent()
    for key, value in values.items():
        setattr(getattr(message, field), key, value)
    return encode_command(message)


def _connect() -> bytes:
    return _command(T.CONNECT, "connect", client_version="soak", protocol_version=20)


def _fuzz_frames(rng: random.Random, count: int) -> list[bytes]:
    """A pool of fuzzed frames, each well framed: random commands with random fields (refused,
    ignored or closing the connection, as the broker sees fit), some with text that is not UTF-8,
    and garbage protobuf."""
    names = [f"persistent://public/default/fuzz-{i}" for i in range(4)]
    frames = []
    # Mostly what a broker handles (refused or ignored when it makes no sense), some of what only a
    # broker sends (which closes the connection); never PING/PONG: a PONG marks a batch as taken.
    handled = [T.PRODUCER, T.SUBSCRIBE, T.FLOW, T.ACK, T.LOOKUP, T.PARTITIONED_METADATA, T.CLOSE_PRODUCER,
               T.CLOSE_CONSUMER, T.GET_TOPICS_OF_NAMESPACE, T.SEEK, T.GET_LAST_MESSAGE_ID, T.CONSUMER_STATS,
               T.REDELIVER_UNACKNOWLEDGED_MESSAGES, T.UNSUBSCRIBE, T.GET_SCHEMA]
    others = [t for t in T.Type.values() if t not in (*handled, T.CONNECT, T.PING, T.PONG)]
    field_of_type = {f.number: f.name for f in T.DESCRIPTOR.fields if f.number > 1}  # as the codec
    for _ in range(count):
        roll = rng.random()
        if roll < 0.98:
            kind = rng.choice(handled if rng.random() < 0.99 else others)
            message = pb.BaseCommand(type=kind)
            field = field_of_type.get(kind)
            if field is not None:
                _fill(getattr(message, field), rng, names)
            body_bytes = message.SerializePartialToString()
            data = struct.pack(">II", len(body_bytes) + 4, len(body_bytes)) + body_bytes
            if rng.random() < 0.1 and b"fuzz-" in data:  # the same frame, its text not UTF-8
                data = data.replace(b"fuzz-", b"\xff\xfezz-", 1)  # same length: framing intact
            frames.append(data)
        else:
            garbage = rng.randbytes(rng.randrange(1, 200))
            frames.append(struct.pack(">II", len(garbage) + 4, len(garbage)) + garbage)
    return frames


def _fill(message: Any, rng: random.Random, names: list[str], depth: int = 0) -> None:
    """Random values: every required field, half of the optional ones, nested messages too."""
    message.SetInParent()
    for f in message.DESCRIPTOR.fields:
        if f.is_repeated or not (f.is_required or rng.random() < 0.5):
            continue
        if f.type == f.TYPE_MESSAGE:
            if depth < 3:
                _fill(getattr(message, f.name), rng, names, depth + 1)
        elif f.type == f.TYPE_ENUM:
            setattr(message, f.name, rng.choice(f.enum_type.values).number)
        elif f.type == f.TYPE_STRING:
            setattr(message, f.name, rng.choice([*names, "", "bad//name", "é☃"]))
        elif f.type == f.TYPE_BYTES:
            setattr(message, f.name, rng.randbytes(rng.randrange(0, 16)))
        elif f.type == f.TYPE_BOOL:
            setattr(message, f.name, rng.random() < 0.5)
        elif f.type in (f.TYPE_DOUBLE, f.TYPE_FLOAT):
            setattr(message, f.name, rng.random())
        else:
            setattr(message, f.name, rng.randrange(0, 50))


def _fuzz_ender(rng: random.Random) -> bytes:
    """What ends a fuzz connection: an oversized frame header, or a frame cut short."""
    if rng.random() < 0.5:
        return struct.pack(">II", rng.choice([1 << 30, 64 << 20, 6 << 20, 5 << 20]), 10)
    return _command(T.PING, "ping")[: rng.randrange(1, 8)]


def _pong_or_close(sock: socket.socket) -> bool:
    """Reads the broker's replies until its PONG (True) or the end of the connection (False)."""
    decoder = FrameDecoder(64 << 20)
    sock.settimeout(5)
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return False
        if any(frame.command.type == T.PONG for frame in decoder.feed(data)):
            return True


def fuzz_worker(port: int, seed: int) -> None:
    """Counts the frames the broker has taken: a batch counts once the PING sent after it is
    answered (frames of a batch the broker closed the connection on are not counted)."""
    rng = random.Random(seed)
    pool = _fuzz_frames(rng, 20_000)
    ping = _command(T.PING, "ping")
    sent = 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.is_set():
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            time.sleep(0.1)  # the broker is being restarted
            continue
        try:
            sock.sendall(_connect())
            sock.settimeout(2)
            if not sock.recv(4096):  # refused (over a cap): not a connection to count frames on
                continue
            while not stop.is_set():
                batch = rng.randrange(1, 20)
                start = rng.randrange(len(pool) - batch)
                sock.settimeout(2)
                sock.sendall(b"".join(pool[start : start + batch]) + ping)
                if not _pong_or_close(sock):
                    break
                sent += batch
                if rng.random() < 0.05:
                    sock.sendall(_fuzz_ender(rng))  # and a new connection
                    break
        except OSError:
            pass  # closed by the broker for a bad frame
        finally:
            sock.close()
    print(sent, flush=True)


def storm_worker(port: int, per_round: int) -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    opened = 0
    hello = _connect()
    while not stop.is_set():
        held = []
        for _ in range(per_round):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.sendall(hello)
                held.append(s)
            except OSError:
                break
        opened += len(held)
        stop.wait(1.0)
        for s in held:
            s.close()
    print(opened, flush=True)


def slow_worker(port: int) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(_connect() + _command(T.SUBSCRIBE, "subscribe", topic=TOPIC, subscription="never-reads",
                                       subType=0, consumer_id=1, request_id=1))
    decoder, frames = FrameDecoder(1 << 20), []
    while len(frames) < 2:
        frames += decoder.feed(sock.recv(4096))
    sock.sendall(_command(T.FLOW, "flow", consumer_id=1, messagePermits=1_000_000))
    stop.wait()
    sock.close()
    print(0, flush=True)


# ---- the run ----------------------------------------------------------------------------------------


def rss_bytes(pid: int | None) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, TypeError):
        pass
    return 0


def metric(admin_url: str, name: str) -> float:
    try:
        text = urllib.request.urlopen(f"{admin_url}/metrics", timeout=5).read().decode()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Watch:
    """Samples the broker's RSS and open connections in a thread (across restarts)."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.peak_rss = 0
        self.peak_connections = 0.0
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        ticks = 0
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, rss_bytes(self.broker.pid))
            if ticks % 10 == 0:
                self.peak_connections = max(self.peak_connections,
                                            metric(self.broker.admin_url, "velamq_broker_connections_open_peak"))
            ticks += 1
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()


class NormalClient:
    """The client whose experience is measured: a producer at a steady rate, a consumer acking."""

    def __init__(self, service_url: str, rate: int, size: int) -> None:
        self.client = pulsar.Client(service_url, operation_timeout_seconds=30,
                                    logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        self.producer = self.client.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=60_000,
                                                    block_if_queue_full=True)
        self.consumer = self.client.subscribe(TOPIC, "normal")
        self.phase = "steady"
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.acked: set[int] = set()
        self.failed = 0
        self._rate, self._size = rate, size
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]
        for t in self._threads:
            t.start()

    def _produce(self) -> None:
        seq, interval, next_at = 0, 1 / self._rate, time.monotonic()
        while not self._stop.is_set():
            started, phase = time.monotonic(), self.phase

            def done(result: Any, _mid: Any, seq: int = seq, started: float = started, phase: str = phase) -> None:
                with self._lock:
                    if result == pulsar.Result.Ok:
                        self.acked.add(seq)
                        self.latencies[phase].append(time.monotonic() - started)
                    else:
                        self.failed += 1

            self.producer.send_async(b"%012d" % seq + b"x" * (self._size - 12), done)
            seq += 1
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                self.consumer.acknowledge(self.consumer.receive(timeout_millis=200))
            except Exception:
                pass

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        self.producer.flush()

    def lost(self) -> int:
        """Acknowledged messages missing from the topic, read from its start."""
        reader = self.client.create_reader(TOPIC, pulsar.MessageId.earliest, receiver_queue_size=5000)
        found: set[int] = set()
        while reader.has_message_available():
            found.add(int(reader.read_next(timeout_millis=30_000).data()[:12]))
        reader.close()
        return len(self.acked - found)


class Worker:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", *args], stdout=subprocess.PIPE, text=True)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        return int(out.strip() or 0)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace) -> None:
    data = Path(args.data_dir or f"/tmp/velamq-soak-{os.getpid()}") / "data"
    data.parent.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(data, ["--memory", args.memory], log_path=data.parent / "broker.log")
    broker.start()
    watch = Watch(broker)
    normal = NormalClient(broker.service_url, args.rate, args.size)
    rng = random.Random(args.seed)
    kills = survived = fuzzed = stormed = 0
    phase_time: dict[str, float] = defaultdict(float)
    ends = time.monotonic() + args.minutes * 60
    cycle = 0
    while time.monotonic() < ends:
        for phase in PHASES:
            if time.monotonic() >= ends:
                break
            normal.phase = phase
            began = time.monotonic()
            if phase == "kill":
                for _ in range(args.kills_per_phase):
                    time.sleep(rng.uniform(0.5, 3.0))
                    before = len(normal.acked)
                    broker.kill()
                    kills += 1
                    broker.start()
                    deadline = time.monotonic() + 60
                    while len(normal.acked) <= before and time.monotonic() < deadline:
                        time.sleep(0.05)  # survived: the normal client writes again after the restart
                    survived += len(normal.acked) > before
            else:
                port = str(broker.broker_port)
                worker = (
                    Worker("fuzz", port, str(args.seed + cycle)) if phase == "fuzz"
                    else Worker("storm", port, str(args.storm)) if phase == "storm"
                    else Worker("slow", port) if phase == "slow"
                    else None
                )
                time.sleep(args.phase_seconds)
                if worker is not None:
                    count = worker.stop()
                    fuzzed += count if phase == "fuzz" else 0
                    stormed += count if phase == "storm" else 0
            phase_time[phase] += time.monotonic() - began
        cycle += 1
    normal.stop()
    watch.stop()
    lost = normal.lost()
    normal.client.close()
    broker.stop()
    log_bytes = (data.parent / "broker.log").stat().st_size
    budget = _size(args.memory)

    print(f"soak: {args.minutes} min, {cycle} cycles of {', '.join(PHASES)}; broker --memory {args.memory}")
    print("| figure | value |\n|---|---|")
    for name, value in [
        ("kill rounds survived", f"{survived} of {kills}"),
        ("acknowledged messages", f"{len(normal.acked):,}"),
        ("acknowledged messages lost", f"{lost}"),
        ("sends failed (not acknowledged, client told)", f"{normal.failed}"),
        ("fuzzed frames sent", f"{fuzzed:,}"),
        ("storm connections opened", f"{stormed:,}"),
        ("peak connections (broker)", f"{watch.peak_connections:.0f}"),
        ("peak RSS / budget", f"{watch.peak_rss / 2**20:.0f} MiB / {budget / 2**20:.0f} MiB"),
        ("broker log", f"{log_bytes / 1024:.0f} KiB"),
    ]:
        print(f"| {name} | {value} |")
    print("\n| phase | seconds | sends acked | p50 ms | p99 ms |\n|---|---|---|---|---|")
    for phase in PHASES:
        lat = normal.latencies.get(phase, [])
        print(f"| {phase} | {phase_time[phase]:.0f} | {len(lat):,} | {percentile(lat, 0.5) * 1000:.1f} "
              f"| {percentile(lat, 0.99) * 1000:.1f} |")
    print()
    for key, value in machine_facts(["pulsar-client"]):
        print(f"{key}: {value}")


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=12)
    parser.add_argument("--phase-seconds", type=float, default=30)
    parser.add_argument("--kills-per-phase", type=int, default=5)
    parser.add_argument("--rate", type=int, default=500, help="messages/s of the normal producer")
    parser.add_argument("--size", type=int, default=1024, help="bytes per message of the normal producer")
    parser.add_argument("--storm", type=int, default=3000, help="connections per storm round")
    parser.add_argument("--memory", default="256M")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--data-dir")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "fuzz":
            fuzz_worker(int(rest[0]), int(rest[1]))
        elif kind == "storm":
            storm_worker(int(rest[0]), int(rest[1]))
        else:
            slow_worker(int(rest[0]))
        return
    run(args)


if __name__ == "__main__":
    main()
