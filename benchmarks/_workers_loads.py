"""The loads of benchmarks/workers.py, each against a running broker of one or several workers.

Every load is driven from this process with lean_publish's generator (pre-encoded frames written
in large writes over plain non-blocking sockets, replies counted by their first bytes) and
lean_consume's consumers, so the generator costs little of the cores it measures. Every
connection that produces or consumes goes to the worker that owns its topic: a LOOKUP on the
service port first, then a connection to the URL it answers, as a Pulsar client does.
"""

from __future__ import annotations

import socket
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import lean_consume
import lean_publish as lean

from velamq.cli._perf_frames import PONG, ReceiptCounter, connect_command, producer_command, scan_frames
from velamq.protocol import encode_command, pb
from velamq.testing import BrokerProcess

T = pb.BaseCommand
NAMESPACE = "public/default"
# A frame's command starts with 0x08 (field 1, the type): this prefix never matches, so that
# scan_frames hands every frame to its `other` callback.
_EVERY_FRAME = b"\x00"
Address = tuple[str, int]


# ---- the broker's processes ---------------------------------------------------------------------


def wait_for_workers(broker: BrokerProcess, workers: int, timeout_s: float = 30.0) -> None:
    """The supervisor says it is ready after every worker did; their lines may still be on the way."""
    deadline = time.monotonic() + timeout_s
    while workers > 1 and len(broker.worker_pids()) < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(broker.worker_pids())} of {workers} workers said they were ready")
        time.sleep(0.05)


def broker_pids(broker: BrokerProcess) -> dict[str, int]:
    """Every process of the broker: the one `velamq standalone` (alone, or the supervisor) and
    each worker (from its `velamq worker K of N ready: pid=...` line)."""
    assert broker.pid is not None
    workers = broker.worker_pids()
    pids = {"supervisor" if workers else "broker": broker.pid}
    for k, pid in sorted(workers.items()):
        pids[f"worker {k}"] = pid
    return pids


def cpu_by_process(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU seconds of each process, every thread (/proc/PID/stat)."""
    return {name: lean._stat_cpu_s(f"/proc/{pid}/stat") for name, pid in pids.items()}


@dataclass
class Measured:
    seconds: float
    units: int  # messages delivered or published, or topics created
    entries: int  # what the broker stored or sent: entries (a batch is one), topics
    cpu_s: dict[str, float] = field(default_factory=dict)  # per broker process
    generator_cpu_s: float = 0.0

    @property
    def rate(self) -> float:
        return self.units / self.seconds

    @property
    def broker_cpu_s(self) -> float:
        return sum(self.cpu_s.values())

    @property
    def us_per_entry(self) -> float:
        return self.broker_cpu_s / self.entries * 1e6


def timed(broker: BrokerProcess, units: int, entries: int, run: Callable[[], object]) -> Measured:
    """Runs `run` with the CPU of every broker process and of this process measured around it."""
    pids = broker_pids(broker)
    before, client_before = cpu_by_process(pids), time.process_time()
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    after, client_cpu = cpu_by_process(pids), time.process_time() - client_before
    return Measured(seconds, units, entries, {k: after[k] - before[k] for k in pids}, client_cpu)


# ---- connections and lookups ---------------------------------------------------------------------


def connect(address: Address) -> socket.socket:
    """A CONNECTed binary-protocol connection."""
    sock = socket.create_connection(address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(connect_command("workers-bench"))
    reply = lean._read_command(sock)
    if reply.type != T.CONNECTED:
        raise RuntimeError(f"CONNECT answered {reply}")
    return sock


def lookup_frame(topic: str, request_id: int) -> bytes:
    command = pb.BaseCommand(type=T.LOOKUP)
    command.lookupTopic.topic = topic
    command.lookupTopic.request_id = request_id
    return encode_command(command)


class Replies:
    """Counts the replies of pipelined requests on one connection; each is decoded and handed
    to `on_reply`; a PING is answered; an ERROR or any other type fails the run."""

    def __init__(self, sock: socket.socket, expected: int, on_reply: Callable[[pb.BaseCommand], None]) -> None:
        self._sock = sock
        self._expected = expected
        self._on_reply = on_reply
        self._buf = bytearray()
        self._count = 0

    def __call__(self, data: bytes) -> int:
        self._buf += data
        self._count = 0
        offset, _, _ = scan_frames(self._buf, _EVERY_FRAME, self._one)
        del self._buf[:offset]
        return self._count

    def _one(self, body: bytes) -> None:
        command = pb.BaseCommand.FromString(body)
        if command.type == T.PING:
            self._sock.sendall(PONG)
            return
        if command.type != self._expected:
            raise RuntimeError(f"unexpected reply: {command}")
        self._count += 1
        self._on_reply(command)


def _address(url: str) -> Address:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def lookup_all(service: Address, topics: list[str], connections: int, window: int) -> dict[str, Address]:
    """The owner of every topic: LOOKUPs pipelined over `connections` connections to the service
    port (the kernel hands each to one worker: any worker answers for any topic)."""
    owners: dict[str, Address] = {}
    streams = []
    for c in range(connections):
        names = topics[c::connections]
        sock = connect(service)

        def found(reply: pb.BaseCommand, names: list[str] = names) -> None:
            r = reply.lookupTopicResponse
            if r.response != pb.CommandLookupTopicResponse.Connect or not r.authoritative:
                raise RuntimeError(f"LOOKUP answered {reply}")
            owners[names[r.request_id]] = _address(r.brokerServiceUrl)

        frames = [lookup_frame(name, i) for i, name in enumerate(names)]
        streams.append(lean.Stream(sock, frames, window, window, Replies(sock, T.LOOKUP_RESPONSE, found)))
    lean.drive(streams)
    for s in streams:
        s.sock.close()
    return owners


def spread_topics(broker: BrokerProcess, count: int, workers: int, prefix: str) -> dict[str, Address]:
    """`count` new topic names, `count / workers` owned by each worker (names drawn until each
    has its share: with names taken at random, the hash would split them unevenly and a run
    would end at the pace of the busiest worker), each with its owner's address."""
    tag = uuid.uuid4().hex[:8]
    candidates = [f"persistent://{NAMESPACE}/{prefix}-{tag}-{i:04d}" for i in range(count * 40)]
    owners = lookup_all(("127.0.0.1", broker.broker_port), candidates, 1, 1000)
    share = count // workers
    chosen: dict[str, Address] = {}
    taken: dict[Address, int] = {}
    for name in candidates:
        owner = owners[name]
        if taken.get(owner, 0) < share:
            taken[owner] = taken.get(owner, 0) + 1
            chosen[name] = owner
    if len(chosen) != share * workers or len(taken) != workers:
        raise RuntimeError(f"could not spread {count} topics over {workers} workers: {taken}")
    return chosen


# ---- the loads ---------------------------------------------------------------------------------


@dataclass
class LoadOptions:
    topics: int = 16
    size: int = 100
    messages: int = 160_000  # unbatched, all topics
    batched_messages: int = 3_200_000
    batch: int = 100
    window: int = 2000  # unbatched sends in flight per connection
    batched_window: int = 100  # batched entries in flight per connection
    fanout_messages: int = 32_000  # published first, then read by every subscription
    subscriptions: int = 10  # per topic
    consumer_window: int = 1000
    create_topics: int = 4000
    create_connections: int = 4  # per worker (and to the service port for the lookups)
    create_window: int = 200


def _produce_streams(topics: dict[str, Address], opts: LoadOptions, entries: int, batch: int,
                     window: int) -> list[lean.Stream]:
    streams = []
    for topic, owner in topics.items():
        sock, name = lean.velamq_connect(owner[0], owner[1], topic, 1)
        frames = lean.velamq_frames(1, entries, opts.size, batch, name)
        streams.append(lean.Stream(sock, frames, window, max(1, window // 4), ReceiptCounter(sock.sendall)))
    return streams


def _check_stored(broker: BrokerProcess, topics: dict[str, Address], messages: int) -> None:
    for topic in topics:
        stored = lean.msg_in_counter(broker.admin_url, topic.rsplit("/", 1)[1])
        if stored != messages:
            raise RuntimeError(f"{topic}: msgInCounter {stored}, receipts for {messages} messages")


def produce(broker: BrokerProcess, workers: int, opts: LoadOptions, batch: int) -> Measured:
    """One connection per topic to its owner, pre-encoded SENDs (`batch` messages per entry)."""
    topics = spread_topics(broker, opts.topics, workers, "wb-p")
    total = opts.messages if batch == 1 else opts.batched_messages
    entries = total // batch // opts.topics
    window = opts.window if batch == 1 else opts.batched_window
    streams = _produce_streams(topics, opts, entries, batch, window)
    measured = timed(broker, entries * batch * len(topics), entries * len(topics), lambda: lean.drive(streams))
    for s in streams:
        s.sock.close()
    _check_stored(broker, topics, entries * batch)
    return measured


def fanout(broker: BrokerProcess, workers: int, opts: LoadOptions) -> Measured:
    """The topics are filled first (not timed); then `subscriptions` subscriptions per topic,
    each a consumer on a connection of its own to the owner, read everything from the start."""
    topics = spread_topics(broker, opts.topics, workers, "wb-f")
    entries = opts.fanout_messages // opts.topics
    fill = _produce_streams(topics, opts, entries, 1, opts.window)
    lean.drive(fill)
    for s in fill:
        s.sock.close()
    consumers = [
        lean_consume.subscribe(owner[1], topic, f"s{i}", entries, opts.consumer_window, 1)
        for topic, owner in topics.items() for i in range(opts.subscriptions)
    ]
    delivered = entries * len(topics) * opts.subscriptions
    measured = timed(broker, delivered, delivered, lambda: lean_consume.drive_all([], consumers))
    for c in consumers:
        c.sock.close()
    return measured


def create_topics(broker: BrokerProcess, opts: LoadOptions) -> Measured:
    """New topics as a client creates them by producing: a LOOKUP on the service port, then a
    PRODUCER on a connection to the owner (the topic is created and loaded), pipelined."""
    tag = uuid.uuid4().hex[:8]
    names = [f"persistent://{NAMESPACE}/wb-c-{tag}-{i:06d}" for i in range(opts.create_topics)]
    producers = {name: producer_command(name, i + 1, request_id=i + 1) for i, name in enumerate(names)}
    service = ("127.0.0.1", broker.broker_port)

    def run() -> None:
        owners = lookup_all(service, names, opts.create_connections, opts.create_window)
        by_owner: dict[Address, list[str]] = {}
        for name in names:
            by_owner.setdefault(owners[name], []).append(name)
        streams = []
        for owner, owned in by_owner.items():
            for c in range(opts.create_connections):
                mine = owned[c::opts.create_connections]
                sock = connect(owner)
                frames = [producers[name] for name in mine]
                replies = Replies(sock, T.PRODUCER_SUCCESS, lambda reply: None)
                streams.append(lean.Stream(sock, frames, opts.create_window, opts.create_window, replies))
        lean.drive(streams)
        for s in streams:
            s.sock.close()

    return timed(broker, len(names), len(names), run)
