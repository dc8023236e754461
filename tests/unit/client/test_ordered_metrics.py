"""Effective parallelism and hot-key figures of the ordered consumer (OC-4), with explicit times."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from velamq.client.ordered._metrics import BusyTracker, KeyWindow, key_label


def test_effective_parallelism_is_time_weighted_busy_workers() -> None:
    busy = BusyTracker(now_s=0.0)
    busy.start(0.0)
    busy.start(0.0)
    busy.stop(1.0)  # two busy for 1 s
    busy.stop(2.0)  # one busy for 1 s
    busy.advance(5.0)  # idle for 3 s: does not count
    assert busy.busy_worker_seconds == pytest.approx(3.0)
    assert busy.active_seconds == pytest.approx(2.0)
    assert busy.effective_parallelism == pytest.approx(1.5)
    assert busy.max_busy == 2 and busy.busy == 0


def test_one_worker_at_a_time_is_parallelism_one() -> None:
    busy = BusyTracker(now_s=10.0)
    t = 10.0
    for _ in range(100):
        busy.start(t)
        t += 0.002
        busy.stop(t)
    assert busy.effective_parallelism == pytest.approx(1.0)
    assert busy.max_busy == 1
    assert BusyTracker(0.0).effective_parallelism == 0.0


def test_key_window_reports_the_dominant_key_and_worker() -> None:
    window = KeyWindow(size_messages=10)
    assert window.hottest_key() == (None, 0.0) and window.busiest_worker_share() == 0.0
    for i in range(10):
        window.add("hot" if i % 2 else f"k{i}", 1 if i % 2 else i % 3)
    assert window.hottest_key() == ("hot", 0.5)
    assert window.busiest_worker_share() >= 0.5
    for _ in range(10):
        window.add("other", 2)  # the window slides: "hot" is gone
    assert window.hottest_key() == ("other", 1.0)
    assert window.busiest_worker_share() == 1.0 and window.distinct_keys() == 1 and len(window) == 10


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(0, 3)), max_size=60),
       st.integers(min_value=1, max_value=20))
def test_key_window_counts_exactly_the_last_messages(entries: list[tuple[str | None, int]], size: int) -> None:
    window = KeyWindow(size)
    for key, worker in entries:
        window.add(key, worker)
    last = entries[-size:]
    if not last:
        return
    keys = Counter(k for k, _ in last)
    workers = Counter(w for _, w in last)
    assert window.hottest_key()[1] == pytest.approx(max(keys.values()) / len(last))
    assert window.busiest_worker_share() == pytest.approx(max(workers.values()) / len(last))
    assert window.distinct_keys() == len(keys)


def test_key_labels() -> None:
    assert key_label(None) is None and key_label("k") == "k" and key_label(b"k") == "k"
    assert key_label(b"\xff\x00") == "ff00"
