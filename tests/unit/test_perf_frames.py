"""The lean SEND frames of `velamq perf produce --lean` are byte for byte what protobuf and the
protocol's own encoders produce, and the receipt counter counts, orders and refuses as it says."""

from __future__ import annotations

import pytest

from velamq.cli._perf_frames import PONG, LeanError, ReceiptCounter, SendFrames
from velamq.protocol import (
    FrameDecoder,
    SendReceiptEncoder,
    build_batch,
    build_entry,
    encode_command,
    encode_payload_command,
    pb,
    varint,
)

T = pb.BaseCommand
SEQUENCE_IDS = (0, 1, 127, 128, 255, 16_383, 16_384, 2**21, 2**40, 2**63 - 1)


def reference(producer_id: int, name: str, sequence_id: int, publish_time: int, body: bytes, n: int) -> bytes:
    command = pb.BaseCommand(type=T.SEND)
    command.send.producer_id, command.send.sequence_id = producer_id, sequence_id
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=publish_time)
    if n > 1:
        command.send.num_messages = n
        metadata.num_messages_in_batch = n
    return encode_payload_command(command, build_entry(metadata, body))


@pytest.mark.parametrize("producer_id", [0, 1, 300, 2**33])
@pytest.mark.parametrize("n", [1, 7])
def test_frames_equal_protobufs_encoding(producer_id: int, n: int) -> None:
    body = build_batch([(pb.SingleMessageMetadata(), b"m" * 10)] * n) if n > 1 else bytes(range(256)) * 2
    frames = SendFrames(producer_id, "standalone-0-17", body, n)
    for sequence_id in SEQUENCE_IDS:
        assert frames.frame(sequence_id, 1_764_300_000_123) == reference(
            producer_id, "standalone-0-17", sequence_id, 1_764_300_000_123, body, n)
    many = frames.frames(100, 300, 5)  # across the 128 and 256 boundaries of the low byte
    assert many == b"".join(reference(producer_id, "standalone-0-17", s, 5, body, n) for s in range(100, 400))


def test_the_broker_decoder_accepts_the_frames_with_valid_checksums() -> None:
    decoder = FrameDecoder(5 * 1024 * 1024)
    frames = decoder.feed(SendFrames(3, "p", b"x" * 100).frames(0, 200, 1))
    assert len(frames) == 200
    assert all(f.checksum_valid and f.command.send.sequence_id == i for i, f in enumerate(frames))


def test_varint_matches_protobuf() -> None:
    for value in SEQUENCE_IDS:
        message = pb.CommandSend(producer_id=0, sequence_id=value)
        assert message.SerializeToString().endswith(varint(value))


def receipts(encoder: SendReceiptEncoder, sequence_ids: range) -> bytes:
    return b"".join(encoder.encode(1, s, None, 5, s) for s in sequence_ids)


def test_receipt_counter_counts_across_split_reads_and_answers_pings() -> None:
    written: list[bytes] = []
    counter = ReceiptCounter(written.append)
    ping = encode_command(pb.BaseCommand(type=T.PING, ping=pb.CommandPing()))
    data = receipts(SendReceiptEncoder(), range(10)) + ping
    counts = [counter(data[i:i + 7]) for i in range(0, len(data), 7)]
    assert sum(counts) == 10
    assert written == [PONG]
    assert counter.last_sequence_id == 9


def test_receipt_counter_refuses_receipts_out_of_order_and_send_errors() -> None:
    counter = ReceiptCounter(lambda _: None)
    encoder = SendReceiptEncoder()
    counter(receipts(encoder, range(5, 8)))
    with pytest.raises(LeanError, match="receipt 3 after 7"):
        counter(receipts(encoder, range(3, 4)))
    error = pb.BaseCommand(type=T.SEND_ERROR)
    error.send_error.producer_id, error.send_error.sequence_id = 1, 9
    error.send_error.error, error.send_error.message = pb.PersistenceError, "disk full"
    with pytest.raises(LeanError, match="disk full"):
        ReceiptCounter(lambda _: None)(encode_command(error))
