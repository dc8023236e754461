"""The blocking consumer and reader (PR-10): receive and acknowledge without a trip to the event
loop's thread per message, as the official client's C++ core does it with its own threads.

    Prefetch      receive() serves messages from a local queue in the caller's thread. When it is
                  empty, one call on the loop waits for the first message and takes everything
                  queued (up to half the receiver queue) as ranges of received batches; the
                  FLOW permits of those messages go back then, so the broker keeps sending
                  while the application works through them.
    AckHandover   acknowledge() / acknowledge_cumulative() / negative_acknowledge() check what they
                  can in the caller's thread (closed consumer, wrong consumer, cumulative on a
                  shared subscription), then queue the acknowledgement and return; the loop takes
                  the queue in one callback, woken at most once per batch of acks. The ack leaves
                  with the group, as every acknowledgement does (ack_grouping_time_ms).

Stale messages are dropped on the way out, as the asyncio consumer does: a prefetched message of
an older subscription generation (reconnect, seek, redeliver_unacknowledged_messages) comes again.
Calls that must come after the acknowledgements made before them (seek, close, unsubscribe,
flush) run the handover first, on the loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from velamq.client._errors import AlreadyClosedError, OperationTimeoutError
from velamq.client._message import _NOT_DECODED, Message, MessageId, Range, ReceivedBatch
from velamq.client._message_batch import Messages, range_bytes
from velamq.client.blocking._loop import ClientLoop
from velamq.client.consumer._consumer import Consumer
from velamq.client.consumer._reader import Reader

log = logging.getLogger("velamq.client")
R = TypeVar("R")
_new_message = object.__new__
handover_delay_ms_max = 10  # acknowledgements reach the loop at most this late (or ack_grouping_time_ms)
Target = Message | MessageId | Messages


class AckHandover:
    """Acknowledgements from the application's threads to the loop, without waiting. The first one
    after a drain wakes the loop, which drains `delay_s` later (acks wait for the group anyway), so
    a thread acknowledging in a loop wakes it a hundred times a second at most, not per message."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay_s: float) -> None:
        self._loop = loop
        self._delay_s = delay_s
        self._items: deque[tuple[Callable[[Any], None], Any]] = deque()
        self._scheduled = False

    def put(self, operation: Callable[[Any], None], target: Any) -> None:
        self._items.append((operation, target))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon_threadsafe(self._arm)

    def _arm(self) -> None:
        if self._delay_s > 0:
            self._loop.call_later(self._delay_s, self.drain)
        else:
            self.drain()

    def drain(self) -> None:
        """On the loop: apply every queued acknowledgement, in order."""
        self._scheduled = False
        items = self._items
        failed = 0
        error: Exception | None = None
        while items:
            operation, target = items.popleft()
            try:
                operation(target)
            except Exception as exc:  # checked before queueing; what is left is a race with close
                failed += 1
                error = exc
        if failed:
            log.warning("%d acknowledgements could not be applied: %s", failed, error)


class Prefetch:
    """Messages taken in bulk from a Consumer's receiver queue, handed out in the caller's thread.

    They wait as (batch, position) pairs in a deque, whose popleft is atomic: any number of threads
    may receive at once without a lock, and the pair becomes the owner's last-taken position as is."""

    def __init__(self, loop: ClientLoop, consumer: Consumer, acks: AckHandover) -> None:
        self._loop = loop
        self._consumer = consumer
        self._acks = acks
        self._items: deque[tuple[ReceivedBatch, int]] = deque()
        self.batch_messages = max(1, consumer.config.receiver_queue_size // 2)

    def _check_open(self) -> None:
        if self._consumer._closed:
            raise AlreadyClosedError(f"{self._consumer.topic}: consumer is closed")

    def pop(self) -> Message | None:
        pop = self._items.popleft
        while True:
            try:
                item = pop()
            except IndexError:
                return None
            batch = item[0]
            owner = batch.owner
            if batch.generation == owner.generation:  # else stale: it comes again
                owner._last_taken = item
                message: Message = _new_message(Message)  # message_at(), inline: this is the hot path
                message._batch = batch
                message._j = item[1]
                message._id = None
                message._decoded = _NOT_DECODED
                return message

    def pop_ranges(self, max_messages: int, max_bytes: int) -> list[Range]:
        """Prefetched messages as ranges (for a batch receive after single receives)."""
        out: list[Range] = []
        used = 0
        pop = self._items.popleft
        while max_messages > 0 and (max_bytes <= 0 or used < max_bytes):
            try:
                item = pop()
            except IndexError:
                break
            batch, j = item
            c = batch.columns
            size = c.value_ends[j] - c.value_starts[j]
            if max_bytes > 0 and used and used + size > max_bytes:
                self._items.appendleft(item)
                break
            if batch.generation != batch.owner.generation:
                continue
            batch.owner._last_taken = item
            used += size
            max_messages -= 1
            if out and out[-1][0] is batch and out[-1][2] == j:
                out[-1] = (batch, out[-1][1], j + 1)
            else:
                out.append((batch, j, j + 1))
        return out

    def has_messages(self) -> bool:
        return any(batch.generation == batch.owner.generation for batch, _ in list(self._items))

    def receive(self, timeout_ms: int | None) -> Message:
        while True:
            if self._consumer._closed:
                raise AlreadyClosedError(f"{self._consumer.topic}: consumer is closed")
            message = self.pop()
            if message is not None:
                decoder = self._consumer._decoder
                if decoder is None:
                    return message
                # With a schema: decoded here, or on the loop when the writer's schema is to fetch.
                return decoder.decode_now(message) if decoder.ready(message) else \
                    self._loop.run(decoder.decode(message))
            for batch, first, end in self._loop.run(self._fetch(timeout_ms)):
                self._items.extend(zip(itertools.repeat(batch, end - first), range(first, end), strict=True))

    async def _fetch(self, timeout_ms: int | None) -> list[Range]:
        """On the loop: wait for the first message, then take what is queued (not yet handed out:
        the reader's resume position moves only as the application takes them)."""
        consumer = self._consumer
        self._acks.drain()  # on the loop anyway: hand the acknowledgements over now
        loop = asyncio.get_running_loop()
        deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        while True:
            if consumer._closed:
                raise AlreadyClosedError(f"{consumer.topic}: consumer is closed")
            ranges = consumer.take_ranges(self.batch_messages, handed_out=False)
            if ranges:
                return ranges
            if deadline is None:
                await consumer.queue.wait()
                continue
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await consumer.queue.wait()
            except TimeoutError:
                raise OperationTimeoutError(f"no message within {timeout_ms} ms") from None


class _BlockingReceiver:
    """What the blocking consumer and reader share: the prefetch and running calls on the loop."""

    def __init__(self, loop: ClientLoop, consumer: Consumer) -> None:
        self._loop = loop
        self._consumer = consumer
        grouping_ms = consumer.config.ack_grouping_time_ms
        self._acks = AckHandover(loop.loop, min(grouping_ms, handover_delay_ms_max) / 1000)
        self._prefetch = Prefetch(loop, consumer, self._acks)

    def _run_after_acks(self, coroutine: Coroutine[Any, Any, R]) -> R:
        async def after() -> R:
            self._acks.drain()
            return await coroutine

        return self._loop.run(after())

    @property
    def topic(self) -> str:
        return self._consumer.topic

    @property
    def subscription_name(self) -> str:
        return self._consumer.subscription

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    def is_end_of_topic(self) -> bool:
        """The topic is terminated and everything was received (Consumer.is_end_of_topic), the
        local prefetch included."""
        return not self._prefetch.has_messages() and self._consumer.is_end_of_topic()

    def get_last_message_id(self) -> MessageId:
        return self._loop.run(self._consumer.get_last_message_id())

    def _batch(self, max_messages: int | None, timeout_ms: int | None, max_bytes: int | None) -> Messages:
        self._prefetch._check_open()
        config = self._consumer.config
        policy = config.batch_receive_policy
        limit = policy.effective_max_messages(config.receiver_queue_size) if max_messages is None else max_messages
        limit_bytes = policy.max_num_bytes if max_bytes is None else max_bytes
        local = self._prefetch.pop_ranges(limit, limit_bytes)
        count = sum(end - first for _, first, end in local)
        used = sum(range_bytes(b, f, e) for b, f, e in local) if limit_bytes > 0 else 0
        if count >= limit or 0 < limit_bytes <= used:
            return self._messages(local)
        more = self._loop.run(self._consumer.batch_receive(
            limit - count, timeout_ms, max_bytes=limit_bytes - used if limit_bytes > 0 else 0))
        return self._messages(local + more.ranges)

    def _messages(self, ranges: list[Range]) -> Messages:
        if self._consumer._decoder is None:
            return Messages(ranges)
        return self._loop.run(self._consumer._bulk(ranges))  # fetches the writers' schemas they need

    def seek(self, target: Any) -> None:
        self._run_after_acks(self._consumer.seek(target))

    def close(self) -> None:
        self._run_after_acks(self._consumer.close())

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingConsumer(_BlockingReceiver):
    """A Consumer for the blocking Client: receive() from a local prefetch, acknowledgements handed
    to the loop without waiting; seek, close and the rest as plain calls."""

    def __init__(self, loop: ClientLoop, consumer: Consumer) -> None:
        super().__init__(loop, consumer)
        self.async_consumer = consumer

    def receive(self, timeout_ms: int | None = None) -> Message:
        return self._prefetch.receive(timeout_ms)

    def batch_receive(self, max_messages: int | None = None, timeout_ms: int | None = None, *,
                      max_bytes: int | None = None) -> Messages:
        """As Consumer.batch_receive: a Messages, acknowledged as a whole by acknowledge()."""
        return self._batch(max_messages, timeout_ms, max_bytes)

    def _check(self, target: Target) -> None:
        self._prefetch._check_open()
        consumer = self._consumer
        if isinstance(target, Messages):
            for batch, _, _ in target.ranges:
                consumer._own_child(batch)
        elif isinstance(target, Message) and target._owner is not None:
            consumer._own_child(target._batch)

    def acknowledge(self, target: Target | list[Message | MessageId]) -> None:
        if type(target) is Message:  # the per-message path, kept short
            owner = target._batch.owner
            consumer = self._consumer
            if consumer._closed:
                raise AlreadyClosedError(f"{consumer.topic}: consumer is closed")
            if owner is not None and consumer._children.get(owner.topic) is not owner:
                raise ValueError(f"message of {owner.topic} does not belong to this consumer")
            self._acks.put(consumer.acknowledge_now, target)
            return
        targets = target if isinstance(target, list) else [target]
        for t in targets:
            self._check(t)
        for t in targets:
            self._acks.put(self._consumer.acknowledge_now, t)

    def acknowledge_cumulative(self, target: Target) -> None:
        self._check(target)
        if self._consumer.config.subscription_type in ("shared", "key_shared"):
            raise ValueError("cumulative acknowledgement is not allowed on Shared / Key_Shared subscriptions")
        self._acks.put(self._consumer.acknowledge_cumulative_now, target)

    def negative_acknowledge(self, target: Target) -> None:
        self._check(target)
        self._acks.put(self._consumer.negative_acknowledge_now, target)

    def redeliver_unacknowledged_messages(self) -> None:
        self._run_after_acks(self._consumer.redeliver_unacknowledged_messages())

    def flush_acknowledgements(self) -> None:
        self._run_after_acks(self._consumer.flush_acknowledgements())

    def unsubscribe(self) -> None:
        self._run_after_acks(self._consumer.unsubscribe())

    def __iter__(self) -> Iterator[Message]:
        while True:
            try:
                yield self.receive()
            except AlreadyClosedError:
                return


class BlockingReader(_BlockingReceiver):
    """A Reader for the blocking Client: read_next() from a local prefetch, as BlockingConsumer."""

    def __init__(self, loop: ClientLoop, reader: Reader) -> None:
        super().__init__(loop, reader._consumer)
        self.async_reader = reader

    def read_next(self, timeout_ms: int | None = None) -> Message:
        return self._prefetch.receive(timeout_ms)

    def read_batch(self, max_messages: int | None = None, timeout_ms: int | None = None, *,
                   max_bytes: int | None = None) -> Messages:
        return self._batch(max_messages, timeout_ms, max_bytes)

    def has_message_available(self) -> bool:
        return self._prefetch.has_messages() or self._loop.run(self.async_reader.has_message_available())

    def __iter__(self) -> Iterator[Message]:
        while True:
            try:
                yield self.read_next()
            except AlreadyClosedError:
                return
