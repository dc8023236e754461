"""Messages and message ids as the application sees them.

    MessageId        where a message is stored: (ledger_id, entry_id, partition, batch_index, batch_size);
                     a chunked message's id is its last chunk's id with first_chunk set (CH-2).
                     serialize() / MessageId.deserialize() use Pulsar's MessageIdData bytes, so ids
                     stored by one client (the Spark connector's offsets) are read by any other.
    ProducerMessage  what a producer sends: payload, key, properties, event time, delivery time ...
                     Interceptors and routers receive it; before_send may return a changed copy.
    Message          what a consumer receives. With a schema, `value` is the decoded value (a
                     Record, str ...) and data() the payload; without one both are the bytes.

Ordering of ids is by (ledger_id, entry_id, batch_index): the order messages have in a topic
partition. Equality also compares the partition, as Pulsar's MessageId does; batch_size, topic and
the first chunk are descriptive only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from velamq.protocol import I64_MAX, pb, signed64, unsigned64


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


@dataclass(frozen=True, slots=True)
class Message:
    """One received message."""

    value: Any  # the payload bytes, or the value the consumer's schema decoded from them
    message_id: MessageId
    topic: str
    key: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    event_time: int | None = None
    publish_time: int = 0
    redelivery_count: int = 0
    ordering_key: bytes | None = None
    producer_name: str = ""
    sequence_id: int = -1
    schema_version: bytes | None = None
    # The internal consumer that received it (acknowledgement goes back through it) and the
    # subscription generation it arrived in (messages of an older generation are stale).
    _owner: Any = field(default=None, repr=False, compare=False)
    _generation: int = field(default=0, repr=False, compare=False)
    # The payload when `value` holds what a schema decoded from it.
    raw: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def partition(self) -> int:
        return self.message_id.partition

    def data(self) -> bytes:
        """The payload (the name the official client uses), decoded or not."""
        return self.raw if self.raw is not None else bytes(self.value)


def received_message(metadata: pb.MessageMetadata, single: pb.SingleMessageMetadata | None, value: bytes,
                     message_id: MessageId, topic: str, redelivery_count: int, sequence_id: int, owner: Any,
                     generation: int) -> Message:
    """A Message from an entry's metadata (and, inside a batch, the message's own metadata)."""
    src: Any = single if single is not None else metadata
    return Message(
        value=value,
        message_id=message_id,
        topic=topic,
        key=src.partition_key if src.HasField("partition_key") else None,
        properties={kv.key: kv.value for kv in src.properties},
        event_time=src.event_time or None,
        publish_time=metadata.publish_time,
        redelivery_count=redelivery_count,
        ordering_key=src.ordering_key if src.HasField("ordering_key") else None,
        producer_name=metadata.producer_name,
        sequence_id=sequence_id,
        schema_version=metadata.schema_version if metadata.HasField("schema_version") else None,
        _owner=owner,
        _generation=generation,
    )
