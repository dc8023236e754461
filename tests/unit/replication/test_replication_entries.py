"""What a replicator sends: Pulsar's rules on replicated_from, replicate_to and markers, and the
entry rebuilt with replicated_from and nothing else changed (RP-2, RP-3, RP-4, RP-7)."""

from __future__ import annotations

import pytest

from velamq.protocol import build_batch, build_entry, parse_batch, pb, split_entry, verify_entry
from velamq.replication._entries import (
    LOCAL_ONLY,
    IncomingMarker,
    cursor_name,
    is_replicator_name,
    outgoing,
    producer_name,
    replicates_to,
)


def _metadata(**fields: object) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1_700_000_000_000)
    for key, value in fields.items():
        if isinstance(value, list):
            getattr(metadata, key).extend(value)
        else:
            setattr(metadata, key, value)
    return metadata


def test_names_are_pulsars() -> None:
    assert cursor_name("west") == "pulsar.repl.west"
    assert producer_name("east", "west") == "pulsar.repl.east-->west"
    assert is_replicator_name("pulsar.repl.west")
    assert not is_replicator_name("pulsar.replay")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, True),
        ({"replicate_to": ["west"]}, True),
        ({"replicate_to": ["east", "west"]}, True),
        ({"replicate_to": ["east"]}, False),
        ({"replicate_to": [LOCAL_ONLY]}, False),  # disable_replication
        ({"replicated_from": "north"}, False),  # came from elsewhere: never sent on (no loops)
        ({"marker_type": 10}, True),  # a snapshot request goes everywhere
        ({"marker_type": 11, "replicate_to": ["east"]}, False),  # a response to east only
        ({"marker_type": 12, "replicate_to": ["east"]}, False),  # a snapshot stays where it was made
        ({"marker_type": 20}, False),  # other markers (transactions) stay local
    ],
)
def test_which_entries_replicate(fields: dict[str, object], expected: bool) -> None:
    assert replicates_to(_metadata(**fields), "west") is expected


def test_a_single_message_gets_replicated_from_and_keeps_everything_else() -> None:
    metadata = _metadata(partition_key="k", properties=[pb.KeyValue(key="a", value="b")])
    entry = build_entry(metadata, b"payload")
    out = outgoing(entry, "east", "west")
    assert out is not None
    verify_entry(out.entry)  # the checksum covers the grown metadata
    sent, payload = split_entry(out.entry)
    assert payload == b"payload"
    assert sent.replicated_from == "east"
    sent.ClearField("replicated_from")
    assert sent == metadata
    assert (out.num_messages, out.is_chunk, out.publish_ms) == (1, False, 1_700_000_000_000)


def test_a_compressed_batch_goes_as_it_is() -> None:
    batch = build_batch((pb.SingleMessageMetadata(), f"m{i}".encode()) for i in range(3))
    metadata = _metadata(num_messages_in_batch=3, compression=pb.NONE)
    out = outgoing(build_entry(metadata, batch), "east", "west")
    assert out is not None and out.num_messages == 3
    payload = split_entry(out.entry)[1]
    assert payload == batch
    assert [p for _, p in parse_batch(payload, 3)] == [b"m0", b"m1", b"m2"]


def test_a_chunk_is_sent_as_a_chunk() -> None:
    metadata = _metadata(uuid="p-7", num_chunks_from_msg=3, chunk_id=1, total_chunk_msg_size=30)
    out = outgoing(build_entry(metadata, b"x" * 10), "east", "west")
    assert out is not None and out.is_chunk
    assert split_entry(out.entry)[0].chunk_id == 1


def test_a_marker_from_the_remote_is_handed_over_not_sent() -> None:
    entry = build_entry(_metadata(replicated_from="west", marker_type=13), b"update")
    assert outgoing(entry, "east", "west") == IncomingMarker(13, b"update")
    assert outgoing(entry, "east", "north") is None  # only the replicator toward its origin takes it


def test_entries_not_for_the_remote_are_not_rebuilt() -> None:
    assert outgoing(build_entry(_metadata(replicated_from="west"), b"x"), "east", "west") is None
    assert outgoing(build_entry(_metadata(replicate_to=[LOCAL_ONLY]), b"x"), "east", "west") is None
