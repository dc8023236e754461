"""What a replicator sends, decided from a stored entry's metadata alone (sans-IO).

Pulsar's rules (GeoPersistentReplicator.replicateEntries), in order:

    replicated_from set      the entry came from another cluster: never sent on (no loops, RP-3);
                             a replicated-subscription marker from the replicator's own remote is
                             handed to the topic's ReplicatedSubscriptions instead (RP-10)
    marker_type set          only replicated-subscription markers (10-13) leave the cluster, and
                             only where their replicate_to says
    replicate_to set         only the clusters it lists get the entry; ["__local__"] (the clients'
                             disable_replication) means none (RP-4)
    otherwise                sent, with replicated_from = the local cluster

The entry goes out as it was stored (WC-5): a batch stays one batch, a chunk one chunk, the payload
is not decompressed or re-encoded. Only the metadata grows by one field: replicated_from is field 5
of MessageMetadata, a string, and protobuf accepts fields in any order, so its bytes are appended to
the stored metadata bytes, and the checksum is computed again.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from velamq.protocol import parse_entry_metadata_bytes, pb, varint, with_checksum

LOCAL_ONLY: Final = "__local__"
REPLICATOR_PREFIX: Final = "pulsar.repl"  # Pulsar's replicatorPrefix: cursor and producer names
REPLICATED_SUBSCRIPTION_MARKERS: Final = frozenset({10, 11, 12, 13})  # Pulsar's MarkerType
_REPLICATED_FROM_TAG: Final = b"\x2a"  # field 5, wire type 2 (length-delimited)
_HEAD_BYTES: Final = 10  # magic u16, CRC32C u32, metadata size u32
_U32 = struct.Struct(">I")


def cursor_name(remote: str) -> str:
    """The durable cursor a topic keeps for one remote cluster: `pulsar.repl.<remote>`."""
    return f"{REPLICATOR_PREFIX}.{remote}"


def producer_name(local: str, remote: str) -> str:
    """The replicator's producer name on the remote topic: `pulsar.repl.<local>--><remote>`."""
    return f"{REPLICATOR_PREFIX}.{local}-->{remote}"


def is_replicator_name(name: str) -> bool:
    """A cursor or producer name of a replicator (Pulsar shows neither as a subscription)."""
    return name.startswith(REPLICATOR_PREFIX + ".")


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One entry to send: the bytes for the remote and what SEND must say about them."""

    entry: bytes
    num_messages: int
    is_chunk: bool
    publish_ms: int  # the original publish time (replication delay)


@dataclass(frozen=True, slots=True)
class IncomingMarker:
    """A replicated-subscription marker that came from the replicator's remote."""

    marker_type: int
    payload: bytes


def replicates_to(metadata: pb.MessageMetadata, remote: str) -> bool:
    """Whether an entry with this metadata goes to `remote` (the module's rules)."""
    if metadata.HasField("replicated_from"):
        return False
    if metadata.HasField("marker_type") and metadata.marker_type not in REPLICATED_SUBSCRIPTION_MARKERS:
        return False
    targets = metadata.replicate_to
    return not targets or remote in targets


def outgoing(entry: bytes, local: str, remote: str) -> Outgoing | IncomingMarker | None:
    """The entry as it must be sent to `remote`; or a marker `remote` sent here; or None when it
    is not replicated there."""
    metadata, raw = parse_entry_metadata_bytes(entry)
    if not replicates_to(metadata, remote):
        if metadata.replicated_from == remote and metadata.marker_type in REPLICATED_SUBSCRIPTION_MARKERS:
            return IncomingMarker(metadata.marker_type, entry[_HEAD_BYTES + len(raw):])
        return None
    origin = local.encode()
    grown = raw + _REPLICATED_FROM_TAG + varint(len(origin)) + origin
    payload = memoryview(entry)[_HEAD_BYTES + len(raw) :]
    rebuilt = with_checksum(b"".join((_U32.pack(len(grown)), grown, payload)))
    return Outgoing(
        rebuilt,
        metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1,
        metadata.HasField("num_chunks_from_msg") and metadata.num_chunks_from_msg > 1,
        int(metadata.publish_time),
    )
