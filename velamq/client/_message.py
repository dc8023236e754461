"""Messages and message ids as the application sees them.

    MessageId        where a message is stored: (ledger_id, entry_id, partition, batch_index, batch_size);
                     a chunked message's id is its last chunk's id with first_chunk set (CH-2).
                     serialize() / MessageId.deserialize() use Pulsar's MessageIdData bytes, so ids
                     stored by one client (the Spark connector's offsets) are read by any other.
    ProducerMessage  what a producer sends: payload, key, properties, event time, delivery time ...
                     Interceptors and routers receive it; before_send may return a changed copy.
    ReceivedBatch    a received entry: its messages as columns, with what they share
    Message          what a consumer receives: one message of a ReceivedBatch. With a schema,
                     `value` is the decoded value (a Record, str ...) and data() the payload;
                     without one both are the bytes.

Ordering of ids is by (ledger_id, entry_id, batch_index): the order messages have in a topic
partition. Equality also compares the partition, as Pulsar's MessageId does; batch_size, topic and
the first chunk are descriptive only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from velamq.protocol import I64_MAX, MessageColumns, pb, signed64, unsigned64


@dataclass(frozen=True, slots=True, eq=False)
class MessageId:
    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1
    batch_size: int = 0
    # For a chunked message: the id of its first chunk (this id is the last chunk's).
    first_chunk: MessageId | None = None
    # The topic (partition) it came from; set on received messages, not part of identity.
    topic: str = field(default="", repr=False)

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    @property
    def last_chunk(self) -> MessageId | None:
        return self if self.first_chunk is not None else None

    def _key(self) -> tuple[int, int, int]:
        return (self.ledger_id, self.entry_id, self.batch_index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key() and self.partition == other.partition

    def __hash__(self) -> int:
        return hash((self.ledger_id, self.entry_id, self.batch_index, self.partition))

    def __lt__(self, other: MessageId) -> bool:
        return self._key() < other._key()

    def __le__(self, other: MessageId) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: MessageId) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: MessageId) -> bool:
        return self._key() >= other._key()

    def entry_key(self) -> tuple[int, int]:
        """(ledger_id, entry_id): the stored entry this message is in."""
        return (self.ledger_id, self.entry_id)

    def to_proto(self) -> pb.MessageIdData:
        data = pb.MessageIdData(ledgerId=unsigned64(self.ledger_id), entryId=unsigned64(self.entry_id))
        if self.partition >= 0:
            data.partition = self.partition
        if self.batch_index >= 0:
            data.batch_index = self.batch_index
        if self.batch_size > 0:
            data.batch_size = self.batch_size
        if self.first_chunk is not None:
            data.first_chunk_message_id.CopyFrom(self.first_chunk.to_proto())
        return data

    @classmethod
    def from_proto(cls, data: pb.MessageIdData, topic: str = "") -> MessageId:
        first = cls.from_proto(data.first_chunk_message_id, topic) if data.HasField("first_chunk_message_id") else None
        return cls(
            signed64(data.ledgerId),
            signed64(data.entryId),
            data.partition if data.HasField("partition") else -1,
            data.batch_index if data.HasField("batch_index") else -1,
            data.batch_size if data.HasField("batch_size") else 0,
            first,
            topic,
        )

    def serialize(self) -> bytes:
        """MessageIdData bytes, readable by every Pulsar client's MessageId.deserialize."""
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes, topic: str = "") -> MessageId:
        proto = pb.MessageIdData()
        proto.ParseFromString(data)
        return cls.from_proto(proto, topic)

    def __str__(self) -> str:
        return f"({self.ledger_id},{self.entry_id},{self.partition},{self.batch_index})"


MessageId.earliest = MessageId(-1, -1)
MessageId.latest = MessageId(I64_MAX, I64_MAX)


@dataclass(frozen=True, slots=True)
class ProducerMessage:
    """One message as handed to a producer (PR-2). Times are epoch milliseconds."""

    value: bytes
    key: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    event_time: int | None = None
    ordering_key: bytes | None = None
    sequence_id: int | None = None
    deliver_at: int | None = None  # absolute; deliver_after is turned into this at send time
    replication_clusters: tuple[str, ...] = ()
    disable_replication: bool = False

    @property
    def size_bytes(self) -> int:
        return len(self.value)


class ReceivedBatch:
    """The messages of one received entry as columns (velamq.protocol's MessageColumns) with what
    they share: where the entry is stored, its publish time and producer, the TopicConsumer that
    received it and the subscription generation it arrived in, and its acknowledgement state.
    Messages are made from it only when the application asks for them one by one; the receiver
    queue, bulk receives and bulk acknowledgements work on it directly. `pos` is how far the
    receiver queue has handed it out."""

    __slots__ = ("acks", "batch_size", "columns", "entry_id", "first_chunk", "generation", "ledger_id", "owner",
                 "partition", "pos", "producer_name", "publish_time", "redelivery_count", "schema_version",
                 "sequence_id", "topic")

    def __init__(self, columns: MessageColumns, topic: str, partition: int, ledger_id: int, entry_id: int,
                 metadata: pb.MessageMetadata | None, redelivery_count: int, owner: Any, generation: int,
                 first_chunk: MessageId | None = None) -> None:
        self.columns = columns
        self.topic = topic
        self.partition = partition
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.batch_size = columns.batch_size
        if metadata is not None:
            self.publish_time = metadata.publish_time
            self.producer_name = metadata.producer_name
            self.sequence_id = metadata.sequence_id
            self.schema_version = metadata.schema_version if metadata.HasField("schema_version") else None
        else:
            self.publish_time, self.producer_name, self.sequence_id, self.schema_version = 0, "", -1, None
        self.redelivery_count = redelivery_count
        self.owner = owner
        self.generation = generation
        self.first_chunk = first_chunk
        self.acks: Any = None  # the entry's batch-index acknowledgement state (ConsumerAcks sets it)
        self.pos = 0

    def __len__(self) -> int:
        return len(self.columns.value_starts)

    def message_id(self, j: int) -> MessageId:
        if self.batch_size:
            return MessageId(self.ledger_id, self.entry_id, self.partition, self.columns.index(j), self.batch_size,
                             topic=self.topic)
        return MessageId(self.ledger_id, self.entry_id, self.partition, first_chunk=self.first_chunk,
                         topic=self.topic)

    def entry_key(self) -> tuple[int, int]:
        return (self.ledger_id, self.entry_id)

    def position(self, j: int) -> tuple[int, int, int]:
        """(ledger, entry, batch index or -1): where message j is, in the order of the topic."""
        return (self.ledger_id, self.entry_id, self.columns.index(j) if self.batch_size else -1)


Range = tuple[ReceivedBatch, int, int]  # messages first..end-1 of a batch


class Message:
    """One received message: its value, key, properties, times and id, read from the batch it came
    in (so receiving costs no more than one small object; nothing is decoded twice). Consumers make
    them with message_at(batch, j); Message(value=..., message_id=..., ...) makes one on its own
    (tests, in-memory sources)."""

    __slots__ = ("_batch", "_decoded", "_id", "_j")

    def __init__(self, value: Any, message_id: MessageId, topic: str = "", key: str | None = None,
                 properties: Mapping[str, str] | None = None, event_time: int | None = None, publish_time: int = 0,
                 redelivery_count: int = 0, ordering_key: bytes | None = None, producer_name: str = "",
                 sequence_id: int = -1, schema_version: bytes | None = None, raw: bytes | None = None) -> None:
        payload = raw if raw is not None else value
        columns = MessageColumns(payload, [0], [len(payload)], 0, None, [key] if key is not None else None,
                                 [list(properties.items())] if properties else None,
                                 [event_time] if event_time else None,
                                 [ordering_key] if ordering_key is not None else None, [sequence_id])
        batch = ReceivedBatch(columns, topic, message_id.partition, message_id.ledger_id, message_id.entry_id, None,
                              redelivery_count, None, 0, message_id.first_chunk)
        batch.publish_time, batch.producer_name, batch.schema_version = publish_time, producer_name, schema_version
        self._batch = batch
        self._j = 0
        self._id: MessageId | None = message_id
        self._decoded: Any = value if raw is not None else _NOT_DECODED

    @property
    def value(self) -> Any:
        """The payload bytes, or the value the consumer's schema decoded from them."""
        if self._decoded is not _NOT_DECODED:
            return self._decoded
        c = self._batch.columns
        return c.payload[c.value_starts[self._j] : c.value_ends[self._j]]

    def data(self) -> bytes:
        """The payload (the name the official client uses), decoded or not."""
        c = self._batch.columns
        return c.payload[c.value_starts[self._j] : c.value_ends[self._j]]

    @property
    def raw(self) -> bytes | None:
        """The payload when `value` holds what a schema decoded from it; None otherwise."""
        return self.data() if self._decoded is not _NOT_DECODED else None

    def with_value(self, value: Any) -> Message:
        """This message with `value` decoded by a schema (data() stays the payload)."""
        message = message_at(self._batch, self._j)
        message._id = self._id
        message._decoded = value
        return message

    @property
    def message_id(self) -> MessageId:
        if self._id is None:
            self._id = self._batch.message_id(self._j)
        return self._id

    @property
    def topic(self) -> str:
        return self._batch.topic

    @property
    def partition(self) -> int:
        return self._batch.partition

    @property
    def key(self) -> str | None:
        keys = self._batch.columns.keys
        return keys[self._j] if keys is not None else None

    @property
    def properties(self) -> Mapping[str, str]:
        props = self._batch.columns.properties
        items = props[self._j] if props is not None else None
        return dict(items) if items else {}

    @property
    def event_time(self) -> int | None:
        times = self._batch.columns.event_times
        return (times[self._j] or None) if times is not None else None

    @property
    def publish_time(self) -> int:
        return self._batch.publish_time

    @property
    def redelivery_count(self) -> int:
        return self._batch.redelivery_count

    @property
    def ordering_key(self) -> bytes | None:
        keys = self._batch.columns.ordering_keys
        return keys[self._j] if keys is not None else None

    @property
    def producer_name(self) -> str:
        return self._batch.producer_name

    @property
    def sequence_id(self) -> int:
        return self._batch.columns.sequence_id(self._j, self._batch.sequence_id)

    @property
    def schema_version(self) -> bytes | None:
        return self._batch.schema_version

    # The internal consumer that received it (acknowledgement goes back through it) and the
    # subscription generation it arrived in (messages of an older generation are stale).
    @property
    def _owner(self) -> Any:
        return self._batch.owner

    @property
    def _generation(self) -> int:
        return self._batch.generation

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.topic, self.message_id, self.value) == (other.topic, other.message_id, other.value)

    def __hash__(self) -> int:
        return hash((self.topic, self.message_id))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Message, (self.value, self.message_id, self.topic, self.key, dict(self.properties), self.event_time,
                          self.publish_time, self.redelivery_count, self.ordering_key, self.producer_name,
                          self.sequence_id, self.schema_version, self.raw))

    def __repr__(self) -> str:
        return (f"Message(value={self.value!r}, message_id={self.message_id}, topic={self.topic!r}, "
                f"key={self.key!r}, publish_time={self.publish_time})")


_new_message = object.__new__
_NOT_DECODED: Any = object()  # Message._decoded until a schema decodes the value


def message_at(batch: ReceivedBatch, j: int) -> Message:
    """Message j of a received batch (the consumer's path: no copy, nothing decoded)."""
    message: Message = _new_message(Message)
    message._batch = batch
    message._j = j
    message._id = None
    message._decoded = _NOT_DECODED
    return message
