"""The two instruments of `velamq perf`: a mergeable latency histogram and a token bucket.

LatencyHistogram wraps HdrHistogram (the `hdrhistogram` package): latencies are recorded in whole
microseconds from 1 us to one hour with 3 significant digits, so a percentile is exact to 0.1 %
and two histograms of the same shape add up count by count. That is what lets `--processes N`
report true percentiles over all processes: each worker sends its histogram encoded (HdrHistogram's
compressed V2 format, base64), the coordinator decodes and adds them. Averaging per-process
percentiles would be wrong; adding histograms is exact.

TokenBucket keeps a send rate over time on a given clock (the event loop's): tokens accrue at
`rate` per second up to one second's worth, and a sender takes whole tokens before sending. The
rate then holds on average whatever the scheduling jitter, unlike sleeping 1/rate per message,
whose errors add up (each wake-up is late, never early).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

from hdrh.histogram import HdrHistogram

from velamq._errors import VelamqError

# Latencies in microseconds: 1 us .. 1 h, 3 significant digits (what pulsar-perf's producer uses).
latency_us_min: Final = 1
latency_us_max: Final = 3_600_000_000
latency_significant_digits: Final = 3

# The percentiles every report carries, and the names they carry them under.
PERCENTILES: Final[tuple[tuple[str, float], ...]] = (
    ("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p99.9", 99.9),
)


class PerfError(VelamqError):
    """A `velamq perf` run that cannot start or cannot go on (bad options, broker unreachable)."""


class LatencyHistogram:
    """Latencies in microseconds, mergeable across processes without loss (see the module doc)."""

    def __init__(self, histogram: HdrHistogram | None = None) -> None:
        self._h = histogram or HdrHistogram(latency_us_min, latency_us_max, latency_significant_digits)
        self.clamped = 0  # values above one hour, recorded as one hour

    def record_us(self, value_us: float, count: int = 1) -> None:
        """Record `value_us` (`count` times: a group of messages that share one latency)."""
        value = int(value_us)
        if value < 0:
            value = 0  # a publish time from a clock slightly ahead of ours
        elif value > latency_us_max:
            value = latency_us_max
            self.clamped += count
        self._h.record_value(value, count)

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    def add(self, other: LatencyHistogram) -> None:
        if other.count:
            self._h.add(other._h)
        self.clamped += other.clamped

    def reset(self) -> None:
        self._h.reset()
        self.clamped = 0

    def encode(self) -> str:
        """HdrHistogram's compressed V2 format in base64: what a worker process sends."""
        encoded = self._h.encode()
        return encoded.decode("ascii") if isinstance(encoded, bytes) else str(encoded)

    @classmethod
    def decode(cls, encoded: str) -> LatencyHistogram:
        return cls(HdrHistogram.decode(encoded.encode("ascii")))

    def value_at_percentile_us(self, percentile: float) -> int:
        return int(self._h.get_value_at_percentile(percentile)) if self.count else 0

    def summary_ms(self) -> dict[str, Any]:
        """count, mean, p50, p95, p99, p99.9 and max in milliseconds (all 0.0 when empty)."""
        if not self.count:
            return {"count": 0, "mean": 0.0, **{name: 0.0 for name, _ in PERCENTILES}, "max": 0.0}
        values = self._h.get_percentile_to_value_dict([p for _, p in PERCENTILES])
        out: dict[str, Any] = {"count": self.count, "mean": round(self._h.get_mean_value() / 1000, 3)}
        for name, percentile in PERCENTILES:
            out[name] = round(values[percentile] / 1000, 3)
        out["max"] = round(self._h.get_max_value() / 1000, 3)
        return out


def merged(encoded: list[str]) -> LatencyHistogram:
    """One histogram holding every count of the encoded ones."""
    total = LatencyHistogram()
    for item in encoded:
        total.add(LatencyHistogram.decode(item))
    return total


class TokenBucket:
    """`rate` operations per second on average, on `clock` (seconds); bursts up to `burst_s` worth.

    The bucket starts with one token so the first operation goes at once. After a stall (a loaded
    machine, a blocked send) up to `burst_s` x rate tokens wait, so the average catches up; beyond
    that they are dropped, so a long stall does not turn into an unbounded burst.
    """

    def __init__(self, rate: float, clock: Callable[[], float], burst_s: float = 1.0) -> None:
        if rate <= 0:
            raise PerfError(f"a token bucket needs a positive rate, not {rate}")
        self.rate = float(rate)
        self.capacity = max(1.0, self.rate * burst_s)
        self._clock = clock
        self._tokens = 1.0
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        if now > self._last:
            self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
            self._last = now

    def take(self, wanted: int) -> int:
        """Up to `wanted` whole tokens that are there now (0 if none)."""
        self._refill()
        n = min(wanted, int(self._tokens))
        if n > 0:
            self._tokens -= n
        return max(0, n)

    def seconds_until_token(self) -> float:
        """How long until one whole token is there."""
        self._refill()
        return max(0.0, (1.0 - self._tokens) / self.rate)

    async def acquire(self, wanted: int) -> int:
        """Wait until at least one token is there; take up to `wanted` of them."""
        while True:
            n = self.take(wanted)
            if n:
                return n
            await asyncio.sleep(self.seconds_until_token())


# How often a paced send loop looks again at its stop flag and deadline while waiting for a token.
idle_check_s: Final = 0.1


class SendAdmission:
    """How much a send loop may send now: what is left of a total (None: no total), paced at `rate`
    units per second (0: as fast as it goes), `chunk` at most per turn, until the loop stops or its
    deadline passes. One per producing side, shared by its producers' send loops."""

    def __init__(self, total: int | None, rate: float, chunk: int) -> None:
        self._remaining = total
        self._rate = rate
        self._chunk = chunk
        self._bucket: TokenBucket | None = None

    def start(self) -> None:
        """The pacing starts now (on the running loop's clock)."""
        if self._rate > 0:
            self._bucket = TokenBucket(self._rate, asyncio.get_running_loop().time)

    async def admit(self, deadline: float | None, stopped: Callable[[], bool]) -> int:
        """How many units the loop may send now; 0: stop sending (stopped, past the deadline, or
        the total is sent)."""
        wanted = self._chunk
        while True:
            if stopped() or (deadline is not None and time.monotonic() >= deadline):
                return 0
            if self._remaining is not None:
                wanted = min(wanted, self._remaining)
                if wanted <= 0:
                    return 0
            n = self._bucket.take(wanted) if self._bucket is not None else wanted
            if n > 0:
                if self._remaining is not None:
                    self._remaining -= n
                return n
            assert self._bucket is not None
            await asyncio.sleep(min(idle_check_s, self._bucket.seconds_until_token()))
