"""Waiting for a condition in a test: the one poll loop of the test tree, sync and async.

A test never sleeps a fixed time and then asserts (CI runs on two loaded cores): it waits until the
state it needs holds, with a deadline that is only an upper bound, never a figure the test relies
on. Both helpers poll at once, then at intervals that start at 1 ms and double up to `interval_s`
(a quick answer when the condition holds soon, little load on a broker polled over HTTP when it
takes seconds), and fail with an AssertionError that names the condition and its last value.

Importable as a top-level module from every test directory (tests/conftest.py puts tests/ on the
path, as it does tests/interop for interop_helpers).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

What = str | Callable[[], str] | None  # what is awaited, for the failure message

DEFAULT_TIMEOUT_S = 60.0  # only an upper bound: what a test takes when it fails
_FIRST_INTERVAL_S = 0.001


def wait_until(condition: Callable[[], T], what: What = None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
               interval_s: float = 0.05) -> T:
    """Call `condition()` until it returns something truthy and return that; fail after timeout_s,
    naming `what` (a text, or a function that tells it at that moment, e.g. with the last state
    seen; by default the condition's source line)."""
    deadline = time.monotonic() + timeout_s
    pause = _FIRST_INTERVAL_S
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(condition, what, timeout_s, value))
        time.sleep(pause)
        pause = min(pause * 2, interval_s)


async def until(condition: Callable[[], T | Awaitable[T]], what: What = None, *,
                timeout_s: float = DEFAULT_TIMEOUT_S, interval_s: float = 0.02) -> T:
    """The async form of wait_until: sleeps on the event loop between checks (so the tasks that make
    the condition hold run), and awaits the condition's result when it is awaitable."""
    deadline = time.monotonic() + timeout_s
    pause = _FIRST_INTERVAL_S
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(condition, what, timeout_s, value))
        await asyncio.sleep(pause)
        pause = min(pause * 2, interval_s)


def _timed_out(condition: Callable[..., Any], what: What, timeout_s: float, value: object) -> str:
    told = what() if callable(what) else what
    return f"timed out after {timeout_s:g} s waiting for {told or describe(condition)} (last value: {value!r:.200})"


def describe(condition: Callable[..., Any]) -> str:
    """Where a condition is written and how it reads: `file:line: lambda: ...` or `file:line: name()`."""
    code = getattr(condition, "__code__", None)
    if code is None:
        return repr(condition)
    where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
    name = getattr(condition, "__qualname__", "condition")
    if code.co_name != "<lambda>":
        return f"{where}: {name}()"
    try:
        source = " ".join(inspect.getsource(condition).split())
    except (OSError, TypeError):
        return f"{where}: a lambda"
    text = source[source.find("lambda"):]
    while text.count(")") > text.count("(") and text.endswith(")"):  # the call the lambda is written in
        text = text[:-1]
    return f"{where}: {text[:200]}"
