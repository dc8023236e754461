"""The producing side of a `velamq perf` worker: producers, send loops, receipts, latency.

Each producer has its own send loop; the loops of one worker share its token bucket (its share of
`--rate`) and its share of `--num-messages`. A message's latency is the time from just before
`send_async` (so it includes waiting for a free pending permit, as in pulsar-perf) to its receipt.
For `end-to-end`, the payload starts with a stamp (a magic and the send time in epoch
microseconds) that the consuming side reads back.

Only velamq's public client API is used, so the tool works against any Pulsar broker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from velamq.cli._perf_stats import LatencyHistogram, SendAdmission
from velamq.client import AsyncClient, Producer, ProducerConfig

log = logging.getLogger("velamq.perf")

# [magic 4 bytes][send time, epoch microseconds, 8 bytes big-endian][the rest of the payload]
STAMP_MAGIC: Final = b"VQPF"
STAMP_BYTES: Final = len(STAMP_MAGIC) + 8

# How many messages a send loop takes from the bucket at once, and sends before it yields.
send_chunk_messages: Final = 64


def stamp(payload: bytes, now_us: int) -> bytes:
    """The payload with the send time written over its first STAMP_BYTES (if it is long enough)."""
    if len(payload) < STAMP_BYTES:
        return payload
    return STAMP_MAGIC + now_us.to_bytes(8, "big") + payload[STAMP_BYTES:]


def stamp_us(payload: bytes) -> int | None:
    """The send time a stamped payload carries, None for any other payload."""
    if len(payload) >= STAMP_BYTES and payload.startswith(STAMP_MAGIC):
        return int.from_bytes(payload[len(STAMP_MAGIC):STAMP_BYTES], "big")
    return None


@dataclass(frozen=True, slots=True)
class Payloads:
    """What to send: one payload of `size` bytes, or a random choice among the lines of a file."""

    size: int = 1024
    choices: tuple[bytes, ...] = ()

    def fixed(self) -> bytes:
        # Random capital letters, as pulsar-perf sends: compressible about as much as text.
        rng = random.Random(0)
        return bytes(rng.randrange(65, 91) for _ in range(self.size))


class ProduceSide:
    """The producers of one worker and everything they count."""

    def __init__(self, client: AsyncClient, topics: Sequence[str], producer_options: dict[str, Any],
                 payloads: Payloads, rate: float, messages: int, stamped: bool) -> None:
        self._client = client
        self._topics = list(topics)
        self._options = producer_options
        self._payloads = payloads
        self._fixed = payloads.fixed() if not payloads.choices else b""
        self._admission = SendAdmission(messages if messages > 0 else None, rate, send_chunk_messages)
        self._stamped = stamped
        self._producers: list[Producer] = []
        self._stop = asyncio.Event()
        self._sending_done = False
        self._drained = asyncio.Event()
        # Figures, read by the worker's ticker: cumulative counts and the current interval's latencies.
        self.sent = 0
        self.sent_bytes = 0
        self.failed = 0
        self.pending = 0
        self.latency = LatencyHistogram()
        self.last_error: str | None = None
        self.finished_at: float | None = None  # monotonic time of the last receipt (or error)

    @property
    def producers(self) -> int:
        return len(self._topics)

    @property
    def done(self) -> bool:
        """All sending finished and every message has its receipt or its error."""
        return self._sending_done and self.pending == 0

    async def start(self) -> None:
        """Create every producer (before the clock starts, like pulsar-perf).

        With --tuned the options carry the template's inputs; the partition count is the topic's."""
        options = dict(self._options)
        tuned = options.pop("tuned", None)
        for topic in self._topics:
            if tuned is None:
                producer = await self._client.create_producer(topic, **options)
            else:
                partitions = len(await self._client.get_topic_partitions(topic))
                config = ProducerConfig.tuned(tuned["message_bytes"], partitions, tuned["memory_limit_bytes"],
                                              tuned["max_delay_ms"], **options)
                producer = await self._client.create_producer(topic, config)
            self._producers.append(producer)

    async def run(self, deadline: float | None) -> None:
        """Send until the share is sent, the deadline passes or stop(); then wait for the receipts."""
        self._admission.start()
        if self._producers:
            await asyncio.gather(*(self._send_loop(p, deadline) for p in self._producers))
        self._sending_done = True
        await asyncio.gather(*(p.flush() for p in self._producers), return_exceptions=True)
        if self.pending:
            await self._drained.wait()
        self.finished_at = time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def abandon(self) -> None:
        """Stop waiting for the receipts still missing (the broker is gone or stuck)."""
        self._drained.set()

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self._producers), return_exceptions=True)

    def _payload(self) -> bytes:
        payload = random.choice(self._payloads.choices) if self._payloads.choices else self._fixed
        if self._stamped:
            payload = stamp(payload, time.time_ns() // 1000)
        return payload

    async def _send_loop(self, producer: Producer, deadline: float | None) -> None:
        while n := await self._admission.admit(deadline, self._stop.is_set):
            for _ in range(n):
                payload = self._payload()
                started = time.perf_counter()
                try:
                    future = await producer.send_async(payload)
                except Exception as exc:  # closed producer, message too big: count it and go on
                    self.failed += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    continue
                self.pending += 1
                future.add_done_callback(functools.partial(self._on_receipt, started, len(payload)))
            # send_async does not suspend while permits are free: let receipts and the ticker run.
            await asyncio.sleep(0)

    def _on_receipt(self, started: float, size: int, future: asyncio.Future[Any]) -> None:
        self.pending -= 1
        if future.cancelled():
            self.failed += 1
        elif (exc := future.exception()) is not None:
            self.failed += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
        else:
            self.sent += 1
            self.sent_bytes += size
            self.latency.record_us((time.perf_counter() - started) * 1e6)
        if self.pending == 0 and self._sending_done:
            self._drained.set()
