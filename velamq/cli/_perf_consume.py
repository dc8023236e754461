"""The consuming side of a `velamq perf` worker: consumers, receive loops, end-to-end latency.

Each consumer has a receive loop that takes a message, counts it, records its end-to-end latency
and acknowledges it (pulsar-perf acknowledges every message too). The latency is "now" minus the
message's send time: the stamp `end-to-end` writes into its payloads (microseconds), or else the
publish time every Pulsar message carries (milliseconds, set by whichever client produced it, so
only as good as the two machines' clocks agree).

`--rate` on consume simulates a slow consumer (a token bucket, as for producing).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from velamq.cli._perf_produce import stamp_us
from velamq.cli._perf_stats import LatencyHistogram, TokenBucket
from velamq.client import AsyncClient, Consumer, Message


class ConsumeSide:
    """The consumers of one worker and everything they count."""

    def __init__(self, client: AsyncClient, subscriptions: Sequence[tuple[str, str]],
                 consumer_options: dict[str, Any], rate: float, messages: int) -> None:
        self._client = client
        self._subscriptions = list(subscriptions)
        self._options = consumer_options
        self._rate = rate
        # Stop after this many messages (0: no limit). Only a lone worker knows the whole count;
        # with several processes the coordinator stops the run instead.
        self._target = messages
        self._consumers: list[Consumer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._bucket: TokenBucket | None = None
        self.reached_target = asyncio.Event()
        self.received = 0
        self.received_bytes = 0
        self.latency = LatencyHistogram()
        self.last_error: str | None = None

    @property
    def consumers(self) -> int:
        return len(self._subscriptions)

    async def start(self) -> None:
        """Subscribe every consumer (before any producer starts, so that none misses a message)."""
        for topic, subscription in self._subscriptions:
            self._consumers.append(await self._client.subscribe(topic, subscription, **self._options))

    def run(self) -> None:
        """Start the receive loops; stop() ends them."""
        if self._rate > 0:
            self._bucket = TokenBucket(self._rate, asyncio.get_running_loop().time)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._receive_loop(c)) for c in self._consumers]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._consumers), return_exceptions=True)

    async def _receive_loop(self, consumer: Consumer) -> None:
        try:
            while True:
                if self._bucket is not None:
                    await self._bucket.acquire(1)
                message = await consumer.receive()
                if self._target and self.received >= self._target:
                    return  # another loop got the last one: leave this one unacknowledged
                self._count(message)
                await consumer.acknowledge(message)
                if self._target and self.received >= self._target:
                    self.reached_target.set()
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the consumer was closed under us, the broker went away
            self.last_error = f"{type(exc).__name__}: {exc}"

    def _count(self, message: Message) -> None:
        now_us = time.time_ns() // 1000
        value = message.value
        self.received += 1
        self.received_bytes += len(value)
        sent_us = stamp_us(value)
        if sent_us is None and message.publish_time:
            sent_us = message.publish_time * 1000
        if sent_us is not None:
            self.latency.record_us(now_us - sent_us)
