"""The shared wait helpers (tests/wait_helpers.py): they return what the condition returned, await
an awaitable condition, and fail naming the condition. Conditions that never hold time out whatever
the machine's load, so the short deadlines here decide nothing by timing."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from wait_helpers import until, wait_until


def test_wait_until_returns_the_first_truthy_value() -> None:
    calls = itertools.count()
    assert wait_until(lambda: next(calls) >= 3 and "ready") == "ready"


def test_wait_until_fails_naming_what_it_waited_for_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for the flag \(last value: 0\)"):
        wait_until(lambda: 0, "the flag", timeout_s=0.05)


def test_without_a_name_the_failure_quotes_the_condition() -> None:
    flags = {"up": False}
    with pytest.raises(AssertionError, match=r"test_wait_helpers.py:\d+: lambda: flags\[\"up\"\]"):
        wait_until(lambda: flags["up"], timeout_s=0.05)


def test_a_callable_name_is_told_at_the_moment_of_failure() -> None:
    seen: list[int] = []

    def check() -> bool:
        seen.append(len(seen))
        return False

    with pytest.raises(AssertionError, match=r"waiting for a check \(after \d+ tries\)"):
        # 0.5 s: even a thread preempted for a while between its first check and the deadline
        # test polls again (the assertion below is about polling, not speed).
        wait_until(check, lambda: f"a check (after {len(seen)} tries)", timeout_s=0.5)
    assert len(seen) >= 2  # polled more than once within the deadline


def test_until_lets_the_loop_run_and_awaits_an_awaitable_condition() -> None:
    async def main() -> str:
        done = asyncio.Event()
        asyncio.get_running_loop().call_soon(done.set)

        async def ready() -> str | None:
            return "set" if done.is_set() else None

        return await until(ready, "the event")

    assert asyncio.run(main()) == "set"


def test_until_fails_naming_the_condition() -> None:
    async def main() -> None:
        await until(lambda: [], "an empty list to fill", timeout_s=0.05)

    with pytest.raises(AssertionError, match=r"waiting for an empty list to fill \(last value: \[\]\)"):
        asyncio.run(main())
