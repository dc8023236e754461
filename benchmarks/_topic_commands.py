"""The commands of a topic's creation one kind at a time: broker CPU per command (topic_create.py
--commands).

A client creating a topic as benchmarks/topics.py does sends, per topic, PARTITIONED_METADATA and
LOOKUP, SUBSCRIBE (which creates the topic), FLOW, PARTITIONED_METADATA and LOOKUP again for the
producer, PRODUCER, SEND (its message is dispatched to the consumer), CLOSE_PRODUCER and
CLOSE_CONSUMER. Here each kind is sent for N new topics on one connection, pipelined
(`in_flight` unanswered), before the next kind starts, and the broker's CPU (every thread, from
/proc) over each kind is divided by N. A kind's figure is then its own cost with almost nothing of
the client's pattern in it (one read carries many commands): the sum is what the broker's work
costs when the wake-ups are shared, and the client path's figure minus the sum is what the pattern
costs (more wake-ups with less in each, and the clients' processes on the same cores).
"""

from __future__ import annotations

import itertools
import socket
import time
import uuid
from collections.abc import Callable, Iterator

import lean_publish as lean

from velamq.cli._perf_frames import SendFrames, connect_command, whole_command
from velamq.protocol import encode_command, pb

T = pb.BaseCommand
_PONG_TO_BROKER = encode_command(pb.BaseCommand(type=T.PONG))
_PING = encode_command(pb.BaseCommand(type=T.PING))

KINDS = (
    "PARTITIONED_METADATA (new)", "LOOKUP (new)", "SUBSCRIBE (creates)", "FLOW", "PARTITIONED_METADATA",
    "LOOKUP", "PRODUCER", "SEND (+ its dispatch)", "CLOSE_PRODUCER", "CLOSE_CONSUMER",
)


class Replies:
    """Whole commands read from a blocking socket (the broker's PINGs answered here)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()

    def __iter__(self) -> Iterator[pb.BaseCommand]:
        while True:
            while (parsed := whole_command(self._buf)) is not None:
                command, used = parsed
                del self._buf[:used]
                if command.type == T.PING:
                    self._sock.sendall(_PONG_TO_BROKER)
                    continue
                yield command
            data = self._sock.recv(1 << 20)
            if not data:
                raise RuntimeError("the broker closed the connection")
            self._buf += data


class _Connection:
    """One plain connection: write frames, read commands."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(connect_command("topic-commands"))
        self._replies = iter(Replies(self.sock))
        if self.next().type != T.CONNECTED:
            raise RuntimeError("CONNECT refused")

    def next(self) -> pb.BaseCommand:
        return next(self._replies)

    def drive(self, frames: list[bytes], expected: dict[int, int], in_flight: int) -> None:
        """Write `frames`, at most `in_flight` ahead of the answers of the first expected type;
        return once every frame's answers came (`expected`: answers of each type per frame).
        Commands that have no answer (FLOW) are followed by one PING and wait for its PONG."""
        if not expected:
            self.sock.sendall(b"".join(frames) + _PING)
            while self.next().type != T.PONG:
                pass
            return
        wanted = {t: n * len(frames) for t, n in expected.items()}
        got = dict.fromkeys(expected, 0)
        pacing = next(iter(expected))
        sent = 0
        while any(got[t] < wanted[t] for t in wanted):
            if sent < len(frames) and sent - got[pacing] < in_flight:
                n = min(in_flight - (sent - got[pacing]), len(frames) - sent)
                self.sock.sendall(b"".join(frames[sent:sent + n]))
                sent += n
            command = self.next()
            if command.type not in got:
                raise RuntimeError(f"unexpected answer {T.Type.Name(command.type)}: {command}")
            got[command.type] += 1


def _builders(topics: list[str]) -> dict[str, tuple[Callable[[int], bytes], dict[int, int]]]:
    """Per kind: the frame for topic i, and the answers expected per frame."""
    ids = itertools.count(1)

    def command(kind: pb.BaseCommand.Type.ValueType, body: str, **fields: object) -> bytes:
        c = pb.BaseCommand(type=kind)
        part = getattr(c, body)
        for key, value in fields.items():
            setattr(part, key, value)
        return encode_command(c)

    def partitions(i: int) -> bytes:
        return command(T.PARTITIONED_METADATA, "partitionMetadata", topic=topics[i], request_id=next(ids))

    def lookup(i: int) -> bytes:
        return command(T.LOOKUP, "lookupTopic", topic=topics[i], request_id=next(ids))

    def subscribe(i: int) -> bytes:
        return command(T.SUBSCRIBE, "subscribe", topic=topics[i], subscription="sub", consumer_id=i + 1,
                       subType=pb.CommandSubscribe.Exclusive, request_id=next(ids), durable=True,
                       initialPosition=pb.CommandSubscribe.Earliest)

    def flow(i: int) -> bytes:
        return command(T.FLOW, "flow", consumer_id=i + 1, messagePermits=1000)

    def producer(i: int) -> bytes:
        return command(T.PRODUCER, "producer", topic=topics[i], producer_id=i + 1, request_id=next(ids),
                       producer_name=f"tc-{i}")

    now_ms = int(time.time() * 1000)

    def send(i: int) -> bytes:
        return SendFrames(i + 1, f"tc-{i}", b"x" * 100).frame(0, now_ms)

    def close_producer(i: int) -> bytes:
        return command(T.CLOSE_PRODUCER, "close_producer", producer_id=i + 1, request_id=next(ids))

    def close_consumer(i: int) -> bytes:
        return command(T.CLOSE_CONSUMER, "close_consumer", consumer_id=i + 1, request_id=next(ids))

    answers = {T.PARTITIONED_METADATA: T.PARTITIONED_METADATA_RESPONSE, T.LOOKUP: T.LOOKUP_RESPONSE}
    return dict(zip(KINDS, (
        (partitions, {answers[T.PARTITIONED_METADATA]: 1}), (lookup, {answers[T.LOOKUP]: 1}),
        (subscribe, {T.SUCCESS: 1}), (flow, {}),
        (partitions, {answers[T.PARTITIONED_METADATA]: 1}), (lookup, {answers[T.LOOKUP]: 1}),
        (producer, {T.PRODUCER_SUCCESS: 1}), (send, {T.SEND_RECEIPT: 1, T.MESSAGE: 1}),
        (close_producer, {T.SUCCESS: 1}), (close_consumer, {T.SUCCESS: 1}),
    ), strict=True))


def commands_phase(port: int, pid: int, topics_n: int, in_flight: int) -> dict[str, float]:
    """µs of broker CPU per command of each kind, `topics_n` new topics."""
    prefix = f"persistent://public/default/tk-{uuid.uuid4().hex[:8]}-"
    builders = _builders([f"{prefix}{i}" for i in range(topics_n)])
    connection = _Connection(port)
    out: dict[str, float] = {}
    try:
        for kind in KINDS:
            build, expected = builders[kind]
            frames = [build(i) for i in range(topics_n)]
            before = sum(lean.thread_cpu_s(pid).values())
            connection.drive(frames, expected, in_flight)
            out[kind] = (sum(lean.thread_cpu_s(pid).values()) - before) / topics_n * 1e6
    finally:
        connection.sock.close()
    return out


def median_table(runs: dict[str, list[dict[str, float]]]) -> Iterator[str]:
    """Markdown rows: a kind per row, a build per column (the median of its runs), and the sum."""
    names = list(runs)
    yield "| command | " + " | ".join(f"{n} µs" for n in names) + " |"
    yield "|---|" + "---|" * len(names)

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    for kind in KINDS:
        yield f"| {kind} | " + " | ".join(f"{median([r[kind] for r in runs[n]]):.1f}" for n in names) + " |"
    yield "| **sum** | " + " | ".join(f"**{median([sum(r.values()) for r in runs[n]]):.1f}**" for n in names) + " |"
