"""The receiver queue: messages that arrived and wait for receive(), shared by every TopicConsumer
of one Consumer (so a multi-topic or partitioned consumer has one queue). Its size is bounded by
the FLOW permits the TopicConsumers grant, not by the queue itself.

message_available() is the has_message_available() rule (CO-5), from GET_LAST_MESSAGE_ID's answer.
"""

from __future__ import annotations

import asyncio
from collections import deque

from velamq.client._message import Message, MessageId


class ReceiverQueue:
    """Messages waiting for receive(), shared by every TopicConsumer of one Consumer."""

    def __init__(self) -> None:
        self._messages: deque[Message] = deque()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.closed_error: BaseException | None = None

    def __len__(self) -> int:
        return len(self._messages)

    def put(self, message: Message) -> None:
        self._messages.append(message)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    def snapshot(self) -> list[Message]:
        return list(self._messages)

    def get_nowait(self) -> Message | None:
        return self._messages.popleft() if self._messages else None

    async def wait(self) -> None:
        if self._messages:
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
        if self.closed_error is not None and not self._messages:
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
