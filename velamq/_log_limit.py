"""Rate-limited logging: a line that can repeat per event is written at most once per interval.

A broker under a storm (thousands of refused connections a second, a full disk refusing every
append, a fuzzer) must not turn its log into the next thing that fills the disk: the issue that
asked for this measured a 292 MB log in 75 s. Every log line that can repeat per event goes through
a `RateLimitedLog`: the first occurrence of a key is written at once, later ones within
`interval_s` are counted, and the next line written for that key says how many were left out:

    WARNING velamq.broker: refusing connection: 1500 connections open (brokerMaxConnections)
    WARNING velamq.broker: refusing connection: ... (and 4 211 more like it in the last 60 s)

Keys are chosen by the caller (one per kind of event, never per client); the table of keys is
bounded, so a caller that uses client-given text as a key still cannot grow it without limit.
Time comes from the injected clock, so tests can drive it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

from velamq._clock import Clock, system_clock

# One line per key per minute: enough to see that something keeps happening, never a flood.
interval_s_default: Final = 60.0
# Distinct keys remembered at most (the oldest is forgotten first).
keys_max: Final = 1024


@dataclass(slots=True)
class _Key:
    last_logged_s: float
    suppressed: int = 0


class RateLimitedLog:
    """Writes to `logger` at most one line per key per `interval_s` of the clock's monotonic time,
    counting what it leaves out. Not thread-safe: one per event loop (or per thread)."""

    def __init__(
        self, logger: logging.Logger, clock: Clock = system_clock, interval_s: float = interval_s_default
    ) -> None:
        self.logger = logger
        self.clock = clock
        self.interval_s = interval_s
        self._keys: dict[str, _Key] = {}
        self.suppressed_total = 0

    def log(self, level: int, key: str, message: str, *args: Any, exc_info: bool = False) -> bool:
        """Log `message % args` unless a line with this key was written less than interval_s ago.
        Returns whether the line was written."""
        now = self.clock.monotonic_s()
        state = self._keys.get(key)
        if state is not None and now - state.last_logged_s < self.interval_s:
            state.suppressed += 1
            self.suppressed_total += 1
            return False
        suppressed = state.suppressed if state is not None else 0
        if state is None:
            if len(self._keys) >= keys_max:
                del self._keys[next(iter(self._keys))]
            self._keys[key] = _Key(now)
        else:
            state.last_logged_s = now
            state.suppressed = 0
        if suppressed:
            message = f"{message} (and {suppressed} more like it in the last {self.interval_s:.0f} s)"
        self.logger.log(level, message, *args, exc_info=exc_info)
        return True

    def warning(self, key: str, message: str, *args: Any) -> bool:
        return self.log(logging.WARNING, key, message, *args)

    def error(self, key: str, message: str, *args: Any, exc_info: bool = False) -> bool:
        return self.log(logging.ERROR, key, message, *args, exc_info=exc_info)

    def info(self, key: str, message: str, *args: Any) -> bool:
        return self.log(logging.INFO, key, message, *args)
