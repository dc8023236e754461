"""Pulsar's replicated-subscription markers (PulsarMarkers.proto), sans-IO: their payloads, and the
entries that carry them (RP-10).

    marker_type  payload                                   written by           replicate_to
    10 REQUEST   {snapshot_id, source_cluster}             the source topic     (everywhere)
    11 RESPONSE  {snapshot_id, cluster: {name, position}}  each remote          [the source]
    12 SNAPSHOT  {snapshot_id, local_message_id, clusters} the source topic     [itself]
    13 UPDATE    {subscription_name, clusters}             the source topic     (everywhere)

A marker entry is a message of producer "pulsar.marker", sequence id 0, with marker_type set, as
Pulsar's Markers.newMessage writes it; consumers never get one (the broker acks it for them). The
message classes are built from a descriptor at import (no generated module), with Pulsar's field
numbers, so the bytes are Pulsar's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from velamq.protocol import build_entry, pb

REQUEST: Final = 10
RESPONSE: Final = 11
SNAPSHOT: Final = 12
UPDATE: Final = 13
MARKER_PRODUCER: Final = "pulsar.marker"

_F = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="velamq_pulsar_markers.proto", package="velamq.markers")

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        m = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            f = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                f.type_name = f".velamq.markers.{type_name}"

    req, opt, rep = _F.LABEL_REQUIRED, _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    message("MessageIdData", ("ledger_id", 1, _F.TYPE_UINT64, req, ""), ("entry_id", 2, _F.TYPE_UINT64, req, ""))
    message("ClusterMessageId", ("cluster", 1, _F.TYPE_STRING, req, ""),
            ("message_id", 2, _F.TYPE_MESSAGE, req, "MessageIdData"))
    message("ReplicatedSubscriptionsSnapshotRequest", ("snapshot_id", 1, _F.TYPE_STRING, req, ""),
            ("source_cluster", 2, _F.TYPE_STRING, opt, ""))
    message("ReplicatedSubscriptionsSnapshotResponse", ("snapshot_id", 1, _F.TYPE_STRING, req, ""),
            ("cluster", 2, _F.TYPE_MESSAGE, opt, "ClusterMessageId"))
    message("ReplicatedSubscriptionsSnapshot", ("snapshot_id", 1, _F.TYPE_STRING, req, ""),
            ("local_message_id", 2, _F.TYPE_MESSAGE, opt, "MessageIdData"),
            ("clusters", 3, _F.TYPE_MESSAGE, rep, "ClusterMessageId"))
    message("ReplicatedSubscriptionsUpdate", ("subscription_name", 1, _F.TYPE_STRING, req, ""),
            ("clusters", 2, _F.TYPE_MESSAGE, rep, "ClusterMessageId"))
    return proto


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())


def _class(name: str) -> Any:
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"velamq.markers.{name}"))


_Request = _class("ReplicatedSubscriptionsSnapshotRequest")
_Response = _class("ReplicatedSubscriptionsSnapshotResponse")
_Snapshot = _class("ReplicatedSubscriptionsSnapshot")
_Update = _class("ReplicatedSubscriptionsUpdate")

Positions = dict[str, tuple[int, int]]  # cluster -> (ledger id, entry id) in that cluster's log


@dataclass(frozen=True, slots=True)
class Marker:
    """A decoded marker: its type and the fields that type has (the others empty)."""

    marker_type: int
    snapshot_id: str = ""
    source_cluster: str = ""  # REQUEST
    clusters: tuple[tuple[str, tuple[int, int]], ...] = ()  # RESPONSE (one), SNAPSHOT, UPDATE
    local_position: tuple[int, int] = (-1, -1)  # SNAPSHOT
    subscription: str = ""  # UPDATE


def _set_clusters(repeated: Any, positions: Positions) -> None:
    for cluster, (ledger_id, entry_id) in sorted(positions.items()):
        item = repeated.add(cluster=cluster)
        item.message_id.ledger_id, item.message_id.entry_id = ledger_id, entry_id


def _clusters(repeated: Any) -> tuple[tuple[str, tuple[int, int]], ...]:
    return tuple((c.cluster, (c.message_id.ledger_id, c.message_id.entry_id)) for c in repeated)


def _entry(marker_type: int, payload: bytes, replicate_to: list[str] | None) -> bytes:
    metadata = pb.MessageMetadata(producer_name=MARKER_PRODUCER, sequence_id=0,
                                  publish_time=int(time.time() * 1000), marker_type=marker_type)
    if replicate_to:
        metadata.replicate_to.extend(replicate_to)
    return build_entry(metadata, payload)


def request_entry(snapshot_id: str, source: str) -> bytes:
    return _entry(REQUEST, _Request(snapshot_id=snapshot_id, source_cluster=source).SerializeToString(), None)


def response_entry(snapshot_id: str, reply_to: str, local: str, position: tuple[int, int]) -> bytes:
    message = _Response(snapshot_id=snapshot_id)
    message.cluster.cluster = local
    message.cluster.message_id.ledger_id, message.cluster.message_id.entry_id = position
    return _entry(RESPONSE, message.SerializeToString(), [reply_to])


def snapshot_entry(snapshot_id: str, local: str, local_position: tuple[int, int], remotes: Positions) -> bytes:
    message = _Snapshot(snapshot_id=snapshot_id)
    message.local_message_id.ledger_id, message.local_message_id.entry_id = local_position
    _set_clusters(message.clusters, remotes)
    return _entry(SNAPSHOT, message.SerializeToString(), [local])


def update_entry(subscription: str, remotes: Positions) -> bytes:
    message = _Update(subscription_name=subscription)
    _set_clusters(message.clusters, remotes)
    return _entry(UPDATE, message.SerializeToString(), None)


def decode(marker_type: int, payload: bytes) -> Marker | None:
    """The marker of a replicated-subscription entry's payload; None for another or a bad one."""
    try:
        if marker_type == REQUEST:
            r = _Request.FromString(payload)
            return Marker(REQUEST, r.snapshot_id, r.source_cluster)
        if marker_type == RESPONSE:
            s = _Response.FromString(payload)
            return Marker(RESPONSE, s.snapshot_id, clusters=_clusters([s.cluster]))
        if marker_type == SNAPSHOT:
            n = _Snapshot.FromString(payload)
            local = (n.local_message_id.ledger_id, n.local_message_id.entry_id)
            return Marker(SNAPSHOT, n.snapshot_id, clusters=_clusters(n.clusters), local_position=local)
        if marker_type == UPDATE:
            u = _Update.FromString(payload)
            return Marker(UPDATE, clusters=_clusters(u.clusters), subscription=u.subscription_name)
    except Exception:  # a malformed marker is ignored, as Pulsar logs and skips it
        return None
    return None
