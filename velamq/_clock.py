"""The clock, injected so that tests can control time where they must.

`SystemClock` is the real one. `ManualClock` moves only when a test calls `advance()`: timed
behaviour written against `Clock` (timers through `sleep`, ages through `now_ms`/`monotonic_s`)
then runs at the test's pace, with no real waiting and no timing accident.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in epoch milliseconds (publish times, TTL)."""
        ...

    def monotonic_s(self) -> float:
        """Monotonic seconds (timeouts, rates)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait until `seconds` of this clock's monotonic time have passed (timers)."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_s(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


system_clock = SystemClock()


class ManualClock:
    """A clock for tests: time stands still until `advance()`, which wakes the sleepers that are due.

    Sleepers wake on their own event loop (advance() may be called from any thread that owns that
    loop's tasks, i.e. from the loop itself). A sleep of 0 or less only yields to the loop.
    """

    def __init__(self, now_ms: int = 1_700_000_000_000, monotonic_s: float = 1_000.0) -> None:
        self._now_ms = now_ms
        self._monotonic_s = monotonic_s
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_s(self) -> float:
        return self._monotonic_s

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._monotonic_s + seconds, next(self._order), wake))
        await wake

    @property
    def sleepers(self) -> int:
        """Tasks waiting in sleep() right now (cancelled ones excluded)."""
        return sum(1 for _, _, wake in self._sleepers if not wake.done())

    def advance(self, seconds: float) -> None:
        """Move both clocks forward and wake every sleeper whose time has come, earliest first."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._monotonic_s += seconds
        self._now_ms += round(seconds * 1000)
        while self._sleepers and self._sleepers[0][0] <= self._monotonic_s:
            _, _, wake = heapq.heappop(self._sleepers)
            if not wake.done():
                wake.set_result(None)
