"""Message metadata and the batch container (PR-6, PR-7, PR-8). Sans-IO: no asyncio here.

A batch collects messages until batching_max_messages or batching_max_bytes is reached (or the
producer's delay timer fires), then becomes one entry:

    MessageMetadata  producer_name, sequence_id = the first message's, publish_time,
                     num_messages_in_batch = N, highest_sequence_id = the last message's,
                     compression, uncompressed_size
    payload          compress( [u32 size][SingleMessageMetadata][payload] x N )   (velamq.protocol)

and one SEND with sequence_id = first, num_messages = N, highest_sequence_id = last. Each message
keeps its own item (its future and permits) in the order it was added.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from velamq.client._message import ProducerMessage
from velamq.protocol import build_batch, compress, pb

T = TypeVar("T")


def single_message_metadata(message: ProducerMessage, sequence_id: int) -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata(payload_size=len(message.value), sequence_id=sequence_id)
    for k, v in message.properties.items():
        single.properties.add(key=k, value=v)
    if message.key:
        single.partition_key = message.key
    if message.ordering_key is not None:
        single.ordering_key = message.ordering_key
    if message.event_time:
        single.event_time = message.event_time
    return single


def message_metadata(producer_name: str, message: ProducerMessage, sequence_id: int,
                     publish_time_ms: int) -> pb.MessageMetadata:
    """Metadata of one unbatched message (compression fields are set by the caller)."""
    meta = pb.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id, publish_time=publish_time_ms)
    for k, v in message.properties.items():
        meta.properties.add(key=k, value=v)
    if message.key:
        meta.partition_key = message.key
    if message.ordering_key is not None:
        meta.ordering_key = message.ordering_key
    if message.event_time:
        meta.event_time = message.event_time
    if message.deliver_at is not None:
        meta.deliver_at_time = message.deliver_at
    if message.replication_clusters:
        meta.replicate_to.extend(message.replication_clusters)
    elif message.disable_replication:
        meta.replicate_to.append("__local__")
    return meta


def compress_payload(meta: pb.MessageMetadata, codec: int, payload: bytes) -> bytes:
    """Compress a whole payload, recording codec and original size in the metadata (PR-7)."""
    meta.uncompressed_size = len(payload)
    if codec != pb.NONE:
        meta.compression = codec  # type: ignore[assignment]
    return compress(codec, payload)


@dataclass(frozen=True, slots=True)
class BuiltBatch(Generic[T]):
    metadata: pb.MessageMetadata
    payload: bytes  # compressed
    sequence_id: int
    highest_sequence_id: int
    items: Sequence[T]
    uncompressed_bytes: int


class BatchContainer(Generic[T]):
    """Accumulates messages of one partition producer; closes on count or bytes."""

    __slots__ = ("_entries", "_payload_bytes", "max_bytes", "max_messages")

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._entries: list[tuple[pb.SingleMessageMetadata, bytes, int, T]] = []
        self._payload_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def payload_bytes(self) -> int:
        return self._payload_bytes

    def has_space_for(self, size_bytes: int) -> bool:
        """An empty batch takes any message; otherwise both limits must hold after adding it."""
        if not self._entries:
            return True
        return len(self._entries) < self.max_messages and self._payload_bytes + size_bytes <= self.max_bytes

    def add(self, message: ProducerMessage, sequence_id: int, item: T) -> bool:
        """Add a message; True when the batch is now full and must be sent."""
        self._entries.append((single_message_metadata(message, sequence_id), message.value, sequence_id, item))
        self._payload_bytes += len(message.value)
        return self.is_full

    @property
    def is_full(self) -> bool:
        return len(self._entries) >= self.max_messages or self._payload_bytes >= self.max_bytes

    def drain_items(self) -> list[T]:
        """Empty the container without building it (on failure)."""
        items = [e[3] for e in self._entries]
        self._entries = []
        self._payload_bytes = 0
        return items

    def build(self, producer_name: str, codec: int, publish_time_ms: int) -> BuiltBatch[T]:
        entries = self._entries
        if not entries:
            raise ValueError("empty batch")
        self._entries = []
        self._payload_bytes = 0
        raw = build_batch((single, payload) for single, payload, _, _ in entries)
        first, last = entries[0][2], entries[-1][2]
        meta = pb.MessageMetadata(
            producer_name=producer_name,
            sequence_id=first,
            publish_time=publish_time_ms,
            num_messages_in_batch=len(entries),
            highest_sequence_id=last,
        )
        payload = compress_payload(meta, codec, raw)
        return BuiltBatch(meta, payload, first, last, [e[3] for e in entries], len(raw))
