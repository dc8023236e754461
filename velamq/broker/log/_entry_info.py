"""What dispatch needs to know of a stored entry, read from its MessageMetadata (and nothing more)."""

from __future__ import annotations

from dataclasses import dataclass

from velamq._errors import ProtocolError
from velamq.protocol import parse_entry_metadata

NONE_KEY = b"NONE_KEY"  # the sticky key of a message without key, as Pulsar names it


@dataclass(frozen=True, slots=True)
class EntryInfo:
    num_messages: int
    sticky_key: bytes
    deliver_at_ms: int
    publish_time_ms: int = 0
    is_chunk: bool = False
    chunk_uuid: str = ""  # of a chunk: its message's uuid, chunk id and number of chunks (CH-7)
    chunk_id: int = 0
    num_chunks: int = 0
    marker_type: int = 0  # the broker's own markers (replicated subscriptions): never delivered


def entry_info(data: bytes) -> EntryInfo:
    try:
        metadata = parse_entry_metadata(data)
    except ProtocolError:
        # Never block a subscription on one bad entry: deliver it as one message; the client
        # acknowledges it with a validation error.
        return EntryInfo(1, NONE_KEY, 0)
    num = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    if metadata.HasField("ordering_key"):
        key = metadata.ordering_key
    elif metadata.HasField("partition_key"):
        key = metadata.partition_key.encode()
    else:
        key = NONE_KEY
    deliver_at = metadata.deliver_at_time if metadata.HasField("deliver_at_time") else 0
    if metadata.HasField("marker_type"):
        return EntryInfo(1, key, 0, metadata.publish_time, marker_type=metadata.marker_type)
    if not metadata.HasField("chunk_id"):
        return EntryInfo(max(num, 1), key, deliver_at, metadata.publish_time)
    return EntryInfo(
        max(num, 1), key, deliver_at, metadata.publish_time, True,
        metadata.uuid, metadata.chunk_id, metadata.num_chunks_from_msg,
    )


def last_batch_index(data: bytes) -> int:
    """The index of the last message of a batch entry; -1 for an entry that is not a batch."""
    try:
        if not parse_entry_metadata(data).HasField("num_messages_in_batch"):
            return -1
    except ProtocolError:
        return -1
    return entry_info(data).num_messages - 1
