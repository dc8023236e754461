"""How a partition's workers run the handler: coroutines on the loop, or threads.

A partition has N lanes (its workers); lane i holds, in arrival order, the messages whose key hashes
to i, as (ticket, batch, j) items in a deque: no task, future or Message exists for a message
until its lane takes it. A lane runs one message at a time, so a key's messages run in order.

    AsyncLanes    one task per lane that awaits the coroutine handler for each item; an idle lane
                  waits on one future, made when it empties and resolved by the next dispatch.
    ThreadLanes   a lane with items runs as one job in the executor (a "burst") that takes items
                  until the lane is empty, so a thread is handed work once per burst rather than
                  once per message. Completions go back to the loop through a deque, with one
                  call_soon_threadsafe per wake-up of the loop, not per message. A handler that
                  raises waits in its thread for the partition's Failures to decide (retry after
                  the backoff, dead-letter, or stop).

The process mode (_processes.py) implements the same two calls, wake and stop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from velamq.client._message import Message, ReceivedBatch
from velamq.client.ordered._failures import DONE, STOP, Failures
from velamq.client.ordered._progress import Item

Handler = Callable[[Message], Awaitable[object] | object]


class FailureHost(Protocol):
    failures: Failures


class LaneHost(Protocol):
    """What lanes need from their partition (PartitionRunner is one)."""

    lanes: list[deque[Item]]
    failures: Failures
    stopping: bool

    def message(self, batch: ReceivedBatch, j: int) -> Message: ...

    def complete(self, ticket: int) -> None: ...

    def lane_idle(self, lane: int) -> None: ...


class HandlerLanes(Protocol):
    def wake(self, lane: int) -> None:
        """Lane `lane` got items (it may be running already)."""

    async def stop(self, timeout_s: float) -> None:
        """Take no more items; wait up to timeout_s for handlers that run now."""


class AsyncLanes:
    """Coroutine handlers: one task per lane."""

    def __init__(self, host: LaneHost, handler: Callable[[Message], Awaitable[object]], name: str) -> None:
        self._host = host
        self._handler = handler
        loop = asyncio.get_running_loop()
        self._idle: list[asyncio.Future[None] | None] = [None] * len(host.lanes)
        self._tasks = [loop.create_task(self._run(i), name=f"{name}-worker-{i}") for i in range(len(host.lanes))]

    def wake(self, lane: int) -> None:
        idle = self._idle[lane]
        if idle is not None:
            self._idle[lane] = None
            if not idle.done():
                idle.set_result(None)

    async def _run(self, lane: int) -> None:
        host = self._host
        items = host.lanes[lane]
        handler = self._handler
        loop = asyncio.get_running_loop()
        while True:
            if not items:
                host.lane_idle(lane)
                idle = self._idle[lane] = loop.create_future()
                await idle
            if host.stopping:
                return  # what is left is not acknowledged: the broker delivers it again
            if not items:
                continue
            ticket, batch, j = items.popleft()
            message = host.message(batch, j)
            try:
                await handler(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not await retry_async(host, handler, message, exc):
                    return
            host.complete(ticket)

    async def stop(self, timeout_s: float) -> None:
        for lane in range(len(self._idle)):
            self.wake(lane)
        await finish_tasks(self._tasks, timeout_s)


class PoolJobs:
    """Burst jobs in an executor and what they finish, handed back to the loop: the common part of
    ThreadLanes and ThreadKeyWorkers (_key_workers.py). `complete` gets completed tickets, `idle`
    the marks (< 0) a job leaves when it ends."""

    def __init__(self, executor: concurrent.futures.Executor, complete: Callable[[int], None],
                 idle: Callable[[int], None]) -> None:
        self._executor = executor
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._stopping = False
        self._jobs: set[concurrent.futures.Future[None]] = set()
        self._done = Completions(self._loop, complete, idle)

    def _submit(self, burst: Callable[..., None], *args: Any) -> None:
        job = self._executor.submit(burst, *args)
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    def drain(self) -> None:
        self._done.drain()

    async def stop(self, timeout_s: float) -> None:
        with self._lock:
            self._stopping = True
        waiting = [asyncio.wrap_future(job) for job in list(self._jobs)]
        if waiting:
            # A thread still running after the timeout cannot be interrupted; it is not waited for.
            await asyncio.wait(waiting, timeout=max(0.0, timeout_s))
        self.drain()


class ThreadLanes(PoolJobs):
    """Plain-function handlers: each lane with items is one burst job in the executor."""

    def __init__(self, host: LaneHost, handler: Handler, executor: concurrent.futures.Executor) -> None:
        # Completed tickets (>= 0) and lanes gone idle (-1 - lane), from the threads to the loop.
        super().__init__(executor, host.complete, self._lane_idle)
        self._host = host
        self._handler = handler
        self._running = [False] * len(host.lanes)

    def wake(self, lane: int) -> None:
        with self._lock:
            if self._running[lane] or self._stopping:
                return
            self._running[lane] = True
        self._submit(self._burst, lane)

    def _burst(self, lane: int) -> None:
        items = self._host.lanes[lane]
        done = self._done.items
        try:
            while True:
                with self._lock:
                    if not items or self._stopping:
                        self._running[lane] = False
                        done.append(-1 - lane)
                        return
                    ticket, batch, j = items.popleft()
                if not call_in_thread(self._host, self._handler, self._loop, self._host.message(batch, j)):
                    with self._lock:
                        self._running[lane] = False
                    return
                self._done.push(ticket)
        finally:
            self._done.schedule()

    def _lane_idle(self, mark: int) -> None:
        if not self._running[-1 - mark]:  # not started again since
            self._host.lane_idle(-1 - mark)


class Completions:
    """What pool threads finished, handed to the loop: completed tickets (>= 0) and idle marks
    (< 0), with one call_soon_threadsafe per wake-up of the loop rather than one per message."""

    __slots__ = ("_complete", "_due", "_idle", "_loop", "items")

    def __init__(self, loop: asyncio.AbstractEventLoop, complete: Callable[[int], None],
                 idle: Callable[[int], None]) -> None:
        self._loop = loop
        self._complete = complete
        self._idle = idle
        self.items: deque[int] = deque()  # append() alone from a thread: schedule() must follow
        self._due = False

    def push(self, value: int) -> None:
        self.items.append(value)
        self.schedule()

    def schedule(self) -> None:
        if not self._due:
            self._due = True
            self._loop.call_soon_threadsafe(self.drain)

    def drain(self) -> None:
        """On the loop: apply what the threads finished."""
        self._due = False
        items = self.items
        while items:
            value = items.popleft()
            if value >= 0:
                self._complete(value)
            else:
                self._idle(value)


async def finish_tasks(tasks: list[asyncio.Task[None]], timeout_s: float) -> None:
    """Wait up to timeout_s for the workers' tasks; cancel those still running."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, timeout_s))
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def retry_async(host: FailureHost, handler: Callable[[Message], Awaitable[object]], message: Message,
                      error: Exception) -> bool:
    """Call again until the handler succeeds or the message is dead-lettered (True), or the
    consumer stops first (False: the message stays unacknowledged)."""
    attempts = 1
    while True:
        verdict = await host.failures.settle(message, attempts, error)
        if verdict == DONE:
            return True
        if verdict == STOP:
            return False
        attempts += 1
        try:
            await handler(message)
            return True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc


def call_in_thread(host: FailureHost, handler: Handler, loop: asyncio.AbstractEventLoop, message: Message) -> bool:
    """In a pool thread: the handler, retried as the partition's Failures decide. False: stop
    (the message stays unacknowledged)."""
    attempts = 0
    while True:
        attempts += 1
        try:
            result = handler(message)
            if inspect.isawaitable(result):
                # A plain function that returned a coroutine: run it on the loop rather than drop it.
                asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()
            return True
        except Exception as exc:
            settle = host.failures.settle(message, attempts, exc)
            verdict = asyncio.run_coroutine_threadsafe(settle, loop).result()
            if verdict == DONE:
                return True
            if verdict == STOP:
                return False


async def _awaited(result: Awaitable[Any]) -> object:
    return await result
