"""Batches at once (velamq/protocol/_columns.py) against the per-message codec (_batch.py), with
hypothesis: decode_batch reads exactly what parse_batch reads, encode_batch writes exactly the
bytes build_batch writes, through all five codecs, for keys, properties, event times, ordering
keys, sequence ids, compacted-out and skipped (acknowledged) messages, and malformed input fails
the same way."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from velamq import ProtocolError
from velamq.protocol import (
    build_batch,
    build_entry,
    decode_batch,
    decompress,
    encode_batch,
    parse_batch,
    pb,
    single_columns,
    split_entry,
)
from velamq.protocol._columns import batch_sequence_ids

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]

_text = st.text(max_size=12)
_message = st.fixed_dictionaries({
    "value": st.binary(max_size=300),
    "key": st.none() | _text,
    "properties": st.dictionaries(_text, _text, max_size=3),
    "event_time": st.none() | st.integers(min_value=1, max_value=(1 << 63) - 1),
    "ordering_key": st.none() | st.binary(max_size=5),
    "sequence_id": st.none() | st.integers(min_value=0, max_value=(1 << 63) - 1),
    "compacted_out": st.booleans(),
})


def _single(m: dict[str, Any]) -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata(payload_size=len(m["value"]))
    for k, v in m["properties"].items():
        single.properties.add(key=k, value=v)
    if m["key"] is not None:
        single.partition_key = m["key"]
    if m["event_time"] is not None:
        single.event_time = m["event_time"]
    if m["ordering_key"] is not None:
        single.ordering_key = m["ordering_key"]
    if m["sequence_id"] is not None:
        single.sequence_id = m["sequence_id"]
    if m["compacted_out"]:
        single.compacted_out = True
    return single


def _expected(payload: bytes, count: int, skip: set[int]) -> list[tuple[Any, ...]]:
    """What the per-message codec reads, as (index, value, key, properties, event time, ordering key,
    sequence id) for every message kept."""
    out = []
    for i, (single, value) in enumerate(parse_batch(payload, count)):
        if single.compacted_out or i in skip:
            continue
        out.append((i, value, single.partition_key if single.HasField("partition_key") else None,
                    [(kv.key, kv.value) for kv in single.properties], single.event_time,
                    single.ordering_key if single.HasField("ordering_key") else None,
                    single.sequence_id if single.HasField("sequence_id") else -1))
    return out


def _columns_rows(payload: bytes, count: int, skip: set[int]) -> list[tuple[Any, ...]]:
    c = decode_batch(payload, count, skip or None)
    n = len(c)
    assert c.batch_size == count
    return [(c.index(j), c.value(j), c.keys[j] if c.keys is not None else None,
             (c.properties[j] or []) if c.properties is not None else [],
             c.event_times[j] if c.event_times is not None else 0,
             c.ordering_keys[j] if c.ordering_keys is not None else None,
             c.sequence_ids()[j]) for j in range(n)]


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(_message, min_size=1, max_size=20), data=st.data())
def test_decode_batch_reads_what_parse_batch_reads(messages: list[dict[str, Any]], data: st.DataObject) -> None:
    payload = build_batch((_single(m), m["value"]) for m in messages)
    skip = data.draw(st.sets(st.integers(min_value=0, max_value=len(messages) - 1)))
    assert _columns_rows(payload, len(messages), skip) == _expected(payload, len(messages), skip)


@settings(max_examples=150, deadline=None)
@given(size=st.integers(min_value=0, max_value=300), count=st.integers(min_value=1, max_value=60),
       first=st.sampled_from([0, 100, 16_300, 2_097_100, 1 << 40]), with_seq=st.booleans())
def test_uniform_batches_take_the_fast_path_with_the_same_result(size: int, count: int, first: int,
                                                                  with_seq: bool) -> None:
    # Equal-sized values without keys: the arithmetic walk; sequence ids crossing a varint length
    # boundary (127/128, 16383/16384, ...) break uniformity and fall back to the per-message walk.
    singles = []
    for i in range(count):
        single = pb.SingleMessageMetadata(payload_size=size)
        if with_seq:
            single.sequence_id = first + i
        singles.append((single, bytes([i % 256]) * size))
    payload = build_batch(singles)
    assert _columns_rows(payload, count, set()) == _expected(payload, count, set())


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(_message, min_size=1, max_size=20), first_seq=st.integers(min_value=0, max_value=1 << 40),
       explicit=st.booleans())
def test_encode_batch_writes_what_build_batch_writes(messages: list[dict[str, Any]], first_seq: int,
                                                     explicit: bool) -> None:
    # The producer's rules: a key only when non-empty, an event time only when non-zero.
    seqs = [m["sequence_id"] or 0 for m in messages] if explicit else [first_seq + i for i in range(len(messages))]
    expected = []
    for m, seq in zip(messages, seqs, strict=True):
        single = pb.SingleMessageMetadata(payload_size=len(m["value"]), sequence_id=seq)
        for k, v in m["properties"].items():
            single.properties.add(key=k, value=v)
        if m["key"]:
            single.partition_key = m["key"]
        if m["event_time"]:
            single.event_time = m["event_time"]
        if m["ordering_key"] is not None:
            single.ordering_key = m["ordering_key"]
        expected.append((single, m["value"]))
    got = encode_batch([m["value"] for m in messages], seqs if explicit else first_seq,
                       keys=[m["key"] for m in messages], properties=[m["properties"] for m in messages],
                       event_times=[m["event_time"] for m in messages],
                       ordering_keys=[m["ordering_key"] for m in messages])
    assert got == build_batch(expected)


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.binary(max_size=200), min_size=1, max_size=50), first_seq=st.integers(0, 1 << 30))
def test_encode_batch_of_plain_values(values: list[bytes], first_seq: int) -> None:
    expected = build_batch((pb.SingleMessageMetadata(payload_size=len(v), sequence_id=first_seq + i), v)
                           for i, v in enumerate(values))
    assert encode_batch(values, first_seq) == expected


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=40, deadline=None)
@given(messages=st.lists(_message, min_size=1, max_size=12))
def test_round_trip_through_entries_of_every_codec(codec: int, messages: list[dict[str, Any]]) -> None:
    from velamq.protocol import compress

    raw = encode_batch([m["value"] for m in messages], 7, keys=[m["key"] for m in messages],
                       properties=[m["properties"] for m in messages],
                       event_times=[m["event_time"] for m in messages])
    meta = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1, num_messages_in_batch=len(messages),
                              uncompressed_size=len(raw), compression=codec)  # type: ignore[arg-type]
    metadata, payload = split_entry(build_entry(meta, compress(codec, raw)))
    payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    columns = decode_batch(payload, metadata.num_messages_in_batch)
    assert columns.values() == [m["value"] for m in messages]
    assert columns.sequence_ids() == [7 + i for i in range(len(messages))]
    keys = [m["key"] or None for m in messages]
    assert (columns.keys or [None] * len(messages)) == keys
    props = [sorted(m["properties"].items()) or None for m in messages]
    assert [sorted(p) if p else None for p in (columns.properties or [None] * len(messages))] == props
    assert (columns.event_times or [0] * len(messages)) == [m["event_time"] or 0 for m in messages]


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(_message, min_size=1, max_size=6), cut=st.integers(min_value=0, max_value=400),
       junk=st.binary(max_size=8))
# Found by CI: compacted_out's value cut to a bare continuation byte (0x80) was read as "true".
@example(messages=[{"value": b"", "key": None, "properties": {}, "event_time": None, "ordering_key": None,
                    "sequence_id": None, "compacted_out": True}], cut=1, junk=b"\x80")
# Found by a full run: metadata cut to nothing (or to fields without payload_size) was read as an
# empty message by the per-message codec and refused by the column codec; both refuse it now.
@example(messages=[{"value": b"", "key": None, "properties": {}, "event_time": None, "ordering_key": None,
                    "sequence_id": None, "compacted_out": False}], cut=3, junk=b"\x00")
@example(messages=[{"value": b"\x00" * 10, "key": None, "properties": {"": "\U00010000"}, "event_time": None,
                    "ordering_key": b"\x00", "sequence_id": None, "compacted_out": False}], cut=18,
         junk=b"\x00\x00\x00E\x00\x00\x00\x00")
def test_malformed_batches_fail_as_the_per_message_codec_does(messages: list[dict[str, Any]], cut: int,
                                                               junk: bytes) -> None:
    payload = build_batch((_single(m), m["value"]) for m in messages)
    broken = payload[: max(0, len(payload) - cut)] + junk
    try:
        expected = _expected(broken, len(messages), set())
    except ProtocolError:
        with pytest.raises(ProtocolError):
            decode_batch(broken, len(messages))
        return
    assert _columns_rows(broken, len(messages), set()) == expected


def test_joined_values_are_arrow_binary_layout() -> None:
    payload = build_batch((pb.SingleMessageMetadata(payload_size=len(v), sequence_id=i), v)
                          for i, v in enumerate([b"ab", b"", b"cde"]))
    data, offsets = decode_batch(payload, 3).joined_values()
    assert (data, offsets) == (b"abcde", [0, 2, 2, 5])


def test_drop_before_keeps_the_tail() -> None:
    payload = build_batch((pb.SingleMessageMetadata(payload_size=1, sequence_id=10 + i, partition_key=f"k{i}"),
                           bytes([i])) for i in range(5))
    columns = decode_batch(payload, 5)
    columns.drop_before(3)
    assert columns.values() == [b"\x03", b"\x04"]
    assert columns.keys == ["k3", "k4"]
    assert columns.batch_indexes == [3, 4]
    assert columns.sequence_ids() == [13, 14]


def test_single_columns_of_an_unbatched_message() -> None:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=42, publish_time=1, partition_key="k", event_time=5)
    meta.properties.add(key="a", value="b")
    columns = single_columns(meta, b"value")
    assert (columns.values(), columns.keys, columns.properties, columns.event_times, columns.sequence_ids()) == \
        ([b"value"], ["k"], [[("a", "b")]], [5], [42])
    assert batch_sequence_ids(b"", 0) == []
