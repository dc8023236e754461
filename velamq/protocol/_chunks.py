"""Chunking (CH-1..CH-4), sans-IO: splitting on the producer, reassembly on the consumer.

Pure state, no clock and no I/O: the caller passes the time (now_ms) and the id of each chunk, and
acts on what comes back (an assembled payload, messages given up and whether to acknowledge them).

Producer: a payload (already compressed) above the chunk size is cut into chunks of at most that
size. Every chunk is an ordinary SEND with is_chunk=true, the SAME sequence id, and metadata

    uuid                  "<producer name>-<sequence id>"   (one per chunked message)
    num_chunks_from_msg   how many chunks
    total_chunk_msg_size  size of the whole (compressed) payload
    chunk_id              0 .. num_chunks_from_msg-1

Consumer: ChunkAssembler keeps one context per uuid (chunks of several producers interleave in a
topic), appends chunks that come in order, and hands back the whole payload with the ids of its
first and last chunk (the chunked message id, CH-2). It gives a message up when

    a chunk arrives out of order        the message is dropped (its chunks are left unacknowledged)
    max_pending_chunked_message is hit  the oldest context is evicted
    a context outlives expire_ms        it is evicted

An evicted message is acknowledged when auto_ack_oldest_chunked_message_on_queue_full is true
(it is gone for good), otherwise its chunks are left unacknowledged for redelivery. A chunk 0 for a
uuid that already has a context restarts it (the producer resent the message).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Generic, TypeVar

I = TypeVar("I")  # noqa: E741  (the chunk id type: the client's MessageId, anything in tests)


def split_chunks(payload: bytes, chunk_bytes: int) -> list[bytes]:
    """Cut a payload into chunks of at most chunk_bytes (at least one chunk, even when empty)."""
    if chunk_bytes <= 0:
        raise ValueError("chunk size must be positive")
    if not payload:
        return [b""]
    return [payload[i : i + chunk_bytes] for i in range(0, len(payload), chunk_bytes)]


def chunk_uuid(producer_name: str, sequence_id: int) -> str:
    return f"{producer_name}-{sequence_id}"


@dataclass(slots=True)
class _Context(Generic[I]):
    num_chunks: int
    total_bytes: int
    created_ms: int
    parts: list[bytes] = field(default_factory=list)
    ids: list[I] = field(default_factory=list)

    @property
    def last_chunk_id(self) -> int:
        return len(self.parts) - 1


@dataclass(frozen=True, slots=True)
class AssembledMessage(Generic[I]):
    uuid: str
    payload: bytes
    chunk_ids: tuple[I, ...]

    @property
    def first_id(self) -> I:
        return self.chunk_ids[0]

    @property
    def last_id(self) -> I:
        return self.chunk_ids[-1]


@dataclass(frozen=True, slots=True)
class EvictedMessage(Generic[I]):
    uuid: str
    chunk_ids: tuple[I, ...]
    reason: str  # "out_of_order" | "queue_full" | "expired"
    acknowledge: bool  # True: ack and forget; False: leave unacknowledged for redelivery


@dataclass(frozen=True, slots=True)
class ChunkOutcome(Generic[I]):
    assembled: AssembledMessage[I] | None = None
    evicted: tuple[EvictedMessage[I], ...] = ()


class ChunkAssembler(Generic[I]):
    """Reassembly of chunked messages, one context per uuid, bounded by max_pending_chunked_message
    contexts and by expire_ms per context (see the module docstring for when a message is given up)."""

    def __init__(self, max_pending_chunked_message: int, expire_ms: int, auto_ack_oldest_on_queue_full: bool) -> None:
        self.max_pending = max_pending_chunked_message
        self.expire_ms = expire_ms
        self.auto_ack = auto_ack_oldest_on_queue_full
        self._contexts: OrderedDict[str, _Context[I]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._contexts)

    @property
    def pending_bytes(self) -> int:
        return sum(sum(len(p) for p in c.parts) for c in self._contexts.values())

    def add(self, uuid: str, chunk_id: int, num_chunks: int, total_bytes: int, chunk_message_id: I,
            payload: bytes, now_ms: int) -> ChunkOutcome[I]:
        evicted: list[EvictedMessage[I]] = []
        ctx = self._contexts.get(uuid)
        if chunk_id == 0:
            if ctx is not None:  # resent from its start: the old context is useless
                del self._contexts[uuid]
            while len(self._contexts) >= self.max_pending:
                old_uuid, old = self._contexts.popitem(last=False)
                evicted.append(EvictedMessage(old_uuid, tuple(old.ids), "queue_full", self.auto_ack))
            ctx = _Context(num_chunks, total_bytes, now_ms)
            self._contexts[uuid] = ctx
        elif ctx is None or chunk_id != ctx.last_chunk_id + 1 or num_chunks != ctx.num_chunks:
            ids = (*ctx.ids, chunk_message_id) if ctx is not None else (chunk_message_id,)
            self._contexts.pop(uuid, None)
            evicted.append(EvictedMessage(uuid, ids, "out_of_order", False))
            return ChunkOutcome(None, tuple(evicted))
        ctx.parts.append(payload)
        ctx.ids.append(chunk_message_id)
        if len(ctx.parts) < ctx.num_chunks:
            return ChunkOutcome(None, tuple(evicted))
        del self._contexts[uuid]
        return ChunkOutcome(AssembledMessage(uuid, b"".join(ctx.parts), tuple(ctx.ids)), tuple(evicted))

    def expire(self, now_ms: int) -> list[EvictedMessage[I]]:
        """Evict contexts whose first chunk came more than expire_ms ago."""
        if self.expire_ms <= 0:
            return []
        out: list[EvictedMessage[I]] = []
        for uuid, ctx in list(self._contexts.items()):
            if now_ms - ctx.created_ms >= self.expire_ms:
                del self._contexts[uuid]
                out.append(EvictedMessage(uuid, tuple(ctx.ids), "expired", self.auto_ack))
        return out

    def clear(self) -> None:
        self._contexts.clear()
