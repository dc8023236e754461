"""`velamq perf produce --lean`: producers that drive a broker to its saturation (issue 22).

Each producer is a plain connection of its own (CONNECT, PRODUCER, then SEND frames built by
_perf_frames.SendFrames in writes of up to `chunk` frames, at most `window` in flight). Its
SEND_RECEIPTs are counted as they arrive, without a client library's per-message futures, so one
process spends a few µs per message where the client path spends 10-30, and `--processes N`
spreads even that. The figures are the ones ProduceSide keeps (sent, pending, the publish ->
receipt latency in the HdrHistogram), so the live lines and the summary are the usual ones: the
latency of a message is from just before its write was built to the read that held its receipt,
recorded once per write group with the group's count.

What it leaves out, and refuses up front (see check_lean): TLS and authentication, compression,
partitioned topics (-np), payload files, end-to-end stamps. It connects to the service URL's
broker directly (no lookup): a standalone broker, or the topic's owner.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Sequence
from typing import Final
from urllib.parse import urlsplit

from velamq.cli._perf_frames import (
    PONG,
    LeanError,
    ReceiptCounter,
    SendFrames,
    connect_command,
    producer_command,
    whole_command,
)
from velamq.cli._perf_stats import LatencyHistogram, PerfError, SendAdmission
from velamq.protocol import build_batch, pb

T = pb.BaseCommand
default_lean_window: Final = 5000  # sends in flight per producer (what saturates a broker)
lean_chunk_max: Final = 1000  # frames per write at most
handshake_timeout_s: Final = 30.0


def broker_address(service_url: str) -> tuple[str, int]:
    parts = urlsplit(service_url)
    if parts.scheme != "pulsar":
        raise PerfError(f"--lean speaks plain pulsar:// only, not {parts.scheme}://")
    return parts.hostname or "localhost", parts.port or 6650


class _LeanProducer(asyncio.Protocol):
    """One connection and its producer: writes groups of frames, counts their receipts."""

    def __init__(self, side: LeanProduceSide, producer_id: int) -> None:
        self._side = side
        self.producer_id = producer_id
        self.transport: asyncio.Transport | None = None
        self._handshake: asyncio.Queue[pb.BaseCommand] = asyncio.Queue()
        self._buffer = bytearray()
        self._counter: ReceiptCounter | None = None
        self.frames: SendFrames | None = None
        self.next_sequence_id = 0
        self.in_flight = 0
        self.room = asyncio.Event()
        self.room.set()
        self._writable = asyncio.Event()
        self._writable.set()
        self.groups: collections.deque[list[float]] = collections.deque()  # [entries left, started]
        self.broken = False  # the connection failed or closed: no more sends

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._counter is None:
            self._handshake_bytes(data)
            return
        try:
            n = self._counter(data)
        except LeanError as exc:
            self._side.fail(self, str(exc))
            return
        if n:
            self._side.on_receipts(self, n)

    def _handshake_bytes(self, data: bytes) -> None:
        self._buffer += data
        while (parsed := whole_command(self._buffer)) is not None:
            command, used = parsed
            del self._buffer[:used]
            self._handshake.put_nowait(command)

    def connection_lost(self, exc: Exception | None) -> None:
        self._side.fail(self, f"the broker closed the connection{f': {exc}' if exc else ''}")
        self._handshake.put_nowait(pb.BaseCommand(type=T.ERROR))
        self.room.set()
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def _reply(self, wanted: int, what: str) -> pb.BaseCommand:
        command = await asyncio.wait_for(self._handshake.get(), handshake_timeout_s)
        while command.type == T.PING:
            assert self.transport is not None
            self.transport.write(PONG)
            command = await asyncio.wait_for(self._handshake.get(), handshake_timeout_s)
        if command.type != wanted:
            reason = command.error.message if command.HasField("error") else T.Type.Name(command.type)
            raise PerfError(f"{what} refused: {reason}")
        return command

    async def open(self, topic: str, body: bytes, num_messages: int) -> None:
        assert self.transport is not None
        self.transport.write(connect_command("velamq-perf-lean"))
        await self._reply(T.CONNECTED, "CONNECT")
        self.transport.write(producer_command(topic, self.producer_id, request_id=1))
        success = await self._reply(T.PRODUCER_SUCCESS, f"the producer on {topic}")
        self.frames = SendFrames(self.producer_id, success.producer_success.producer_name, body, num_messages)
        transport = self.transport
        self._counter = ReceiptCounter(transport.write)
        if self._buffer:  # receipts cannot come before a send; a PING might
            rest, self._buffer = bytes(self._buffer), bytearray()
            self.data_received(rest)

    async def send(self, entries: int, window: int) -> None:
        """Write `entries` frames once there is room for them in the window."""
        while self.in_flight and self.in_flight + entries > window and not self.broken:
            self.room.clear()
            await self.room.wait()
        await self._writable.wait()
        if self.broken:
            raise PerfError("the connection to the broker failed")
        assert self.frames is not None and self.transport is not None
        started = time.perf_counter()
        data = self.frames.frames(self.next_sequence_id, entries, time.time_ns() // 1_000_000)
        self.transport.write(data)
        self.next_sequence_id += entries
        self.in_flight += entries
        self.groups.append([entries, started])


class LeanProduceSide:
    """The lean producers of one worker and everything they count (the figures of ProduceSide)."""

    def __init__(self, service_url: str, topics: Sequence[str], size: int, batch: int, rate: float,
                 messages: int, window: int) -> None:
        self._address = broker_address(service_url)
        self._topics = list(topics)
        self._batch = max(1, batch)
        self._payload = bytes(65 + i % 26 for i in range(size))  # capital letters, as pulsar-perf sends
        self._entry_bytes = size * self._batch
        self._window = max(1, window)
        entries = -(-messages // self._batch) if messages > 0 else None  # the admission counts entries
        chunk = max(1, min(lean_chunk_max, self._window // 4))
        self._admission = SendAdmission(entries, rate / self._batch, chunk)
        self._producers: list[_LeanProducer] = []
        self._stop = asyncio.Event()
        self._sending_done = False
        self._drained = asyncio.Event()
        self._closing = False
        self.sent = 0
        self.sent_bytes = 0
        self.failed = 0
        self.pending = 0  # messages
        self.latency = LatencyHistogram()
        self.last_error: str | None = None
        self.finished_at: float | None = None

    @property
    def producers(self) -> int:
        return len(self._topics)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._batch > 1:
            body = build_batch([(pb.SingleMessageMetadata(payload_size=len(self._payload)), self._payload)
                                for _ in range(self._batch)])
        else:
            body = self._payload
        host, port = self._address
        for i, topic in enumerate(self._topics):
            producer = _LeanProducer(self, producer_id=i + 1)
            await loop.create_connection(lambda p=producer: p, host, port)  # type: ignore[misc]
            self._producers.append(producer)
            await producer.open(topic, body, self._batch)

    async def run(self, deadline: float | None) -> None:
        self._admission.start()
        if self._producers:
            results = await asyncio.gather(*(self._send_loop(p, deadline) for p in self._producers),
                                           return_exceptions=True)
            for result in results:
                if isinstance(result, Exception):
                    self.last_error = self.last_error or f"{type(result).__name__}: {result}"
        self._sending_done = True
        if self.pending:
            await self._drained.wait()
        self.finished_at = time.monotonic()

    async def _send_loop(self, producer: _LeanProducer, deadline: float | None) -> None:
        while n := await self._admission.admit(deadline, self._stopped):
            await producer.send(n, self._window)
            self.pending += n * self._batch

    def _stopped(self) -> bool:
        return self._stop.is_set() or bool(self.last_error)

    def on_receipts(self, producer: _LeanProducer, entries: int) -> None:
        producer.in_flight -= entries
        producer.room.set()
        messages = entries * self._batch
        self.sent += messages
        self.sent_bytes += entries * self._entry_bytes
        self.pending -= messages
        now = time.perf_counter()
        groups, record = producer.groups, self.latency.record_us
        while entries:
            group = groups[0]
            taken = min(entries, int(group[0]))
            record((now - group[1]) * 1e6, taken * self._batch)
            entries -= taken
            group[0] -= taken
            if not group[0]:
                groups.popleft()
        if self._sending_done and self.pending <= 0:
            self._drained.set()

    def fail(self, producer: _LeanProducer, reason: str) -> None:
        """A producer cannot go on (a refused send, a closed connection): what it has in flight
        is counted as failed, and its send loop ends. Closing at the end of the run is no error."""
        if producer.broken:
            return
        producer.broken = True
        lost = producer.in_flight * self._batch
        producer.in_flight = 0
        producer.groups.clear()
        self.failed += lost
        self.pending -= lost
        if lost or not self._closing:
            self.last_error = self.last_error or reason
        if producer.transport is not None:
            producer.transport.close()
        producer.room.set()
        if self.pending <= 0:
            self._drained.set()

    def stop(self) -> None:
        self._stop.set()

    def abandon(self) -> None:
        self._drained.set()

    async def close(self) -> None:
        self._closing = True
        for producer in self._producers:
            if producer.transport is not None and not producer.transport.is_closing():
                producer.transport.close()
        self._producers.clear()
