"""start_eagerly: a request handler's first step runs at once; a task only for one that waits."""

from __future__ import annotations

import asyncio
import functools
import gc
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from wait_helpers import until

from velamq.broker.session._eager import start_eagerly


class Gate(asyncio.Future[Any]):
    """A future that tells when a task waits on it (a task's step adds its wake-up callback): the
    moment a task has taken over the handler's wait."""

    waited_on = False

    def add_done_callback(self, fn: Callable[[asyncio.Future[Any]], object], *, context: Any = None) -> None:
        self.waited_on = True
        super().add_done_callback(fn, context=context)


class BareYield:
    """What `await asyncio.sleep(0)` does inside a coroutine: one step that yields None."""

    def __await__(self) -> Any:
        yield


def on_a_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


@on_a_loop
async def test_a_handler_that_does_not_wait_finishes_without_a_task() -> None:
    ran: list[str] = []

    async def handler() -> None:
        ran.append("done")

    assert start_eagerly(asyncio.get_running_loop(), handler()) is None
    assert ran == ["done"]  # before this coroutine gave the loop a turn


@on_a_loop
async def test_a_handler_that_waits_runs_its_first_step_now_and_the_rest_as_a_task() -> None:
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[int] = loop.create_future()
    steps: list[object] = []

    async def handler() -> None:
        steps.append("first")
        steps.append(await gate)
        steps.append("after")

    task = start_eagerly(loop, handler())
    assert task is not None
    assert steps == ["first"]
    gate.set_result(7)
    await task
    assert steps == ["first", 7, "after"]


@on_a_loop
async def test_a_handler_waits_several_times_and_its_task_ends_when_it_does() -> None:
    loop = asyncio.get_running_loop()
    gates = [loop.create_future() for _ in range(3)]
    seen: list[int] = []

    async def handler() -> None:
        for gate in gates:
            seen.append(await gate)
        await BareYield()  # a bare yield, as a handler may do

    task = start_eagerly(loop, handler())
    assert task is not None
    for i, gate in enumerate(gates):
        gate.set_result(i)
        await until(lambda i=i: len(seen) > i)  # the task went past this wait
    await task
    assert seen == [0, 1, 2]


@on_a_loop
async def test_a_cancel_before_the_tasks_first_step_reaches_the_handler_where_it_waits() -> None:
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[None] = loop.create_future()
    outcome: list[str] = []

    async def handler() -> None:
        try:
            await gate
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        finally:
            outcome.append("finally")

    task = start_eagerly(loop, handler())
    assert task is not None
    task.cancel()  # at once, as a connection lost in the same turn does
    with pytest.raises(asyncio.CancelledError):
        await task
    assert outcome == ["cancelled", "finally"]
    assert task.cancelled()


@on_a_loop
async def test_a_cancel_while_waiting_cancels_what_the_handler_waits_on() -> None:
    loop = asyncio.get_running_loop()
    gate = Gate()

    async def handler() -> None:
        await gate

    task = start_eagerly(loop, handler())
    assert task is not None
    await until(lambda: gate.waited_on)  # the task's first step: it now waits on the gate itself
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gate.cancelled()


@on_a_loop
async def test_errors_before_and_after_the_first_wait_go_where_a_tasks_would() -> None:
    loop = asyncio.get_running_loop()

    async def fails_at_once() -> None:
        raise ValueError("at once")

    with pytest.raises(ValueError, match="at once"):
        start_eagerly(loop, fails_at_once())

    gate: asyncio.Future[None] = loop.create_future()

    async def fails_later() -> None:
        await gate
        raise ValueError("later")

    task = start_eagerly(loop, fails_later())
    assert task is not None
    gate.set_result(None)
    with pytest.raises(ValueError, match="later"):
        await task


def test_a_handler_cancelled_while_waiting_is_freed_without_the_garbage_collector() -> None:
    """A closed connection cancels its handlers: what they hold (the connection) must go by
    reference counting alone, with no cycle through the cancellation's traceback."""

    class Held:
        pass

    async def main() -> weakref.ref[Held]:
        loop = asyncio.get_running_loop()
        gate = Gate()

        async def handler(held: Held) -> None:
            await gate

        held = Held()
        task = start_eagerly(loop, handler(held))
        assert task is not None
        ref = weakref.ref(held)
        del held
        await until(lambda: gate.waited_on)  # the task's first step: it waits on the gate
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        del task
        return ref

    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        ref = asyncio.run(main())
        assert ref() is None
    finally:
        if enabled:
            gc.enable()
