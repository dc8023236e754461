"""Start a request handler at once, and make a task of it only if it has to wait.

A connection used to start every request (LOOKUP, PARTITIONED_METADATA, SUBSCRIBE, PRODUCER,
CLOSE_CONSUMER, ...) as a task of its own. Many of them finish without waiting for anything: a
lookup answered from the metadata store's caches, a close with nothing to persist. For those, the
task, its first scheduled step and its done callback are most of the cost of the request (issue 22:
about ten commands per created topic). `start_eagerly` runs the handler's first step right here, in
the callback that read the frame, as Python 3.12's eager tasks do; a handler that finishes returns
None, one that waits goes on as a task that first waits for what the handler waits on.

Each step of the handler still runs on the loop's thread and in the order frames arrived; the only
difference a handler can see is that its first step runs outside any task (asyncio.current_task()
is None there, so `asyncio.timeout` may not be used before the handler's first wait).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

_STARTED: Any = object()


class _Rest(Coroutine[Any, Any, None]):
    """The rest of a coroutine that already ran its first step: a task's first step hands it what
    that step yielded (the future the handler waits on); every later step goes to the coroutine.
    A cancellation before the task's first step reaches the handler where it waits, as it would
    have in a task of its own."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, None], first: Any) -> None:
        self._coro = coro
        self._first = first

    def send(self, value: Any) -> Any:
        first = self._first
        if first is not _STARTED:
            self._first = _STARTED
            return first
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._first = _STARTED
        try:
            if val is None and tb is None:
                return self._coro.throw(typ)
            return self._coro.throw(typ, val, tb)
        finally:
            # The exception's traceback holds this frame: without this, the frame's locals would
            # hold the exception, a reference cycle that only the garbage collector frees (and
            # with it the handler's frames and the connection they reference).
            typ = val = tb = None

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        raise TypeError("the rest of an eagerly started handler runs as a task, never awaited")


def start_eagerly(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run `coro` up to its first wait; None if it finished, else the task that runs the rest.
    An exception from the first step (the handler's own errors are its wrapper's to answer)
    propagates, as it would from the task."""
    try:
        first = coro.send(None)
    except StopIteration:
        return None
    return loop.create_task(_Rest(coro, first))
