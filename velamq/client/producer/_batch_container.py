"""Message metadata and the batch container (PR-6, PR-7, PR-8). Sans-IO: no asyncio here.

A batch collects messages until batching_max_messages or batching_max_bytes is reached (or the
producer's delay timer fires), then becomes one entry:

    MessageMetadata  producer_name, sequence_id = the first message's, publish_time,
                     num_messages_in_batch = N, highest_sequence_id = the last message's,
                     compression, uncompressed_size
    payload          compress( [u32 size][SingleMessageMetadata][payload] x N )   (velamq.protocol's
                     encode_batch, from the container's columns: no protobuf object per message)

and one SEND with sequence_id = first, num_messages = N, highest_sequence_id = last. Each message
keeps its own item (its future and permits) in the order it was added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from velamq.client._message import ProducerMessage
from velamq.protocol import compress, encode_batch, pb

T = TypeVar("T")


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
    items: Sequence[T]  # what completes with the receipt, in message order (see BatchContainer)
    count: int
    uncompressed_bytes: int
    value_bytes: int


class BatchContainer(Generic[T]):
    """Accumulates messages of one partition producer, column by column; closes on count or bytes.

    Each add() brings one message and one item (its pending future); add_columns() brings a run
    of messages of a bulk send with one item for the whole run. Items come back in order with the
    built batch, so the receipt can give every message its batch index."""

    __slots__ = ("_counts", "_event_times", "_items", "_keys", "_ordering_keys", "_payload_bytes", "_properties",
                 "_seqs", "_values", "max_bytes", "max_messages")

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._clear()

    def _clear(self) -> None:
        self._values: list[bytes] = []
        self._seqs: list[int] = []
        self._keys: list[str | None] | None = None
        self._properties: list[Mapping[str, str] | None] | None = None
        self._event_times: list[int | None] | None = None
        self._ordering_keys: list[bytes | None] | None = None
        self._items: list[T] = []
        self._counts: list[int] = []  # messages per item
        self._payload_bytes = 0

    def __len__(self) -> int:
        return len(self._values)

    @property
    def payload_bytes(self) -> int:
        return self._payload_bytes

    def has_space_for(self, size_bytes: int) -> bool:
        """An empty batch takes any message; otherwise both limits must hold after adding it."""
        if not self._values:
            return True
        return len(self._values) < self.max_messages and self._payload_bytes + size_bytes <= self.max_bytes

    def room(self, sizes: Sequence[int], start: int) -> int:
        """How many of the messages sizes[start:] this batch takes before it is full (at least
        one): the rule of has_space_for() and is_full applied message by message."""
        n, used = len(self._values), self._payload_bytes
        if start >= len(sizes) or (n and (n >= self.max_messages or used + sizes[start] > self.max_bytes)):
            return 0
        cap = min(len(sizes) - start, self.max_messages - n) if n < self.max_messages else 1
        if used + sum(sizes[start : start + cap]) < self.max_bytes:
            return cap  # the common case, summed in C: the count decides
        k = start
        while k < len(sizes):
            size = sizes[k]
            if n and (n >= self.max_messages or used + size > self.max_bytes):
                break
            n += 1
            used += size
            k += 1
            if n >= self.max_messages or used >= self.max_bytes:
                break
        return k - start

    def _column(self, name: str) -> list[Any]:
        column: list[Any] | None = getattr(self, name)
        if column is None:
            column = [None] * len(self._values)
            setattr(self, name, column)
        return column

    def add(self, message: ProducerMessage, sequence_id: int, item: T) -> bool:
        """Add a message; True when the batch is now full and must be sent."""
        if message.key:
            self._column("_keys")
        if message.properties:
            self._column("_properties")
        if message.event_time:
            self._column("_event_times")
        if message.ordering_key is not None:
            self._column("_ordering_keys")
        self._values.append(message.value)
        self._seqs.append(sequence_id)
        if self._keys is not None:
            self._keys.append(message.key)
        if self._properties is not None:
            self._properties.append(message.properties)
        if self._event_times is not None:
            self._event_times.append(message.event_time)
        if self._ordering_keys is not None:
            self._ordering_keys.append(message.ordering_key)
        self._items.append(item)
        self._counts.append(1)
        self._payload_bytes += len(message.value)
        return self.is_full

    def add_columns(self, values: Sequence[bytes], sequence_ids: Sequence[int], item: T, value_bytes: int, *,
                    keys: Sequence[str | None] | None = None,
                    properties: Sequence[Mapping[str, str] | None] | None = None,
                    event_times: Sequence[int | None] | None = None) -> bool:
        """Add a run of messages that completes as one item; True when the batch is now full."""
        for name, column in (("_keys", keys), ("_properties", properties), ("_event_times", event_times)):
            if column is not None:
                self._column(name).extend(column)
            elif getattr(self, name) is not None:
                getattr(self, name).extend([None] * len(values))
        if self._ordering_keys is not None:
            self._ordering_keys.extend([None] * len(values))
        self._values.extend(values)
        self._seqs.extend(sequence_ids)
        self._items.append(item)
        self._counts.append(len(values))
        self._payload_bytes += value_bytes
        return self.is_full

    @property
    def is_full(self) -> bool:
        return len(self._values) >= self.max_messages or self._payload_bytes >= self.max_bytes

    def drain_items(self) -> tuple[list[T], int, int]:
        """Empty the container without building it (on failure): (items, messages, value bytes)."""
        out = (self._items, len(self._values), self._payload_bytes)
        self._clear()
        return out

    def build(self, producer_name: str, codec: int, publish_time_ms: int) -> BuiltBatch[T]:
        values, seqs = self._values, self._seqs
        if not values:
            raise ValueError("empty batch")
        raw = encode_batch(values, seqs, keys=self._keys, properties=self._properties,
                           event_times=self._event_times, ordering_keys=self._ordering_keys)
        first, last, count, value_bytes, items = seqs[0], seqs[-1], len(values), self._payload_bytes, self._items
        self._clear()
        meta = pb.MessageMetadata(
            producer_name=producer_name,
            sequence_id=first,
            publish_time=publish_time_ms,
            num_messages_in_batch=count,
            highest_sequence_id=last,
        )
        payload = compress_payload(meta, codec, raw)
        return BuiltBatch(meta, payload, first, last, items, count, len(raw), value_bytes)
