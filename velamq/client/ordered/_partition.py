"""One partition of the ordered consumer: its fetch loop, its N workers, its acknowledgements.

    fetch loop   receive() from the partition's own Consumer while the window has room
                 (max_in_flight messages received and not yet acknowledged); when it is full,
                 stop calling receive(). A Consumer gives FLOW permits back only when receive()
                 takes a message, so the broker stops after one receiver queue's worth: the
                 partition is paused, and memory stays bounded by max_in_flight +
                 receiver_queue_size messages (plus the rest of a batch entry the broker sent
                 whole). It resumes as soon as workers move the window (OC-3).
    dispatch     worker = hash(routing key) % N (see _ordered_progress); a message without a key
                 goes to worker 0 ("ordered": unkeyed messages keep their partition order among
                 themselves, like one more key) or to the next worker in turn ("round_robin").
    workers      each takes its messages one at a time, in arrival order, so a key's messages run
                 in order; different workers run at the same time (OC-1).
    acks         when a message completes, the window tells which contiguous prefix of the
                 partition is now done; only that is acknowledged (OC-2): cumulatively up to its
                 last id, or each id individually (ack_mode). A message that completes before an
                 earlier one waits, unacknowledged, until the earlier one is done. Prefixes are
                 handed to the consumer at most every ack_coalesce_ms (and on stop): its ack
                 tracker sends one ACK per ack_grouping_time_ms anyway and keeps only the highest
                 cumulative id, so calling it per message would only cost CPU.

Failures (never a lost message, never a skipped offset): a handler that raises is called again on
the same worker, after retry_initial_backoff_ms doubling up to retry_max_backoff_ms, so its key's
later messages wait behind it and the partition's acknowledged prefix does not pass it. With
max_attempts set, the message goes to the dead-letter topic after that many failed calls (and
only when the dead-letter topic has it is it counted as done and acknowledged); without it,
retries go on for ever and the partition pauses once its window is full. Negative
acknowledgement is deliberately not used: on a Failover or Exclusive subscription it makes the
broker redeliver everything unacknowledged of the partition, which would hand messages that are
still running in other workers to the consumer again, out of key order.

Partitions never wait for each other: each has its own Consumer, window, workers and pauses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from velamq._clock import Clock
from velamq.client._errors import AlreadyClosedError, InvalidConfigurationError
from velamq.client._message import Message, MessageId
from velamq.client.consumer._dead_letter import DeadLetterSender
from velamq.client.ordered._metrics import BusyTracker, KeyWindow, OrderedPartitionMetrics, id_label, key_label
from velamq.client.ordered._progress import PartitionWindow, routing_key, worker_of

log = logging.getLogger("velamq.client")

ACK_MODES = ("cumulative", "individual")
ack_coalesce_ms = 10
UNKEYED_MODES = ("ordered", "round_robin")
HandlerCall = Callable[[Message], Awaitable[object]]


class PartitionSource(Protocol):
    """What a runner needs from its partition's consumer (velamq.client.Consumer is one)."""

    async def receive(self, timeout_ms: int | None = None) -> Message: ...

    async def acknowledge(self, target: Message | MessageId) -> None: ...

    async def acknowledge_cumulative(self, target: Message | MessageId) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """What happens when the handler raises (see the module docstring)."""

    max_attempts: int | None = None  # None: retry for ever
    initial_backoff_ms: int = 100
    max_backoff_ms: int = 10_000
    dead_letter_topic: str | None = None

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise InvalidConfigurationError("max_attempts must be >= 1 (or None: retry for ever)")
        if self.max_attempts is not None and not self.dead_letter_topic:
            raise InvalidConfigurationError(
                "max_attempts needs a dead_letter_topic: a message that gives up must go somewhere, "
                "or it would be lost")
        if self.initial_backoff_ms < 0 or self.max_backoff_ms < self.initial_backoff_ms:
            raise InvalidConfigurationError("need 0 <= retry_initial_backoff_ms <= retry_max_backoff_ms")

    def backoff_s(self, failed_attempts: int) -> float:
        """The wait after the n-th failed call: initial, doubling, capped."""
        ms: int = self.initial_backoff_ms * (1 << min(max(0, failed_attempts - 1), 30))
        return min(ms, self.max_backoff_ms) / 1000


@dataclass(frozen=True, slots=True)
class PartitionSettings:
    parallelism: int
    max_in_flight: int
    ack_mode: str
    unkeyed: str
    retry: RetryPolicy
    key_window_messages: int


# A worker's queue item: (window ticket, message); None tells the worker to stop.
_Item = tuple[int, Message] | None


class PartitionRunner:
    def __init__(self, topic: str, partition: int, consumer: PartitionSource, call: HandlerCall,
                 settings: PartitionSettings, clock: Clock, dead_letters: DeadLetterSender | None) -> None:
        self.topic = topic
        self.partition = partition
        self.consumer = consumer
        self._call = call
        self.settings = settings
        self._clock = clock
        self._dead_letters = dead_letters
        n = settings.parallelism
        self.window = PartitionWindow(settings.max_in_flight)
        self.busy = BusyTracker(clock.monotonic_s())
        self.keys = KeyWindow(settings.key_window_messages)
        # Unbounded queues, bounded together by the window: the fetch loop adds only while it has room.
        self._queues: list[asyncio.Queue[_Item]] = [asyncio.Queue() for _ in range(n)]
        self._room = asyncio.Event()
        self._room.set()
        self._empty = asyncio.Event()
        self._empty.set()
        self._stop = asyncio.Event()
        self._next_unkeyed_worker = 0
        self._fetch_task: asyncio.Task[None] | None = None
        self._ack_timer: asyncio.TimerHandle | None = None
        self._ack_flushing: asyncio.Task[None] | None = None
        self._acks_due: list[MessageId] = []  # prefix ids not yet handed to the consumer
        self._workers: list[asyncio.Task[None]] = []
        self.received = 0
        self.completed = 0
        self.acknowledged = 0
        self.redeliveries_skipped = 0
        self.in_flight_max = 0
        self.pauses = 0
        self.paused_seconds = 0.0
        self._paused_since: float | None = None
        self.handler_failures = 0
        self.retries = 0
        self.dead_lettered = 0
        self.error: str | None = None

    def __repr__(self) -> str:
        return f"PartitionRunner({self.topic!r}, in_flight={len(self.window)})"

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._workers = [loop.create_task(self._work(i), name=f"{self.topic}-worker-{i}")
                         for i in range(self.settings.parallelism)]
        self._fetch_task = loop.create_task(self._fetch(), name=f"{self.topic}-fetch")

    # ---- fetching ------------------------------------------------------------------------------

    async def _fetch(self) -> None:
        while not self._stop.is_set():
            if self.window.full:
                await self._paused()
                continue
            try:
                message = await self.consumer.receive()
            except AlreadyClosedError:
                return
            except Exception as exc:  # the partition's consumer failed for good: only this partition stops
                self.error = f"{type(exc).__name__}: {exc}"
                log.error("%s: ordered consumer stops fetching this partition: %s", self.topic, exc)
                return
            mid = message.message_id
            if self.window.is_redelivery(mid):
                await self._skip_redelivery(message)
                continue
            self._dispatch(message)

    async def _paused(self) -> None:
        self._room.clear()
        self.pauses += 1
        self._paused_since = self._clock.monotonic_s()
        try:
            await self._room.wait()
        finally:
            self.paused_seconds += self._clock.monotonic_s() - self._paused_since
            self._paused_since = None

    async def _skip_redelivery(self, message: Message) -> None:
        """A message the window already took: it is in flight (acknowledged with the prefix) or was
        acknowledged already, and the broker lost that ack (restart): acknowledge it once more."""
        self.redeliveries_skipped += 1
        if self.window.is_acknowledged(message.message_id):
            try:
                await self.consumer.acknowledge(message)
            except AlreadyClosedError:
                pass

    def _dispatch(self, message: Message) -> None:
        key = routing_key(message)
        n = self.settings.parallelism
        if key is not None:
            worker = worker_of(key, n)
        elif self.settings.unkeyed == "ordered":
            worker = 0
        else:
            worker = self._next_unkeyed_worker
            self._next_unkeyed_worker = (worker + 1) % n
        ticket = self.window.add(message.message_id)
        self._empty.clear()
        self.received += 1
        self.in_flight_max = max(self.in_flight_max, len(self.window))
        self.keys.add(key, worker)
        self._queues[worker].put_nowait((ticket, message))

    # ---- working -------------------------------------------------------------------------------

    async def _work(self, index: int) -> None:
        queue = self._queues[index]
        while True:
            item = await queue.get()
            if item is None or self._stop.is_set():
                return  # what is left is not acknowledged: the broker delivers it again
            ticket, message = item
            self.busy.start(self._clock.monotonic_s())
            try:
                done = await self._handle(message)
            finally:
                self.busy.stop(self._clock.monotonic_s())
            if not done:
                return
            self.completed += 1
            prefix = self.window.complete(ticket)
            if prefix:
                self._acknowledge(prefix)
            if not self.window.full:
                self._room.set()
            if not len(self.window):
                self._empty.set()

    async def _handle(self, message: Message) -> bool:
        """Run the handler until it succeeds (True) or the message is dead-lettered (True);
        False when the consumer stops first (the message stays unacknowledged)."""
        policy = self.settings.retry
        attempts = 0
        while True:
            attempts += 1
            try:
                await self._call(message)
                return True
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
            self.handler_failures += 1
            if policy.max_attempts is not None and attempts >= policy.max_attempts:
                log.warning("%s: handler failed %d times on %s (%r); dead-lettering it", self.topic, attempts,
                            message.message_id, error)
                return await self._dead_letter(message)
            delay_s = policy.backoff_s(attempts)
            log.warning("%s: handler failed on %s (attempt %d: %r); retrying in %.3f s", self.topic,
                        message.message_id, attempts, error, delay_s)
            if not await self._backoff(delay_s):
                return False
            self.retries += 1

    async def _backoff(self, delay_s: float) -> bool:
        """Wait, unless the consumer stops first (False)."""
        if self._stop.is_set():
            return False
        try:
            await asyncio.wait_for(self._stop.wait(), delay_s)
        except TimeoutError:
            return True
        return False

    async def _dead_letter(self, message: Message) -> bool:
        assert self._dead_letters is not None  # RetryPolicy insists on a topic with max_attempts
        failures = 0
        while True:
            try:
                await self._dead_letters.send(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay_s = self.settings.retry.backoff_s(failures)
                log.warning("%s: cannot dead-letter %s (%s); retrying in %.3f s", self.topic, message.message_id,
                            exc, delay_s)
                if not await self._backoff(delay_s):
                    return False
                continue
            self.dead_lettered += 1
            return True

    def _acknowledge(self, prefix: list[MessageId]) -> None:
        self.acknowledged += len(prefix)
        if self.settings.ack_mode == "cumulative":
            self._acks_due[:] = prefix[-1:]  # only the end of the prefix matters
        else:
            self._acks_due.extend(prefix)
        if self._ack_timer is None:
            loop = asyncio.get_running_loop()
            self._ack_timer = loop.call_later(ack_coalesce_ms / 1000, self._flush_acks_later)

    def _flush_acks_later(self) -> None:
        self._ack_timer = None
        if self._ack_flushing is None or self._ack_flushing.done():
            self._ack_flushing = asyncio.get_running_loop().create_task(self._flush_acks())
        else:
            self._ack_timer = asyncio.get_running_loop().call_later(ack_coalesce_ms / 1000, self._flush_acks_later)

    async def _flush_acks(self) -> None:
        due, self._acks_due = self._acks_due, []
        if not due:
            return
        try:
            if self.settings.ack_mode == "cumulative":
                await self.consumer.acknowledge_cumulative(due[-1])
            else:
                for message_id in due:
                    await self.consumer.acknowledge(message_id)
        except AlreadyClosedError:
            pass  # closing: not acknowledged means delivered again, never lost

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
            try:
                await asyncio.wait_for(self._empty.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                log.warning("%s: %d messages not drained within %.1f s", self.topic, len(self.window), timeout_s)
        self._stop.set()
        for queue in self._queues:
            queue.put_nowait(None)
        if self._workers:
            _, pending = await asyncio.wait(self._workers, timeout=max(0.0, deadline - loop.time()))
            for task in pending:
                task.cancel()
            await asyncio.gather(*self._workers, return_exceptions=True)
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self._ack_flushing is not None:
            await asyncio.gather(self._ack_flushing, return_exceptions=True)
        await self._flush_acks()  # the consumer's close() then sends them

    def metrics(self) -> OrderedPartitionMetrics:
        now = self._clock.monotonic_s()
        self.busy.advance(now)
        paused_seconds = self.paused_seconds
        if self._paused_since is not None:
            paused_seconds += now - self._paused_since
        hottest, share = self.keys.hottest_key()
        return OrderedPartitionMetrics(
            topic=self.topic, partition=self.partition, parallelism=self.settings.parallelism,
            max_in_flight=self.settings.max_in_flight, received=self.received, completed=self.completed,
            acknowledged=self.acknowledged, redeliveries_skipped=self.redeliveries_skipped,
            in_flight=len(self.window), in_flight_max=self.in_flight_max,
            completed_behind_head=self.window.completed_behind_head, paused=self._paused_since is not None,
            pauses=self.pauses, paused_seconds=paused_seconds, busy_workers=self.busy.busy,
            max_busy_workers=self.busy.max_busy, busy_worker_seconds=self.busy.busy_worker_seconds,
            active_seconds=self.busy.active_seconds, elapsed_seconds=now - self.busy.started_s,
            handler_failures=self.handler_failures, retries=self.retries, dead_lettered=self.dead_lettered,
            hottest_key=key_label(hottest), hottest_key_share=share,
            busiest_worker_share=self.keys.busiest_worker_share(), distinct_keys_in_window=self.keys.distinct_keys(),
            last_acknowledged=id_label(self.window.acked), error=self.error)
