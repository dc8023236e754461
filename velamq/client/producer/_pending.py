"""The pending queue of a partition producer: sends written (or to be written) and waiting for their
receipt, in sequence-id order (vivo's send path steps 10 to 12, PR-6, PR-9).

    SendOp          one SEND frame: a batch, an unbatched message or one chunk, with the pending
                    permits and memory it holds and the futures its receipt completes
    append(op)      the op joins the queue (the producer writes its frame when connected)
    frames()        every pending frame, in order: what a reconnected producer writes again
    on_receipt()    SEND_RECEIPT for the head op: permits and memory back, each message's future
                    completed with its id (batch index i of n; a chunked message on its last chunk)
    send timeout    when the head op is older than send_timeout_ms, `on_timeout` is called (the
                    producer then fails everything pending, the open batch included)

Receipts come in the order the ops were written; one for a later op than the head means the broker
lost something, and the producer reconnects (which resends everything pending).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from velamq._clock import Clock
from velamq.client._errors import SendTimeoutError
from velamq.client._message import MessageId, ProducerMessage
from velamq.client.producer._backpressure import MemoryLimit, Permits
from velamq.client.producer._bulk_send import BulkPart

log = logging.getLogger("velamq.client")
# (message, its id or None, the error or None): the interceptors' on_acknowledgement.
Notify = Callable[[ProducerMessage, MessageId | None, BaseException | None], None]


@dataclass(slots=True)
class PendingMessage:
    """One message waiting for its receipt."""

    message: ProducerMessage
    future: asyncio.Future[MessageId]


@dataclass(slots=True)
class ChunkContext:
    """Shared by the chunks of one message: the id of its first chunk, once its receipt came."""

    first_id: MessageId | None = None


@dataclass(slots=True)
class SendOp:
    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    frame: bytes
    items: list[PendingMessage | BulkPart]  # a BulkPart: a run of a bulk send's messages (send_many)
    created_s: float
    permits: int
    memory_bytes: int
    batched: bool = False
    chunk: ChunkContext | None = None
    last_chunk: bool = False
    entry_bytes: int = 0
    done: bool = False


class Receipt(enum.Enum):
    COMPLETED = "completed"  # the head op is done
    STALE = "stale"  # for an op that already failed (timed out): ignored
    OUT_OF_ORDER = "out_of_order"  # for a later op than the head: the broker lost something


class PendingSends:
    """The ops of one partition producer between their SEND and their receipt, oldest first. Each
    op holds its pending permits and memory until its receipt or failure gives them back; every
    message's future is completed exactly once, with an id or an error."""

    def __init__(self, topic: str, partition: int, send_timeout_ms: int, permits: Permits, memory: MemoryLimit,
                 clock: Clock, notify: Notify, on_timeout: Callable[[BaseException], None]) -> None:
        self.topic = topic
        self.partition = partition
        self.send_timeout_ms = send_timeout_ms
        self.permits = permits
        self.memory = memory
        self._clock = clock
        self._notify = notify
        self._on_timeout = on_timeout
        self._ops: deque[SendOp] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self.last_sequence_id_published = -1

    def __len__(self) -> int:
        return len(self._ops)

    @property
    def message_count(self) -> int:
        return sum(op.num_messages for op in self._ops)

    def append(self, op: SendOp) -> None:
        self._ops.append(op)
        self.arm_timeout()

    def frames(self) -> Iterator[bytes]:
        return (op.frame for op in self._ops)

    def futures(self) -> list[asyncio.Future[Any]]:
        out: dict[int, asyncio.Future[Any]] = {}
        for op in self._ops:
            for item in op.items:
                future = item.future if isinstance(item, PendingMessage) else item.bulk.future
                out[id(future)] = future
        return list(out.values())

    # ---- receipts ------------------------------------------------------------------------------

    def on_receipt(self, sequence_id: int, ledger_id: int, entry_id: int) -> Receipt:
        if not self._ops:
            return Receipt.STALE
        op = self._ops[0]
        if sequence_id < op.sequence_id:
            return Receipt.STALE  # a receipt for something that already timed out
        if sequence_id > op.highest_sequence_id:
            return Receipt.OUT_OF_ORDER
        self._ops.popleft()
        self._complete(op, ledger_id, entry_id)
        return Receipt.COMPLETED

    def head_sequence_id(self) -> int | None:
        return self._ops[0].sequence_id if self._ops else None

    def _release(self, op: SendOp) -> None:
        op.done = True
        self.permits.release(op.permits)
        self.memory.release(op.memory_bytes)

    def _complete(self, op: SendOp, ledger_id: int, entry_id: int) -> None:
        self._release(op)
        self.last_sequence_id_published = max(self.last_sequence_id_published, op.highest_sequence_id)
        partition, topic = self.partition, self.topic
        if op.chunk is not None:
            chunk_id = MessageId(ledger_id, entry_id, partition, topic=topic)
            if op.chunk.first_id is None:
                op.chunk.first_id = chunk_id
            if op.last_chunk:
                item = op.items[0]
                assert isinstance(item, PendingMessage)
                self._resolve(item, MessageId(ledger_id, entry_id, partition, first_chunk=op.chunk.first_id,
                                              topic=topic))
        elif op.batched:
            n = op.num_messages
            i = 0
            for item in op.items:
                if isinstance(item, PendingMessage):
                    self._resolve(item, MessageId(ledger_id, entry_id, partition, i, n, topic=topic))
                    i += 1
                else:
                    item.bulk.completed(item.offset, item.count, ledger_id, entry_id, partition, i, n)
                    i += item.count
        else:
            item = op.items[0]
            assert isinstance(item, PendingMessage)
            self._resolve(item, MessageId(ledger_id, entry_id, partition, topic=topic))

    def _resolve(self, item: PendingMessage, message_id: MessageId) -> None:
        if not item.future.done():
            item.future.set_result(message_id)
        self._notify(item.message, message_id, None)

    # ---- failures and timeouts -----------------------------------------------------------------

    def fail_items(self, items: list[PendingMessage | BulkPart], error: BaseException) -> None:
        for item in items:
            if isinstance(item, BulkPart):
                item.bulk.failed(error)
                continue
            if not item.future.done():
                item.future.set_exception(error)
                item.future.exception()  # a caller that never awaits does not get "never retrieved" noise
            self._notify(item.message, None, error)

    def fail_head(self, error: BaseException) -> None:
        """The broker refused the head op for good (SEND_ERROR ChecksumError)."""
        op = self._ops.popleft()
        if not op.done:
            self._release(op)
            self.fail_items(op.items, error)

    def fail_all(self, error: BaseException) -> None:
        while self._ops:
            op = self._ops.popleft()
            if not op.done:
                self._release(op)
                self.fail_items(op.items, error)

    def arm_timeout(self) -> None:
        if self._timer is not None or not self.send_timeout_ms or not self._ops:
            return
        due_s = self._ops[0].created_s + self.send_timeout_ms / 1000 - self._clock.monotonic_s()
        self._timer = asyncio.get_running_loop().call_later(max(0.0, due_s) + 0.001, self._check_timeout)

    def _check_timeout(self) -> None:
        self._timer = None
        if not self._ops:
            return
        head = self._ops[0]
        if self._clock.monotonic_s() - head.created_s >= self.send_timeout_ms / 1000:
            log.warning("%s: send timeout; failing %d pending sends", self.topic, len(self._ops))
            self._on_timeout(SendTimeoutError(self.topic, head.sequence_id, self.send_timeout_ms))
        self.arm_timeout()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
