"""The clock, injected so that tests can control time where they must.

`Clock` reads time and sleeps by it. `SystemClock` is the real one. `ManualClock` moves only when a
test calls `advance`; its `sleep` wakes once the clock has been advanced past the deadline, so a test
can drive timed behaviour (persist intervals, flush ages) without waiting in real time.
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
        """Wait until monotonic_s() has moved on by `seconds` (on the event loop)."""
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
    """A clock for tests: time stands still until `advance` moves it (wall and monotonic together).

    `sleep` and `advance` belong to the event loop's thread; other threads may read the time.
    """

    def __init__(self, now_ms: int = 1_700_000_000_000, monotonic_s: float = 1_000.0) -> None:
        self._wall_ms = now_ms
        self._monotonic_s = monotonic_s
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []  # a heap by deadline
        self._order = itertools.count()

    def now_ms(self) -> int:
        return self._wall_ms

    def monotonic_s(self) -> float:
        return self._monotonic_s

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._monotonic_s + seconds, next(self._order), future))
        await future

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds` and wake every sleeper whose deadline has come."""
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._monotonic_s += seconds
        self._wall_ms += round(seconds * 1000)
        while self._sleepers and self._sleepers[0][0] <= self._monotonic_s:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    @property
    def sleepers(self) -> int:
        """Sleeps waiting for the clock to move (a test can wait until something is asleep)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())
