"""non_utf8_field finds a string field that is not UTF-8 wherever it is in a MessageMetadata, with
or without the wire bytes (which let it skip repeated fields whose tag is absent)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from velamq.broker.session._text_fields import non_utf8_command_field, non_utf8_field
from velamq.protocol import pb

BAD = b"\xff\xfe"  # never UTF-8


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, value: bytes) -> bytes:
    """A length-delimited field: a string, bytes or an embedded message."""
    return _varint(number << 3 | 2) + _varint(len(value)) + value


texts = st.text(max_size=8).map(str.encode) | st.just(BAD) | st.binary(max_size=6)
# (field number, value) of MessageMetadata's string fields: producer_name 1, replicated_from 5,
# partition_key 6, replicate_to 7 (repeated), encryption_algo 14, uuid 26; properties 4 holds
# KeyValue messages (key 1, value 2); encryption_keys 13 holds EncryptionKeys (key 1, metadata 3
# of KeyValue).
SINGULAR = {5, 6, 14, 26}
singles = st.tuples(st.sampled_from([5, 6, 7, 14, 26]), texts)
properties = st.tuples(texts, texts).map(lambda kv: (4, _field(1, kv[0]) + _field(2, kv[1])))
keys = st.tuples(texts, texts, texts).map(
    lambda k: (13, _field(1, k[0]) + _field(3, _field(1, k[1]) + _field(2, k[2])))
)


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _raw(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode()  # upb gives bytes when not UTF-8


def _strings(number: int, value: bytes) -> list[bytes]:
    """The string values a field carries (nested messages opened)."""
    if number == 4:
        kv = pb.KeyValue.FromString(value)
        return [_raw(kv.key), _raw(kv.value)]
    if number == 13:
        keys = pb.EncryptionKeys.FromString(value)
        return [_raw(keys.key)] + [_raw(v) for kv in keys.metadata for v in (kv.key, kv.value)]
    return [value]


@given(texts, st.lists(singles | properties | keys, max_size=6), st.integers(0, 1 << 62))
def test_a_non_utf8_string_is_found_with_or_without_the_wire_bytes(
    producer_name: bytes, fields: list[tuple[int, bytes]], sequence_id: int
) -> None:
    wire = _field(1, producer_name) + b"\x10" + _varint(sequence_id) + b"\x18" + _varint(1_764_000_000_000)
    wire += b"".join(_field(number, value) for number, value in fields)
    metadata = pb.MessageMetadata.FromString(wire)
    # A singular field given twice holds the last value given; repeated ones hold them all.
    last = {1: producer_name} | {number: value for number, value in fields if number in SINGULAR}
    repeated = [v for number, value in fields if number not in SINGULAR for v in _strings(number, value)]
    values = list(last.values()) + repeated
    expected_bad = not all(_is_utf8(v) for v in values)
    found = non_utf8_field(metadata, wire)
    assert (found is not None) == expected_bad
    assert (non_utf8_field(pb.MessageMetadata.FromString(wire)) is not None) == expected_bad
    if found is not None:
        assert found.split(".")[0] in {f.name for f in pb.MessageMetadata.DESCRIPTOR.fields}


def test_a_command_is_checked_by_its_body() -> None:
    name_field = pb.CommandProducer.DESCRIPTOR.fields_by_name["producer_name"].number
    body = pb.CommandProducer(topic="t", producer_id=1, request_id=2).SerializeToString() + _field(name_field, BAD)
    wire = b"\x08" + _varint(pb.BaseCommand.PRODUCER) + _field(pb.BaseCommand.PRODUCER, body)
    assert non_utf8_command_field(pb.BaseCommand.FromString(wire)) == "producer.producer_name"
    send = pb.BaseCommand(type=pb.BaseCommand.SEND)
    send.send.producer_id = 1
    send.send.sequence_id = 2
    assert non_utf8_command_field(send) is None


@pytest.mark.parametrize(
    ("value", "utf8"),
    [
        (b"\xed\xa0\x80", False),  # a surrogate, encoded
        (b"\xc0\x80", False),  # an overlong NUL
        (b"\xf4\x90\x80\x80", False),  # past U+10FFFF
        (b"\xe2\x82", False),  # cut short
        (b"\xef\xbf\xbf", True),  # U+FFFF is a character
        (b"\x00", True),
        ("ключ ☃ 𝄞".encode(), True),
    ],
)
def test_the_wire_check_agrees_with_python_on_the_edges_of_utf8(value: bytes, utf8: bool) -> None:
    wire = _field(1, b"producer") + b"\x10\x01\x18\x01" + _field(4, _field(1, b"k") + _field(2, value))
    expected = None if utf8 else "properties.value"
    assert non_utf8_field(pb.MessageMetadata.FromString(wire), wire) == expected
    assert non_utf8_field(pb.MessageMetadata.FromString(wire)) == expected


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_checking_from_the_wire_keeps_nothing_per_message() -> None:
    # A protobuf message that is parsed into again and again keeps every copy in its arena: with
    # a kept twin, 200,000 checks of 1 KB of metadata grew the process by ~200 MB.
    wire = _field(1, b"p" * 1000) + b"\x10\x01\x18\x01"
    metadata = pb.MessageMetadata.FromString(wire)
    assert non_utf8_field(metadata, wire) is None
    before = _rss_bytes()
    for _ in range(200_000):
        non_utf8_field(metadata, wire)
    assert _rss_bytes() - before < 50 << 20
