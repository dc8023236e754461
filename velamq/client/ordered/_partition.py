"""One partition of the ordered consumer: its fetch loop, its N lanes (workers), its acknowledgements.

    fetch loop   takes whatever the partition's Consumer has queued, up to the window's room, in
                 one batch_receive (ranges of received batches, no Message made); when the queue
                 is empty it waits in receive() for the next message. A Consumer gives FLOW
                 permits back only for what is taken, so while the window (max_in_flight messages
                 received and not yet acknowledged) is full and nothing is taken, the broker stops
                 after one receiver queue's worth: the partition is paused, and memory stays
                 bounded by max_in_flight + receiver_queue_size messages (plus the rest of a batch
                 entry the broker sent whole). It resumes once a quarter of the window is free
                 (one fetch for many messages rather than one per completion) (OC-3).
    dispatch     per received range: the keys are read from the batch's columns, hashed (cached),
                 and each message goes to lane hash(routing key) % N as a (ticket, batch, j) item
                 (see _ordered_progress); a message without a key goes to lane 0 ("ordered":
                 unkeyed messages keep their partition order among themselves, like one more key)
                 or to the next lane in turn ("round_robin").
    lanes        each runs its messages one at a time, in arrival order, so a key's messages run
                 in order; different lanes run at the same time (OC-1). How: _lanes.py
                 (coroutines, threads) and _processes.py (processes).
    acks         completing a ticket moves the window's contiguous completed prefix, or not (OC-2).
                 At most every ack_coalesce_ms the prefix is handed to the consumer: cumulatively
                 up to its last message, or every message of it individually (ack_mode, one call
                 for all of them). A cumulative position inside a batch entry costs the consumer an
                 ack set as long as the batch, so while the prefix ends inside an entry only the
                 last whole entry is acknowledged, and the position inside it at most every
                 partial_ack_interval_ms (and always on stop).

Failures (never a lost message, never a skipped offset) are _failures.py's: retried on the
same lane, so its key's later messages wait and the prefix does not pass them, or dead-lettered.
Negative acknowledgement is deliberately not used: on a Failover or Exclusive subscription it makes
the broker redeliver everything unacknowledged of the partition, which would hand messages that
are still running in other lanes to the consumer again, out of key order.

Partitions never wait for each other: each has its own Consumer, window, lanes and pauses.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from velamq._clock import Clock
from velamq.client._errors import AlreadyClosedError
from velamq.client._message import Message, MessageId, ReceivedBatch, message_at
from velamq.client._message_batch import Messages
from velamq.client.ordered._failures import Failures, RetryPolicy
from velamq.client.ordered._key_workers import KeyedHandlers
from velamq.client.ordered._lanes import HandlerLanes
from velamq.client.ordered._metrics import BusyTracker, KeyWindow, OrderedPartitionMetrics, id_label, key_label
from velamq.client.ordered._progress import Item, KeyHashes, PartitionWindow, RoutingKey, position

log = logging.getLogger("velamq.client")

ACK_MODES = ("cumulative", "individual")
UNKEYED_MODES = ("ordered", "round_robin")
KEY_ASSIGNMENTS = ("hash", "free_worker")
ack_coalesce_ms = 10
partial_ack_interval_ms = 100
# Lanes are made by the consumer once the runner exists (they need its lanes and failures): fixed
# lanes (HandlerLanes) for key_assignment "hash", shared workers (KeyedHandlers) for "free_worker".
LanesFactory = Callable[["PartitionRunner"], HandlerLanes | KeyedHandlers]


class PartitionSource(Protocol):
    """What a runner needs from its partition's consumer (velamq.client.Consumer is one)."""

    async def receive(self, timeout_ms: int | None = None) -> Message: ...

    async def batch_receive(self, max_messages: int | None = None, timeout_ms: int | None = None) -> Messages: ...

    async def acknowledge(self, target: Message | MessageId | Messages) -> None: ...

    async def acknowledge_cumulative(self, target: Message | MessageId) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PartitionSettings:
    parallelism: int
    max_in_flight: int
    ack_mode: str
    unkeyed: str
    retry: RetryPolicy
    key_window_messages: int
    key_assignment: str = "hash"

    @property
    def free_workers(self) -> bool:
        """Workers shared by keys (key_assignment "free_worker"). With one worker both assignments
        run the partition in its order, and the fixed lane is the cheaper way to do it."""
        return self.key_assignment == "free_worker" and self.parallelism > 1


class PartitionRunner:
    def __init__(self, topic: str, partition: int, consumer: PartitionSource, lanes: LanesFactory,
                 settings: PartitionSettings, clock: Clock, failures: Failures, hashes: KeyHashes) -> None:
        self.topic = topic
        self.partition = partition
        self.consumer = consumer
        self.settings = settings
        self._clock = clock
        self.failures = failures
        self._hash = hashes
        n = settings.parallelism
        self.window = PartitionWindow(settings.max_in_flight)
        self.busy = BusyTracker(clock.monotonic_s())
        self.keys = KeyWindow(settings.key_window_messages)
        # Unbounded deques, bounded together by the window: the fetch loop adds only while it has room.
        self.lanes: list[deque[Item]] = [deque() for _ in range(n)]
        self._lane_busy = [False] * n
        self._make_lanes = lanes
        self._handlers: HandlerLanes | None = None  # key_assignment "hash"
        self._keyed: KeyedHandlers | None = None  # key_assignment "free_worker"
        self._decoder: Any = None  # the consumer's schema decoder, from its Messages
        self._room: asyncio.Future[None] | None = None  # the paused fetch loop waits on it
        # A paused partition resumes when a quarter of its window is free, not at every completion:
        # one fetch for many messages instead of a wake-up, a receive and a dispatch per message.
        self._resume_room = max(1, settings.max_in_flight // 4)
        self._empty: asyncio.Future[None] | None = None  # a draining stop waits on it
        self.stopping = False  # set by stop(): lanes take no more messages
        self._next_unkeyed_lane = 0
        self._fetch_task: asyncio.Task[None] | None = None
        self._ack_timer: asyncio.TimerHandle | None = None
        self._ack_flushing: asyncio.Task[None] | None = None
        self._ack_due: list[tuple[ReceivedBatch, int, int]] = []  # prefix ranges not yet handed over
        self._partial_acked_s = 0.0
        self.received = self.completed = self.redeliveries_skipped = 0
        self.in_flight_max = self.pauses = 0
        self.paused_seconds = 0.0
        self._paused_since: float | None = None
        self.error: str | None = None

    def __repr__(self) -> str:
        return f"PartitionRunner({self.topic!r}, in_flight={len(self.window)})"

    @property
    def acknowledged(self) -> int:
        """Messages in the completed prefix: acknowledged, or handed to the consumer within ack_coalesce_ms."""
        return self.window.prefix_count

    def start(self) -> None:
        handlers = self._make_lanes(self)
        if self.settings.free_workers:
            self._keyed = cast(KeyedHandlers, handlers)
        else:
            self._handlers = cast(HandlerLanes, handlers)
        self._fetch_task = asyncio.get_running_loop().create_task(self._fetch(), name=f"{self.topic}-fetch")

    # ---- fetching ------------------------------------------------------------------------------

    async def _fetch(self) -> None:
        consumer, window = self.consumer, self.window
        while not self.stopping:
            room = window.room
            if room <= 0:
                await self._paused()
                continue
            try:
                messages = await consumer.batch_receive(room, 0)
                self._decoder = messages.decoder  # the consumer's schema decoder, empty or not
                if messages:
                    ranges = messages.ranges
                else:  # nothing queued: wait for the next message, then take the rest with it
                    one = await consumer.receive()
                    ranges = [(one._batch, one._j, one._j + 1)]
            except AlreadyClosedError:
                return
            except Exception as exc:  # the partition's consumer failed for good: only this partition stops
                self.error = f"{type(exc).__name__}: {exc}"
                log.error("%s: ordered consumer stops fetching this partition: %s", self.topic, exc)
                return
            for batch, first, end in ranges:
                new = window.new_from(batch, first, end)
                if new > first:
                    await self._skip_redelivery(batch, first, new)
                if new < end:
                    self._dispatch(batch, new, end)

    async def _paused(self) -> None:
        self.pauses += 1
        self._paused_since = self._clock.monotonic_s()
        self._room = asyncio.get_running_loop().create_future()
        try:
            await self._room
        finally:
            self._room = None
            self.paused_seconds += self._clock.monotonic_s() - self._paused_since
            self._paused_since = None

    async def _skip_redelivery(self, batch: ReceivedBatch, first: int, end: int) -> None:
        """Messages the window already took: in flight (acknowledged with the prefix) or
        acknowledged already, and the broker lost that ack (restart): acknowledge those again."""
        self.redeliveries_skipped += end - first
        acked = [j for j in range(first, end) if self.window.is_acknowledged(position(batch, j))]
        if acked:
            try:
                await self.consumer.acknowledge(Messages([(batch, acked[0], acked[-1] + 1)]))
            except AlreadyClosedError:
                pass

    def _dispatch(self, batch: ReceivedBatch, first: int, end: int) -> None:
        ticket = self.window.add(batch, first, end)
        self.received += end - first
        self.in_flight_max = max(self.in_flight_max, len(self.window))
        columns = batch.columns
        keys = _routing_keys(columns.ordering_keys, columns.keys, first, end)
        if self._keyed is not None:
            self._put_keyed(ticket, batch, first, end, keys)
            return
        n = self.settings.parallelism
        lanes = self.lanes
        if n == 1:
            workers = [0] * (end - first)
            lanes[0].extend([(ticket + i, batch, j) for i, j in enumerate(range(first, end))])
            self._wake(0)
        else:
            workers = self._spread(keys, n)
            for i, lane in enumerate(workers):
                lanes[lane].append((ticket + i, batch, first + i))
            for lane in set(workers):
                self._wake(lane)
        self.keys.add_many(keys, workers)

    def _put_keyed(self, ticket: int, batch: ReceivedBatch, first: int, end: int, keys: list[RoutingKey]) -> None:
        assert self._keyed is not None
        items = [(ticket + i, batch, j) for i, j in enumerate(range(first, end))]
        if self.settings.unkeyed == "ordered" or None not in keys:
            self._keyed.put(items, keys)
        else:  # round_robin: an unkeyed message waits for nothing (a key of its own: its ticket)
            self._keyed.put(items, [k if k is not None else -1 - ticket - i for i, k in enumerate(keys)])
        self.keys.add_many(keys, None)

    def _spread(self, keys: list[RoutingKey], n: int) -> list[int]:
        h = self._hash
        if self.settings.unkeyed == "ordered":
            return [h(k) % n if k is not None else 0 for k in keys]
        out = []
        for k in keys:
            if k is not None:
                out.append(h(k) % n)
            else:
                out.append(self._next_unkeyed_lane)
                self._next_unkeyed_lane = (self._next_unkeyed_lane + 1) % n
        return out

    def _wake(self, lane: int) -> None:
        if not self._lane_busy[lane]:
            self._lane_busy[lane] = True
            self.busy.start(self._clock.monotonic_s())
        assert self._handlers is not None
        self._handlers.wake(lane)

    # ---- what lanes call -----------------------------------------------------------------------

    def message(self, batch: ReceivedBatch, j: int) -> Message:
        if self._decoder is None:
            return message_at(batch, j)
        return self._decoder.decode_now(message_at(batch, j))  # type: ignore[no-any-return]

    def worker_busy(self) -> None:
        self.busy.start(self._clock.monotonic_s())

    def worker_idle(self) -> None:
        self.busy.stop(self._clock.monotonic_s())

    def lane_idle(self, lane: int) -> None:
        if self._lane_busy[lane]:
            self._lane_busy[lane] = False
            self.busy.stop(self._clock.monotonic_s())

    def complete(self, ticket: int) -> None:
        self.completed += 1
        if not self.window.complete(ticket):
            return  # completed behind an unfinished message: the prefix did not move
        if self._ack_timer is None:
            self._ack_timer = asyncio.get_running_loop().call_later(ack_coalesce_ms / 1000, self._flush_acks_later)
        if self._room is not None and self.window.room >= self._resume_room and not self._room.done():
            self._room.set_result(None)
        if self._empty is not None and not len(self.window) and not self._empty.done():
            self._empty.set_result(None)

    # ---- acknowledging -------------------------------------------------------------------------

    def _flush_acks_later(self) -> None:
        self._ack_timer = None
        if self._ack_flushing is None or self._ack_flushing.done():
            self._ack_flushing = asyncio.get_running_loop().create_task(self._flush_acks(final=False))
        else:
            self._ack_timer = asyncio.get_running_loop().call_later(ack_coalesce_ms / 1000, self._flush_acks_later)

    async def _flush_acks(self, final: bool) -> None:
        prefix = self.window.prefix()
        due = self._ack_due
        due.extend(prefix)
        if not due:
            return
        try:
            if self.settings.ack_mode == "individual":
                self._ack_due = []
                await self.consumer.acknowledge(Messages(due))
                return
            await self._ack_cumulative(due, final)
        except AlreadyClosedError:
            pass  # closing: not acknowledged means delivered again, never lost

    async def _ack_cumulative(self, due: list[tuple[ReceivedBatch, int, int]], final: bool) -> None:
        batch, _, end = due[-1]
        whole = end >= len(batch)
        now = self._clock.monotonic_s()
        if whole or final or now - self._partial_acked_s >= partial_ack_interval_ms / 1000:
            self._ack_due = []
            if not whole:
                self._partial_acked_s = now
            await self.consumer.acknowledge_cumulative(batch.message_id(end - 1))
            return
        # The prefix ends inside an entry: acknowledge the last entry it passed whole, if any.
        for k in range(len(due) - 2, -1, -1):
            b, _, e = due[k]
            if e >= len(b):
                self._ack_due = due[k + 1:]
                await self.consumer.acknowledge_cumulative(b.message_id(e - 1))
                return
        self._ack_due = due[-1:]

    # ---- stopping and metrics ------------------------------------------------------------------

    async def stop(self, drain: bool, timeout_s: float) -> None:
        """Stop fetching; with drain, finish everything already fetched; otherwise only the
        handlers running now. Whatever is left after timeout_s is cancelled (and redelivered)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if self._fetch_task is not None:
            self._fetch_task.cancel()
            await asyncio.gather(self._fetch_task, return_exceptions=True)
        if drain and len(self.window):
            self._empty = loop.create_future()
            try:
                await asyncio.wait_for(self._empty, max(0.0, deadline - loop.time()))
            except TimeoutError:
                log.warning("%s: %d messages not drained within %.1f s", self.topic, len(self.window), timeout_s)
        self.stopping = True
        self.failures.stopped.set()
        for handlers in (self._handlers, self._keyed):
            if handlers is not None:
                await handlers.stop(max(0.0, deadline - loop.time()))
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self._ack_flushing is not None:
            await asyncio.gather(self._ack_flushing, return_exceptions=True)
        await self._flush_acks(final=True)  # the consumer's close() then sends them

    def metrics(self) -> OrderedPartitionMetrics:
        now = self._clock.monotonic_s()
        self.busy.advance(now)
        paused_seconds = self.paused_seconds
        if self._paused_since is not None:
            paused_seconds += now - self._paused_since
        hottest, share, distinct = self.keys.key_figures()
        f = self.failures
        return OrderedPartitionMetrics(
            topic=self.topic, partition=self.partition, parallelism=self.settings.parallelism,
            max_in_flight=self.settings.max_in_flight, received=self.received, completed=self.completed,
            acknowledged=self.acknowledged,
            redeliveries_skipped=self.redeliveries_skipped,
            in_flight=len(self.window), in_flight_max=self.in_flight_max,
            completed_behind_head=self.window.completed_behind_head, paused=self._paused_since is not None,
            pauses=self.pauses, paused_seconds=paused_seconds, busy_workers=self.busy.busy,
            max_busy_workers=self.busy.max_busy, busy_worker_seconds=self.busy.busy_worker_seconds,
            active_seconds=self.busy.active_seconds, elapsed_seconds=now - self.busy.started_s,
            handler_failures=f.handler_failures, retries=f.retries, dead_lettered=f.dead_lettered,
            hottest_key=key_label(hottest), hottest_key_share=share,
            busiest_worker_share=self.keys.busiest_worker_share(), distinct_keys_in_window=distinct,
            last_acknowledged=id_label(self.window.acked, self.partition), error=self.error)


def _routing_keys(ordering_keys: list[bytes | None] | None, keys: list[str | None] | None, first: int,
                  end: int) -> list[RoutingKey]:
    """The routing key of messages first..end-1 of a batch: ordering key, else key, else None."""
    plain: list[RoutingKey] = [k or None for k in keys[first:end]] if keys is not None else [None] * (end - first)
    if ordering_keys is None:
        return plain
    return [o or k for o, k in zip(ordering_keys[first:end], plain, strict=True)]
