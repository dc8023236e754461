"""The sans-IO codec: frames, entries, batches, compression (round trips with hypothesis)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from velamq import ChecksumMismatchError, CompressionError, FrameTooLargeError, ProtocolError
from velamq.protocol import (
    FrameDecoder,
    build_batch,
    build_entry,
    compress,
    crc32c,
    decompress,
    encode_command,
    encode_payload_command,
    entry_messages,
    parse_batch,
    pb,
    split_entry,
    verify_entry,
    with_checksum,
)

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def _send(producer_id: int, sequence_id: int) -> pb.BaseCommand:
    command = pb.BaseCommand(type=pb.BaseCommand.SEND)
    command.send.producer_id = producer_id
    command.send.sequence_id = sequence_id
    return command


def _metadata(seq: int = 0, **fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1, **fields)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=2000), min_size=1, max_size=8),
    cut=st.integers(min_value=1, max_value=97),
)
def test_frames_split_anywhere_decode_the_same(payloads: list[bytes], cut: int) -> None:
    stream = b""
    for i, payload in enumerate(payloads):
        stream += encode_payload_command(_send(1, i), build_entry(_metadata(i), payload))
        stream += encode_command(pb.BaseCommand(type=pb.BaseCommand.PING, ping=pb.CommandPing()))
    decoder = FrameDecoder(1 << 20)
    frames = []
    for start in range(0, len(stream), cut):
        frames.extend(decoder.feed(stream[start : start + cut]))
    assert len(frames) == 2 * len(payloads)
    for i, payload in enumerate(payloads):
        send, ping = frames[2 * i], frames[2 * i + 1]
        assert send.command.send.sequence_id == i and send.checksum_valid
        assert send.entry is not None
        metadata, body = split_entry(send.entry)
        assert metadata.sequence_id == i and body == payload
        assert ping.command.type == pb.BaseCommand.PING and ping.entry is None
    assert decoder.buffered_bytes == 0


def test_oversized_frame_is_a_typed_error() -> None:
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(1024).feed(struct.pack(">II", 1 << 30, 10))


def test_garbage_command_is_a_protocol_error() -> None:
    body = b"\xff\xff\xff\xff\x0f"
    with pytest.raises(ProtocolError):
        FrameDecoder(1024).feed(struct.pack(">II", 4 + len(body), len(body)) + body)


def test_command_size_beyond_frame_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder(1024).feed(struct.pack(">II", 8, 100) + b"\0" * 4)


def test_bad_checksum_is_flagged_per_frame() -> None:
    entry = bytearray(build_entry(_metadata(), b"payload"))
    entry[-1] ^= 0xFF
    frames = FrameDecoder(1 << 20).feed(encode_payload_command(_send(1, 1), bytes(entry)))
    assert len(frames) == 1 and not frames[0].checksum_valid
    with pytest.raises(ChecksumMismatchError):
        verify_entry(bytes(entry))


def test_entry_without_checksum_gets_one() -> None:
    meta = _metadata().SerializeToString()
    unchecked = struct.pack(">I", len(meta)) + meta + b"body"
    frames = FrameDecoder(1 << 20).feed(encode_payload_command(_send(1, 1), unchecked))
    assert frames[0].entry == with_checksum(unchecked)
    verify_entry(frames[0].entry)


def test_broker_entry_metadata_is_skipped() -> None:
    entry = build_entry(_metadata(), b"x")
    bem = pb.BrokerEntryMetadata(broker_timestamp=5).SerializeToString()
    frame = encode_payload_command(_send(1, 1), struct.pack(">HI", 0x0E02, len(bem)) + bem + entry)
    assert FrameDecoder(1 << 20).feed(frame)[0].entry == entry


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000), codec=st.sampled_from(CODECS))
def test_compression_round_trip(data: bytes, codec: int) -> None:
    assert decompress(codec, compress(codec, data), len(data)) == data


@pytest.mark.parametrize("codec", [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
def test_corrupt_compressed_payload_is_a_compression_error(codec: int) -> None:
    with pytest.raises(CompressionError):
        decompress(codec, b"\x00garbage\xff" * 3, 1000)


@settings(max_examples=40, deadline=None)
@given(
    messages=st.lists(
        st.tuples(
            st.binary(max_size=300), st.text(max_size=10), st.dictionaries(st.text(max_size=5), st.text(max_size=5))
        ),
        min_size=1,
        max_size=20,
    ),
    codec=st.sampled_from(CODECS),
)
def test_batch_entry_round_trip(messages: list[tuple[bytes, str, dict[str, str]]], codec: int) -> None:
    singles = []
    for payload, key, props in messages:
        single = pb.SingleMessageMetadata(partition_key=key, payload_size=0)
        single.properties.extend(pb.KeyValue(key=k, value=v) for k, v in props.items())
        singles.append((single, payload))
    raw = build_batch(singles)
    assert [p for _, p in parse_batch(raw, len(messages))] == [m[0] for m in messages]
    metadata = _metadata(num_messages_in_batch=len(messages), compression=codec, uncompressed_size=len(raw))
    entry = build_entry(metadata, compress(codec, raw))
    verify_entry(entry)
    meta, decoded = entry_messages(entry)
    assert meta.num_messages_in_batch == len(messages)
    assert [(s.partition_key if s else None, p) for s, p in decoded] == [(k, p) for p, k, _ in messages]


def test_truncated_batch_is_a_protocol_error() -> None:
    raw = build_batch([(pb.SingleMessageMetadata(payload_size=0), b"abcdef")])
    with pytest.raises(ProtocolError):
        parse_batch(raw[:-2], 1)
    with pytest.raises(ProtocolError):
        parse_batch(raw, 2)
