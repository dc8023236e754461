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

Item = tuple[int, ReceivedBatch, int]  # (window ticket, batch, index of the message in the batch)
Handler = Callable[[Message], Awaitable[object] | object]


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
                if not await self._retry(message, exc):
                    return
            host.complete(ticket)

    async def _retry(self, message: Message, error: Exception) -> bool:
        """Call again until the handler succeeds or the message is dead-lettered (True), or the
        consumer stops first (False: the message stays unacknowledged)."""
        attempts = 1
        while True:
            verdict = await self._host.failures.settle(message, attempts, error)
            if verdict == DONE:
                return True
            if verdict == STOP:
                return False
            attempts += 1
            try:
                await self._handler(message)
                return True
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc

    async def stop(self, timeout_s: float) -> None:
        for lane in range(len(self._idle)):
            self.wake(lane)
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=max(0.0, timeout_s))
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class ThreadLanes:
    """Plain-function handlers: each lane with items is one burst job in the executor."""

    def __init__(self, host: LaneHost, handler: Handler, executor: concurrent.futures.Executor) -> None:
        self._host = host
        self._handler = handler
        self._executor = executor
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._running = [False] * len(host.lanes)
        self._jobs: set[concurrent.futures.Future[None]] = set()
        self._stopping = False
        # Completed tickets (>= 0) and lanes gone idle (-1 - lane), from the threads to the loop.
        self._done: deque[int] = deque()
        self._drain_due = False

    def wake(self, lane: int) -> None:
        with self._lock:
            if self._running[lane] or self._stopping:
                return
            self._running[lane] = True
        job = self._executor.submit(self._burst, lane)
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    def _burst(self, lane: int) -> None:
        items = self._host.lanes[lane]
        done = self._done
        try:
            while True:
                with self._lock:
                    if not items or self._stopping:
                        self._running[lane] = False
                        done.append(-1 - lane)
                        return
                    ticket, batch, j = items.popleft()
                if not self._call(self._host.message(batch, j)):
                    with self._lock:
                        self._running[lane] = False
                    return
                done.append(ticket)
                if not self._drain_due:
                    self._drain_due = True
                    self._loop.call_soon_threadsafe(self.drain)
        finally:
            if not self._drain_due:
                self._drain_due = True
                self._loop.call_soon_threadsafe(self.drain)

    def _call(self, message: Message) -> bool:
        attempts = 0
        while True:
            attempts += 1
            try:
                result = self._handler(message)
                if inspect.isawaitable(result):
                    # A plain function that returned a coroutine: run it on the loop rather than drop it.
                    asyncio.run_coroutine_threadsafe(_awaited(result), self._loop).result()
                return True
            except Exception as exc:
                settle = self._host.failures.settle(message, attempts, exc)
                verdict = asyncio.run_coroutine_threadsafe(settle, self._loop).result()
                if verdict == DONE:
                    return True
                if verdict == STOP:
                    return False

    def drain(self) -> None:
        """On the loop: apply what the threads finished."""
        self._drain_due = False
        host, done = self._host, self._done
        while done:
            ticket = done.popleft()
            if ticket >= 0:
                host.complete(ticket)
            elif not self._running[-1 - ticket]:
                host.lane_idle(-1 - ticket)

    async def stop(self, timeout_s: float) -> None:
        with self._lock:
            self._stopping = True
        jobs = [asyncio.wrap_future(job) for job in list(self._jobs)]
        if jobs:
            # A thread still running after the timeout cannot be interrupted; it is not waited for.
            await asyncio.wait(jobs, timeout=max(0.0, timeout_s))
        self.drain()


async def _awaited(result: Awaitable[Any]) -> object:
    return await result
