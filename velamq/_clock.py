"""The clock, injected so that tests can control time where they must."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in epoch milliseconds (publish times, TTL)."""
        ...

    def monotonic_s(self) -> float:
        """Monotonic seconds (timeouts, rates)."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_s(self) -> float:
        return time.monotonic()


system_clock = SystemClock()
