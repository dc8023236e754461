"""The receiver queue: received entries (ReceivedBatch, their messages as columns) waiting for the
application, shared by every TopicConsumer of one Consumer (so a multi-topic or partitioned
consumer has one queue). Its size is bounded by the FLOW permits the TopicConsumers grant, not by
the queue itself. Messages leave one at a time (pop) or as ranges of whole batches (pop_ranges,
for batch_receive): no object is made per message until the application asks for one.

message_available() is the has_message_available() rule (CO-5), from GET_LAST_MESSAGE_ID's answer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from velamq.client._message import MessageId, ReceivedBatch

# (batch, first, end): messages first..end-1 of a batch.
Range = tuple[ReceivedBatch, int, int]


class ReceiverQueue:
    """Messages waiting for receive(), shared by every TopicConsumer of one Consumer."""

    def __init__(self) -> None:
        self._batches: deque[ReceivedBatch] = deque()
        self._count = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.closed_error: BaseException | None = None

    def __len__(self) -> int:
        return self._count

    def put(self, batch: ReceivedBatch) -> None:
        n = len(batch) - batch.pos
        if n <= 0:
            return
        self._batches.append(batch)
        self._count += n
        while self._waiters and n > 0:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1

    def pop(self) -> tuple[ReceivedBatch, int] | None:
        """The next message (its batch and position), or None when the queue is empty."""
        batches = self._batches
        if not batches:
            return None
        batch = batches[0]
        j = batch.pos
        batch.pos = j + 1
        if j + 1 >= len(batch.columns.value_starts):
            batches.popleft()
        self._count -= 1
        return batch, j

    def pop_ranges(self, max_messages: int, max_bytes: int = 0, taken_bytes: int = 0) -> list[Range]:
        """Up to max_messages messages and, when max_bytes > 0, no more value bytes than
        max_bytes - taken_bytes (but at least one message when nothing was taken yet, as Pulsar's
        batch receive does), as ranges of whole batches in queue order."""
        out: list[Range] = []
        batches = self._batches
        while batches and max_messages > 0:
            batch = batches[0]
            first = batch.pos
            size = len(batch.columns.value_starts)
            end = min(size, first + max_messages)
            if max_bytes > 0:
                starts, ends = batch.columns.value_starts, batch.columns.value_ends
                # Values lie in order in the payload, so this span bounds their sum from above.
                if taken_bytes + ends[end - 1] - starts[first] > max_bytes:
                    k = first
                    while k < end and (taken_bytes + ends[k] - starts[k] <= max_bytes or taken_bytes == 0):
                        taken_bytes += ends[k] - starts[k]
                        k += 1
                    end = k
                else:
                    taken_bytes += sum(ends[first:end]) - sum(starts[first:end])
                if end == first:
                    break
            batch.pos = end
            if end >= size:
                batches.popleft()
            self._count -= end - first
            max_messages -= end - first
            out.append((batch, first, end))
            if end < size:
                break  # stopped inside a batch: a limit is reached
        return out

    def has_from(self, owner: object, generation: int) -> bool:
        return any(b.owner is owner and b.generation == generation for b in self._batches)

    def drop(self, which: Callable[[ReceivedBatch], bool]) -> int:
        """Remove the batches `which` selects; returns how many messages were removed."""
        kept: deque[ReceivedBatch] = deque()
        dropped = 0
        for batch in self._batches:
            if which(batch):
                dropped += len(batch) - batch.pos
            else:
                kept.append(batch)
        self._batches = kept
        self._count -= dropped
        return dropped

    async def wait(self) -> None:
        if self._count:
            return
        if self.closed_error is not None:
            raise self.closed_error
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        if self.closed_error is not None and not self._count:
            raise self.closed_error

    def close(self, error: BaseException) -> None:
        self.closed_error = error
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)


def _after(a: MessageId, b: MessageId) -> bool:
    """a comes after b in the topic (batch indexes compared when both have one)."""
    if a.batch_index >= 0 and b.batch_index >= 0:
        return (a.ledger_id, a.entry_id, a.batch_index) > (b.ledger_id, b.entry_id, b.batch_index)
    return a.entry_key() > b.entry_key()


def message_available(last: MessageId, mark_delete: MessageId | None, last_dequeued: MessageId | None,
                      queued: bool, start: MessageId | None, start_inclusive: bool) -> bool:
    """Is there a message after what the application has seen?

    last          the topic's last message id (batch_index = last index of a batch entry)
    mark_delete   the subscription's mark-delete position (without it a reader at latest could
                  never tell; see the protocol notes)
    """
    if last.entry_id < 0:
        return False
    if last_dequeued is not None:
        return _after(last, last_dequeued)
    if queued:
        return True
    if start is not None and start not in (MessageId.earliest, MessageId.latest):
        start = start.first_chunk or start
        return not _after(start, last) if start_inclusive else _after(last, start)
    if mark_delete is not None:
        return last.entry_key() > mark_delete.entry_key()
    return start == MessageId.earliest
