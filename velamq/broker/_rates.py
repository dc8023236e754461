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


def own(counter: RateCounter, base: RateCounter) -> RateCounter:
    """`counter`, or in place of the shared NO_RATE a counter of its own on `base`'s sampling
    schedule (made on first use: its first rate covers the same interval as base's next one, as if
    both had been made together)."""
    return counter if counter is not NO_RATE else RateCounter(_last_time_s=base._last_time_s)


class SubscriptionRates:
    """A subscription's counters, made on its first dispatch (an idle subscription has none);
    `redelivered`, `expired` and `chunks_out` share NO_RATE until they count something (most
    subscriptions never redeliver, expire or chunk: three objects fewer per loaded topic)."""

    __slots__ = ("chunks_out", "expired", "out", "redelivered")

    def __init__(self, out: RateCounter) -> None:
        self.out = out
        self.redelivered = NO_RATE
        self.expired = NO_RATE
        self.chunks_out = NO_RATE

    @classmethod
    def since(cls, now_s: float) -> SubscriptionRates:
        return cls(RateCounter.since(now_s))

    def add_redelivered(self, messages: int) -> None:
        self.redelivered = counter = own(self.redelivered, self.out)
        counter.add(messages, 0)

    def add_expired(self, entries: int) -> None:
        self.expired = counter = own(self.expired, self.out)
        counter.add(entries, 0)

    def add_chunk(self, size_bytes: int) -> None:
        self.chunks_out = counter = own(self.chunks_out, self.out)
        counter.add(1, size_bytes)

    def sample(self, now_s: float) -> None:
        for counter in (self.out, self.redelivered, self.expired, self.chunks_out):
            if counter is not NO_RATE:  # the shared placeholder is never written
                counter.sample(now_s)
