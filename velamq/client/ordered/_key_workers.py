"""A partition's N workers for key_assignment="free_worker": any free worker runs the next ready key.

The partition hands received messages to put() with their routing keys; a KeyQueue
(_progress.py) keeps them per key and says which key a free worker may start. A key runs one
message at a time, in arrival order, so order per key holds exactly as with fixed lanes; what
changes is that a worker is never idle while some other key has a message waiting.

    AsyncKeyWorkers   N tasks; a worker with nothing ready waits on a future of its own, and put()
                      resolves as many of those as there are keys ready. A worker that finishes
                      a message releases its key and takes the next ready one itself.
    ThreadKeyWorkers  up to N jobs in the executor at a time, each taking ready keys until none is
                      left (one submit per burst, not per message). put() runs on the loop and the
                      jobs in pool threads, so the queue is touched under one lock. Completions go
                      back to the loop in bulk, as with ThreadLanes.

Both report a worker busy when it takes a message after being idle and idle when it finds
nothing, so effective parallelism (OC-4) means the same as with fixed lanes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Protocol

from velamq.client._message import Message, ReceivedBatch
from velamq.client.ordered._failures import Failures
from velamq.client.ordered._lanes import Handler, PoolJobs, call_in_thread, finish_tasks, retry_async
from velamq.client.ordered._progress import Item, KeyQueue

_IDLE = -1  # in ThreadKeyWorkers' completion deque: a job ended (a worker went idle)


class KeyHost(Protocol):
    """What key workers need from their partition (PartitionRunner is one)."""

    failures: Failures
    stopping: bool

    def message(self, batch: ReceivedBatch, j: int) -> Message: ...

    def complete(self, ticket: int) -> None: ...

    def worker_busy(self) -> None: ...

    def worker_idle(self) -> None: ...


class KeyedHandlers(Protocol):
    def put(self, items: Sequence[Item], keys: Sequence[Hashable]) -> None:
        """Messages received, in partition order, with the key each must keep its order within."""

    async def stop(self, timeout_s: float) -> None:
        """Take no more messages; wait up to timeout_s for handlers that run now."""


class AsyncKeyWorkers:
    """Coroutine handlers: N tasks sharing the partition's KeyQueue."""

    def __init__(self, host: KeyHost, handler: Callable[[Message], Awaitable[object]], workers: int,
                 name: str) -> None:
        self._host = host
        self._handler = handler
        self._queue = KeyQueue()
        self._idle: list[asyncio.Future[None]] = []
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(), name=f"{name}-worker-{i}") for i in range(workers)]

    def put(self, items: Sequence[Item], keys: Sequence[Hashable]) -> None:
        self._queue.add_many(items, keys)
        self._wake(self._queue.ready)

    def _wake(self, count: int) -> None:
        idle = self._idle
        while count > 0 and idle:
            waiter = idle.pop()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    async def _run(self) -> None:
        host, queue, handler = self._host, self._queue, self._handler
        loop = asyncio.get_running_loop()
        busy = False
        while True:
            if host.stopping:
                return  # what is left is not acknowledged: the broker delivers it again
            taken = queue.take()
            if taken is None:
                if busy:
                    busy = False
                    host.worker_idle()
                waiter = loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            if not busy:
                busy = True
                host.worker_busy()
            (ticket, batch, j), key = taken
            message = host.message(batch, j)
            try:
                await handler(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not await retry_async(host, handler, message, exc):
                    return  # stopping: the key stays taken, its messages unacknowledged
            host.complete(ticket)
            queue.release(key)

    async def stop(self, timeout_s: float) -> None:
        self._wake(len(self._idle))
        await finish_tasks(self._tasks, timeout_s)


class ThreadKeyWorkers(PoolJobs):
    """Plain-function handlers: up to N burst jobs in the executor, sharing the KeyQueue."""

    def __init__(self, host: KeyHost, handler: Handler, workers: int, executor: concurrent.futures.Executor) -> None:
        super().__init__(executor, host.complete, lambda _: host.worker_idle())  # _IDLE: a job ended
        self._host = host
        self._handler = handler
        self._workers = workers
        self._queue = KeyQueue()  # under _lock, as _running and _stopping
        self._running = 0  # jobs submitted and not ended

    def put(self, items: Sequence[Item], keys: Sequence[Hashable]) -> None:
        with self._lock:
            queue = self._queue
            queue.add_many(items, keys)
            if self._stopping:
                return
            start = max(0, min(queue.ready, self._workers - self._running))
            self._running += start
        if start:
            # A job that ended put its idle mark in _done under the lock, before the slot it
            # freed was counted above: apply it first, so that busy workers never exceed N.
            self.drain()
        for _ in range(start):
            self._host.worker_busy()
            self._submit(self._burst)

    def _burst(self) -> None:
        queue, lock, done = self._queue, self._lock, self._done.items
        key: Hashable = None
        ticket = -1
        try:
            while True:
                with lock:
                    if ticket >= 0:
                        queue.release(key)
                    taken = None if self._stopping else queue.take()
                    if taken is None:
                        self._running -= 1
                        done.append(_IDLE)
                        return
                (ticket, batch, j), key = taken
                if not call_in_thread(self._host, self._handler, self._loop, self._host.message(batch, j)):
                    with lock:
                        self._running -= 1  # stopping: the key stays taken, its messages unacknowledged
                        done.append(_IDLE)
                    return
                self._done.push(ticket)
        finally:
            self._done.schedule()

