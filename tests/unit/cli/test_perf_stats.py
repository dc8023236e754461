"""velamq perf's instruments: histograms merge exactly (--processes), the token bucket holds its rate.

The token bucket runs on a fake clock here: the tests decide when each wake-up happens, late by a
random amount as on a loaded machine, and count what the bucket let through.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from velamq.cli._perf_stats import (
    PERCENTILES,
    LatencyHistogram,
    PerfError,
    TokenBucket,
    latency_us_max,
    merged,
)

latencies_us = st.lists(st.integers(min_value=0, max_value=latency_us_max), min_size=0, max_size=300)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@settings(max_examples=60, deadline=None)
@given(st.lists(latencies_us, min_size=1, max_size=4))
def test_merging_encoded_histograms_equals_recording_everything_in_one(parts: list[list[int]]) -> None:
    whole = LatencyHistogram()
    encoded = []
    for values in parts:
        part = LatencyHistogram()
        for v in values:
            part.record_us(v)
            whole.record_us(v)
        encoded.append(part.encode())
    total = merged(encoded)
    assert total.count == whole.count == sum(len(p) for p in parts)
    assert total.summary_ms() == whole.summary_ms()
    for percentile in (0.0, 1.0, 50.0, 90.0, 99.0, 99.99, 100.0):
        assert total.value_at_percentile_us(percentile) == whole.value_at_percentile_us(percentile)


@settings(max_examples=60, deadline=None)
@given(latencies_us.filter(bool))
def test_percentiles_are_ordered_and_within_a_thousandth(values: list[int]) -> None:
    h = LatencyHistogram()
    for v in values:
        h.record_us(v)
    summary = h.summary_ms()
    ordered = [summary[name] for name, _ in PERCENTILES] + [summary["max"]]
    assert ordered == sorted(ordered)
    exact_max = max(values)
    assert exact_max / 1000 <= summary["max"] <= exact_max * 1.001 / 1000 + 0.001


def test_out_of_range_values_are_clamped_and_counted() -> None:
    h = LatencyHistogram()
    h.record_us(-5)  # a publish time from a clock ahead of ours
    h.record_us(latency_us_max * 10)
    assert h.count == 2
    assert h.clamped == 1
    assert h.value_at_percentile_us(0) == 0
    assert h.value_at_percentile_us(100) >= latency_us_max


def test_an_empty_histogram_reports_zeros_and_merges() -> None:
    empty = LatencyHistogram()
    assert empty.summary_ms() == {"count": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "p99.9": 0.0,
                                  "max": 0.0}
    one = LatencyHistogram()
    one.record_us(1500)
    total = merged([empty.encode(), one.encode(), empty.encode()])
    assert total.count == 1
    assert total.summary_ms()["p50"] == pytest.approx(1.5, rel=1e-3)


@pytest.mark.parametrize("rate", [7.0, 500.0, 20_000.0])
def test_token_bucket_holds_its_rate_with_late_wakeups(rate: float) -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate, clock)
    rng = random.Random(1)
    taken = 0
    seconds = 20.0
    end = clock.now + seconds
    while clock.now < end:
        taken += bucket.take(64)
        # Sleep until the next token, but wake up late by up to 5 ms, as a busy loop does.
        clock.now += bucket.seconds_until_token() + rng.uniform(0.0, 0.005)
    # One token at the start, then `rate` per second: never more, and late wake-ups lose nothing.
    assert rate * seconds * 0.99 <= taken <= rate * seconds + 1


def test_token_bucket_does_not_drift_when_each_take_is_small() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000.0, clock)
    taken = 0
    for _ in range(10_000):  # 10 s in 1 ms steps that each arrive 0.3 ms late
        clock.now += 0.0013
        taken += bucket.take(1)
        taken += bucket.take(1) if bucket.seconds_until_token() == 0 else 0
    # A sleep-per-message limiter would send one message per 1.3 ms (770/s); the bucket keeps 1000/s.
    assert taken == pytest.approx(1000 * 13.0, rel=0.01)


def test_a_stall_gives_at_most_one_second_of_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(500.0, clock)
    assert bucket.take(10) == 1  # the first message goes at once
    assert bucket.take(10) == 0
    clock.now += 60.0
    assert bucket.take(10**9) == 500
    assert bucket.take(1) == 0
    assert bucket.seconds_until_token() == pytest.approx(1 / 500)


def test_a_bucket_needs_a_positive_rate() -> None:
    with pytest.raises(PerfError):
        TokenBucket(0, FakeClock())
