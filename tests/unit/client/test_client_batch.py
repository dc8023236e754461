"""Batch building (PR-6..PR-8): what the container builds parses back, with every codec."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from velamq.client import ProducerMessage
from velamq.client.producer._batch_container import BatchContainer, compress_payload, message_metadata
from velamq.protocol import build_entry, codec_from_name, entry_messages, pb

messages = st.builds(
    ProducerMessage,
    value=st.binary(max_size=300),
    key=st.one_of(st.none(), st.text(min_size=1, max_size=10)),
    properties=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    event_time=st.one_of(st.none(), st.integers(min_value=1, max_value=2**40)),
    ordering_key=st.one_of(st.none(), st.binary(min_size=1, max_size=5)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(messages, min_size=1, max_size=30), st.sampled_from(["none", "lz4", "zlib", "zstd", "snappy"]),
       st.integers(min_value=0, max_value=1000))
def test_batch_round_trip(batch: list[ProducerMessage], codec: str, first_seq: int) -> None:
    container: BatchContainer[int] = BatchContainer(max_messages=1000, max_bytes=1 << 20)
    for i, m in enumerate(batch):
        container.add(m, first_seq + i, i)
    built = container.build("prod", codec_from_name(codec), 1234)
    assert built.sequence_id == first_seq and built.highest_sequence_id == first_seq + len(batch) - 1
    assert list(built.items) == list(range(len(batch))) and len(container) == 0
    metadata, parsed = entry_messages(build_entry(built.metadata, built.payload))
    assert metadata.num_messages_in_batch == len(batch) and metadata.producer_name == "prod"
    assert metadata.sequence_id == first_seq and metadata.highest_sequence_id == built.highest_sequence_id
    for m, (single, payload) in zip(batch, parsed, strict=True):
        assert single is not None and payload == m.value
        assert (single.partition_key if single.HasField("partition_key") else None) == m.key
        assert {kv.key: kv.value for kv in single.properties} == dict(m.properties)
        assert (single.event_time or None) == m.event_time
        assert (single.ordering_key if single.HasField("ordering_key") else None) == m.ordering_key


@given(st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=50),
       st.integers(min_value=1, max_value=10), st.integers(min_value=1, max_value=2000))
def test_container_closes_on_count_or_bytes(sizes: list[int], max_messages: int, max_bytes: int) -> None:
    container: BatchContainer[int] = BatchContainer(max_messages, max_bytes)
    batches: list[list[int]] = [[]]
    for i, size in enumerate(sizes):
        if not container.has_space_for(size):
            container.build("p", pb.NONE, 0)
            batches.append([])
        batches[-1].append(size)
        if container.add(ProducerMessage(b"x" * size), i, i):
            container.build("p", pb.NONE, 0)
            batches.append([])
    for b in batches:
        assert len(b) <= max_messages
        assert len(b) == 1 or sum(b) <= max_bytes


def test_unbatched_metadata_carries_every_field() -> None:
    m = ProducerMessage(b"abc" * 100, key="k", properties={"a": "b"}, event_time=5, ordering_key=b"o", deliver_at=99)
    meta = message_metadata("p", m, 7, 11)
    payload = compress_payload(meta, pb.ZSTD, m.value)
    metadata, parsed = entry_messages(build_entry(meta, payload))
    assert parsed == [(None, m.value)]
    assert (metadata.partition_key, metadata.ordering_key, metadata.event_time, metadata.deliver_at_time) == \
        ("k", b"o", 5, 99)
    assert metadata.sequence_id == 7 and metadata.publish_time == 11 and metadata.uncompressed_size == 300
