"""Idle topics unload (issue 10): a topic nobody used for `idle_s` gives its memory back.

A loaded topic is *used* when it is looked up (PRODUCER, SUBSCRIBE, an admin call) and when its
last producer or consumer leaves; `Topic.last_used_s` keeps the broker clock's time of that. The
unloader holds at most one entry per loaded topic in a heap ordered by when the topic may first
be idle long enough (`last_used_s + idle_s`). Its one task sleeps on the clock until the earliest
entry is due, then takes the due entries, a bounded batch at a time:

    the topic was used since                  a new entry, due idle_s after that use
    the topic is busy (Topic.idle is False:   a new entry, due idle_s from now (it is checked
      producer, consumer, dispatch, delayed     again then; when its last producer or consumer
      entries, compaction, appends in flight)   leaves, that counts as a use)
    otherwise                                 unloaded, with the rest of the batch

So the work is proportional to the topics that become due, never a scan of every loaded topic, and
a topic that stays busy costs one heap entry per idle_s. A batch is unloaded together (the broker
closes its topics and their managed ledgers concurrently, so their cursors and entries share one
flush), then, with glibc, `malloc_trim(0)` gives the freed memory back to the system: RSS is what
an operator sees. CPython frees its own arenas by itself once they are empty; the trim returns
what the C allocator keeps (objects over 512 bytes, dict and list tables, SQLite's pages).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from velamq._clock import Clock

if TYPE_CHECKING:
    from velamq.broker.topic._topic import Topic

log = logging.getLogger(__name__)

# Topics unloaded together at most (their closes share a flush); the next batch follows at once.
unload_batch_max = 1000
# After the earliest entry is due, the unloader waits this share of idle_s more (at most a second)
# so that topics that become idle about together are unloaded in one batch, not one by one.
coalesce_share = 0.05
coalesce_s_max = 1.0


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's malloc_trim(0), or None where there is no such function (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


malloc_trim = _malloc_trim()


class IdleUnloader:
    """Finds the loaded topics that have been idle for `idle_s` of the clock and hands them, a batch
    at a time, to `unload` (the broker's, which closes them). `is_loaded(topic)` says whether the
    topic is still the broker's loaded one (not unloaded or deleted meanwhile). Counts what it did
    (`unloaded_total`, `batches_total`) for the metrics."""

    def __init__(
        self,
        clock: Clock,
        idle_s: float,
        is_loaded: Callable[[Topic], bool],
        unload: Callable[[list[Topic]], Awaitable[None]],
    ) -> None:
        self._clock = clock
        self.idle_s = idle_s
        self._is_loaded = is_loaded
        self._unload = unload
        self._heap: list[tuple[float, int, Topic]] = []
        self._order = itertools.count()
        self._changed: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        # The clock time the task sleeps until (None while it does not sleep on the clock): a
        # test on a ManualClock advances past it once the task sleeps.
        self.sleeping_until: float | None = None
        self.unloaded_total = 0
        self.batches_total = 0

    @property
    def enabled(self) -> bool:
        return self.idle_s > 0

    @property
    def tracked(self) -> int:
        """Topics the unloader holds an entry for (every loaded topic, once the first is due)."""
        return len(self._heap)

    def track(self, topic: Topic) -> None:
        """Watch a loaded topic (after a use: the broker sets topic.last_used_s first)."""
        if not self.enabled or topic.idle_queued:
            return
        topic.idle_queued = True
        self._push(topic.last_used_s + self.idle_s, topic)

    def _push(self, due_s: float, topic: Topic) -> None:
        heapq.heappush(self._heap, (due_s, next(self._order), topic))
        changed = self._changed
        if changed is not None and not changed.done() and self._heap[0][2] is topic:
            changed.set_result(None)  # the earliest entry changed: sleep again from it

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="idle-unload")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._heap.clear()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        coalesce_s = min(self.idle_s * coalesce_share, coalesce_s_max)
        while True:
            if not self._heap:
                self._changed = loop.create_future()
                await self._changed
                self._changed = None
                continue
            now = self._clock.monotonic_s()
            wait_s = self._heap[0][0] - now
            if wait_s > 0:
                self.sleeping_until = now + wait_s + coalesce_s
                try:
                    await self._clock.sleep(wait_s + coalesce_s)
                finally:
                    self.sleeping_until = None
            await self._unload_due()
            await asyncio.sleep(0)  # a batch at a time: other work runs in between

    async def _unload_due(self) -> None:
        # A method of its own: the batch (a local) is gone while the task sleeps.
        batch = self._take_due()
        if not batch:
            return
        try:
            await self._unload(batch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("unloading %d idle topics failed", len(batch))
        self.unloaded_total += len(batch)
        self.batches_total += 1
        del batch
        if malloc_trim is not None and not self._due_now():
            malloc_trim()

    def _due_now(self) -> bool:
        return bool(self._heap) and self._heap[0][0] <= self._clock.monotonic_s()

    def _take_due(self) -> list[Topic]:
        """Pop the due entries (a batch at most): the topics to unload now; used and busy ones
        get a new entry."""
        now = self._clock.monotonic_s()
        heap = self._heap
        batch: list[Topic] = []
        requeue: list[Topic] = []
        while heap and heap[0][0] <= now and len(batch) < unload_batch_max:
            _, _, topic = heapq.heappop(heap)
            topic.idle_queued = False
            if topic.closed or not self._is_loaded(topic):
                continue
            if topic.last_used_s + self.idle_s > now:
                requeue.append(topic)  # used since: due idle_s after that use
            elif not topic.idle:
                topic.last_used_s = now  # busy: look again in idle_s
                requeue.append(topic)
            else:
                batch.append(topic)
        for topic in requeue:
            self.track(topic)
        return batch
