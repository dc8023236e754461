"""RateLimitedLog: one line per key per interval of the injected clock, the rest counted and told."""

from __future__ import annotations

import logging

import pytest

from velamq import _log_limit
from velamq._clock import ManualClock
from velamq._log_limit import RateLimitedLog


def test_one_line_per_key_per_interval_and_the_count_of_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    log = RateLimitedLog(logging.getLogger("test.limit"), clock, interval_s=60)
    with caplog.at_level(logging.WARNING, logger="test.limit"):
        assert log.warning("refused", "refusing %s", "a")
        for _ in range(1000):
            assert not log.warning("refused", "refusing %s", "b")
        assert log.warning("other", "another kind")  # keys are independent
        clock.advance(59.9)
        assert not log.warning("refused", "refusing %s", "c")
        clock.advance(0.1)
        assert log.warning("refused", "refusing %s", "d")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refusing a", "another kind", "refusing d (and 1001 more like it in the last 60 s)"]
    assert log.suppressed_total == 1001


def test_the_table_of_keys_is_bounded(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(_log_limit, "keys_max", 3)
    log = RateLimitedLog(logging.getLogger("test.limit.keys"), ManualClock())
    with caplog.at_level(logging.INFO, logger="test.limit.keys"):
        for key in ("a", "b", "c", "d"):
            log.info(key, key)
        assert len(log._keys) == 3
        assert log.info("a", "a again")  # "a" was forgotten first: it logs again
    assert [r.getMessage() for r in caplog.records] == ["a", "b", "c", "d", "a again"]
