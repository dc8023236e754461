"""Counters with a rate: totals kept on the hot path, rates computed by a periodic sampler.

Pulsar reports msgRateIn, msgThroughputOut and the like as per-second rates over its stats
interval; the hot path only adds to totals, and the broker samples every `interval_s`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(slots=True)
class RateCounter:
    messages_total: int = 0
    bytes_total: int = 0
    message_rate: float = 0.0  # per second, over the last sampling interval
    byte_rate: float = 0.0
    _last_messages: int = 0
    _last_bytes: int = 0
    _last_time_s: float = 0.0

    @classmethod
    def since(cls, now_s: float) -> RateCounter:
        """A counter made at now_s (made on first use): its first rate covers the time since."""
        return cls(_last_time_s=now_s)

    def add(self, messages: int, size_bytes: int) -> None:
        self.messages_total += messages
        self.bytes_total += size_bytes

    def sample(self, now_s: float) -> None:
        elapsed = now_s - self._last_time_s
        if self._last_time_s > 0 and elapsed > 0:
            self.message_rate = (self.messages_total - self._last_messages) / elapsed
            self.byte_rate = (self.bytes_total - self._last_bytes) / elapsed
        self._last_messages = self.messages_total
        self._last_bytes = self.bytes_total
        self._last_time_s = now_s


# What a counter reads before anything was counted: shared by every topic and subscription that
# counted nothing yet (most loaded topics are idle), so they do not each carry one. Never add to
# it: the owner swaps in a RateCounter of its own first.
NO_RATE: Final = RateCounter()


@dataclass(slots=True)
class SubscriptionRates:
    """A subscription's counters, made on its first dispatch (an idle subscription has none)."""

    out: RateCounter
    redelivered: RateCounter
    expired: RateCounter
    chunks_out: RateCounter

    @classmethod
    def since(cls, now_s: float) -> SubscriptionRates:
        return cls(*(RateCounter.since(now_s) for _ in range(4)))

    def sample(self, now_s: float) -> None:
        for counter in (self.out, self.redelivered, self.expired, self.chunks_out):
            counter.sample(now_s)
