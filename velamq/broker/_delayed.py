"""Delayed delivery (CO-4): entries whose deliver_at_time is still ahead wait here, not at consumers.

A heap ordered by delivery time and one timer that sleeps on the injected clock until the
earliest is due; due entries are handed back to the subscription (its replay set), which sends
them like redeliveries. Only Shared and Key_Shared subscriptions delay, as in Pulsar.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable

from velamq._clock import Clock
from velamq.storage import Position


class DelayedDeliveryTracker:
    """The delayed entries of one subscription and the timer that releases them when they are due."""

    def __init__(self, clock: Clock, release: Callable[[list[Position]], None]) -> None:
        self._clock = clock
        self._release = release
        self._heap: list[tuple[int, Position]] = []
        self._timer: asyncio.Task[None] | None = None
        self._timer_due_ms = 0
        self._closed = False

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, position: Position, deliver_at_ms: int) -> None:
        heapq.heappush(self._heap, (deliver_at_ms, position))
        if self._timer is None or deliver_at_ms < self._timer_due_ms:
            self._schedule()

    def discard_if(self, gone: Callable[[Position], bool]) -> None:
        """Drop entries that no longer need delivering (acknowledged behind the consumers' backs)."""
        self._heap = [(t, p) for t, p in self._heap if not gone(p)]
        heapq.heapify(self._heap)

    def clear(self) -> None:
        self._heap.clear()
        self._cancel_timer()

    def close(self) -> None:
        self._closed = True
        self.clear()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        self._cancel_timer()
        if not self._heap or self._closed:
            return
        self._timer_due_ms = self._heap[0][0]
        self._timer = asyncio.get_running_loop().create_task(self._fire(self._timer_due_ms))

    async def _fire(self, due_ms: int) -> None:
        await self._clock.sleep(max(0.0, (due_ms - self._clock.now_ms()) / 1000.0))
        self._timer = None
        now = self._clock.now_ms()
        due: list[Position] = []
        while self._heap and self._heap[0][0] <= now:
            due.append(heapq.heappop(self._heap)[1])
        if due:
            self._release(due)
        self._schedule()
