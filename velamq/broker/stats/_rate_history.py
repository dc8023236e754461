"""Rate history for the console: msg/s in and out over the last minutes, in bounded rings (OP-3).

Every `interval_s` of the injected clock the sampler reads the message counters of the loaded
topics (totals the hot path keeps anyway: Topic.rate_in and each subscription's `out`) and turns
the change since the previous sample into msg/s:

    broker ring    one, always: the sum over every loaded topic            2 x points floats
    topic rings    only for loaded topics with traffic, at most topics_max  2 x points floats each

Memory stays bounded whatever the number of topics. A topic gets a ring the first time a sample
sees traffic on it; a ring goes when its topic unloads, when it has been idle for a whole window
(every point zero: nothing left to draw), or when the table is full and a topic with newer
traffic needs the place (the ring idle the longest goes first). A million loaded but idle topics
cost no ring; they cost one pass of the sampler over the table of loaded topics, the same pass
the policy checker makes, plus an entry in `_last` for each topic that ever had traffic (its two
totals, to take the next difference from; it goes when the topic unloads).

The sampler only reads counters; it changes nothing on a topic. Counts of a topic that unloads
between two samples are lost from the broker ring (its last interval is not drawn).
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from velamq._clock import Clock
from velamq.broker.topic._topic import Topic

log = logging.getLogger(__name__)

# 120 points of 5 s: the last ten minutes.
rate_history_points_default: Final = 120
rate_history_interval_s_default: Final = 5.0
# Topic rings kept at most (about 1 KiB each with the default points).
rate_history_topics_max_default: Final = 1_000


@dataclass(frozen=True, slots=True)
class RateSeries:
    """One rate history, oldest point first. msg_in[i] and msg_out[i] are msg/s over the interval
    that ended at last_sample_ms - (len - 1 - i) * interval_s * 1000. A topic's series may be
    shorter than the broker's: it starts at the sample that first saw traffic on the topic."""

    interval_s: float
    points_max: int  # the ring's size: the window drawn is (points_max - 1) x interval_s
    last_sample_ms: int  # wall-clock time of the newest point; 0 when there is none yet
    msg_in: tuple[float, ...]
    msg_out: tuple[float, ...]


class _Ring:
    """Two fixed-size float rings written together (msg/s in and out)."""

    __slots__ = ("_count", "_in", "_next", "_out", "idle_samples")

    def __init__(self, points: int) -> None:
        self._in = array("f", bytes(4 * points))
        self._out = array("f", bytes(4 * points))
        self._next = 0
        self._count = 0
        self.idle_samples = 0  # consecutive zero points at the end

    def push(self, rate_in: float, rate_out: float) -> None:
        self._in[self._next] = rate_in
        self._out[self._next] = rate_out
        self._next = (self._next + 1) % len(self._in)
        self._count = min(self._count + 1, len(self._in))
        self.idle_samples = self.idle_samples + 1 if rate_in == 0 and rate_out == 0 else 0

    def latest(self) -> tuple[float, float]:
        newest = (self._next - 1) % len(self._in)
        return (float(self._in[newest]), float(self._out[newest])) if self._count else (0.0, 0.0)

    def series(self, interval_s: float, last_sample_ms: int) -> RateSeries:
        size = len(self._in)
        first = (self._next - self._count) % size
        order = [(first + i) % size for i in range(self._count)]
        return RateSeries(
            interval_s,
            size,
            last_sample_ms if self._count else 0,
            tuple(float(self._in[i]) for i in order),
            tuple(float(self._out[i]) for i in order),
        )


def _out_total(topic: Topic) -> int:
    return sum(s.out.messages_total for s in topic.subscriptions.values())


class RateHistory:
    """The broker's rate history: one sampler task on the injected clock, a broker-wide ring and
    rings for at most `topics_max` topics with traffic. Runs on the broker loop; readers get
    frozen RateSeries copies."""

    def __init__(
        self,
        clock: Clock,
        topics: Callable[[], Iterable[Topic]],
        interval_s: float = rate_history_interval_s_default,
        points: int = rate_history_points_default,
        topics_max: int = rate_history_topics_max_default,
    ) -> None:
        if interval_s <= 0 or points < 2 or topics_max < 0:
            raise ValueError("rate history needs interval_s > 0, points >= 2 and topics_max >= 0")
        self._clock = clock
        self._topics = topics
        self.interval_s = interval_s
        self._points = points
        self._topics_max = topics_max
        self._broker = _Ring(points)
        # Topic rings, least recently active first (the first to go when the table is full).
        self._rings: OrderedDict[str, _Ring] = OrderedDict()
        # Per topic that had traffic: (the Topic object, msg in total, msg out total) at the last
        # sample. The object tells a reload (new counters from zero) from the same topic.
        self._last: dict[str, tuple[Topic, int, int]] = {}
        self._last_sample_s: float | None = None
        self._last_sample_ms = 0
        self._task: asyncio.Task[None] | None = None
        self.samples_total = 0

    @property
    def topics_tracked(self) -> int:
        """Topic rings held right now (at most topics_max)."""
        return len(self._rings)

    def broker_series(self) -> RateSeries:
        return self._broker.series(self.interval_s, self._last_sample_ms)

    def topic_series(self, topic: str) -> RateSeries | None:
        """The topic's history, or None if it has none (not loaded, or no traffic in the window)."""
        ring = self._rings.get(topic)
        return ring.series(self.interval_s, self._last_sample_ms) if ring is not None else None

    def busiest(self, count: int) -> list[tuple[str, float, float]]:
        """Up to `count` topics with the most msg/s (in + out) at the newest sample, busiest first:
        (topic, msg/s in, msg/s out). Only topics with a ring, and traffic at that sample."""
        latest = [(name, ring.latest()) for name, ring in self._rings.items() if ring.idle_samples == 0]
        latest.sort(key=lambda item: (-(item[1][0] + item[1][1]), item[0]))
        return [(name, rate_in, rate_out) for name, (rate_in, rate_out) in latest[:count]]

    # ---- sampling ------------------------------------------------------------------------------

    def sample(self) -> None:
        """Take one sample now. The first one only records the counters (a rate needs two)."""
        now_s = self._clock.monotonic_s()
        previous_s, self._last_sample_s = self._last_sample_s, now_s
        elapsed = None if previous_s is None else now_s - previous_s
        last, self._last = self._last, {}
        sum_in = sum_out = 0
        active: dict[str, tuple[int, int]] = {}
        for topic in self._topics():
            if topic.closed:
                continue
            total_in, total_out = topic.rate_in.messages_total, _out_total(topic)
            if total_in == 0 and total_out == 0:
                continue  # never had traffic since it loaded: nothing to remember
            name = topic.full_name
            self._last[name] = (topic, total_in, total_out)
            before = last.get(name)
            # Not seen before, or reloaded since (its counters restarted from zero).
            base_in, base_out = (before[1], before[2]) if before is not None and before[0] is topic else (0, 0)
            delta_in, delta_out = max(0, total_in - base_in), max(0, total_out - base_out)
            sum_in += delta_in
            sum_out += delta_out
            if delta_in or delta_out or name in self._rings:
                active[name] = (delta_in, delta_out)
        if elapsed is None or elapsed <= 0:
            return
        self._last_sample_ms = self._clock.now_ms()
        self.samples_total += 1
        self._broker.push(sum_in / elapsed, sum_out / elapsed)
        self._update_rings(active, elapsed)

    def _update_rings(self, active: dict[str, tuple[int, int]], elapsed: float) -> None:
        for name in [n for n in self._rings if n not in self._last]:
            del self._rings[name]  # unloaded (or deleted) since the last sample
        for name, (delta_in, delta_out) in active.items():
            ring = self._rings.get(name)
            if ring is None:
                if self._topics_max == 0:
                    continue
                if len(self._rings) >= self._topics_max:
                    self._rings.popitem(last=False)
                ring = self._rings[name] = _Ring(self._points)
            ring.push(delta_in / elapsed, delta_out / elapsed)
            if delta_in or delta_out:
                self._rings.move_to_end(name)
            elif ring.idle_samples >= self._points:
                del self._rings[name]  # a whole window of zeros: nothing to draw

    # ---- the task ------------------------------------------------------------------------------

    def start(self) -> None:
        self.sample()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="rate-history")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            await self._clock.sleep(self.interval_s)
            try:
                self.sample()
            except Exception:  # a bug here must not end the history for good
                log.exception("rate history sample failed")
