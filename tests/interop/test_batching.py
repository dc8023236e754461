"""WC-3, WC-5, PR-6, PR-7: batches and every compression codec, written and read by the official client."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from interop_helpers import SendTracker, ack_all, assert_no_more, datas, receive_n

pytestmark = pytest.mark.timeout(60)

CODECS = [
    pulsar.CompressionType.NONE,
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]

batch_max_messages = 25


def payload(i: int) -> bytes:
    """Compressible (repetitive) and distinct per message, of varying length."""
    return (b"record-%05d|" % i) * (1 + i % 40)


def produce_async(producer: Any, n: int) -> SendTracker:
    tracker = SendTracker(n)
    for i in range(n):
        producer.send_async(payload(i), tracker.callback(i), properties={"i": str(i)},
                            partition_key=f"k{i % 7}")
    producer.flush()
    tracker.wait()
    assert all(r == pulsar.Result.Ok for r in tracker.results), set(map(str, tracker.results))
    return tracker


def check_fields(msgs: list[Any], n: int) -> None:
    assert datas(msgs) == [payload(i) for i in range(n)]
    assert [m.properties() for m in msgs] == [{"i": str(i)} for i in range(n)]
    assert [m.partition_key() for m in msgs] == [f"k{i % 7}" for i in range(n)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: str(c).split(".")[-1])
def test_batched_with_codec(client: Any, topic: str, codec: Any) -> None:
    n = 200
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(
        topic, compression_type=codec, batching_enabled=True, batching_max_messages=batch_max_messages,
        batching_max_publish_delay_ms=50, block_if_queue_full=True,
    )
    tracker = produce_async(producer, n)

    msgs = receive_n(consumer, n)
    check_fields(msgs, n)
    received_ids = [m.message_id() for m in msgs]
    # The ids from send receipts (entry of the batch + index) are the ids the consumer sees.
    assert received_ids == tracker.ids

    # Group messages by entry: each entry is one batch with indexes 0..k-1, entries in order.
    entries: dict[tuple[int, int], list[int]] = {}
    for mid in received_ids:
        entries.setdefault((mid.ledger_id(), mid.entry_id()), []).append(mid.batch_index())
    assert len(entries) < n, "nothing was batched"
    assert list(entries) == sorted(entries)
    for idx in entries.values():
        assert idx == list(range(len(idx)))
        assert len(idx) <= batch_max_messages
    assert sum(len(v) for v in entries.values()) == n

    ack_all(consumer, msgs)
    assert_no_more(consumer)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: str(c).split(".")[-1])
def test_unbatched_with_codec(client: Any, topic: str, codec: Any) -> None:
    n = 40
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, compression_type=codec, batching_enabled=False)
    tracker = produce_async(producer, n)
    msgs = receive_n(consumer, n)
    check_fields(msgs, n)
    ids = [m.message_id() for m in msgs]
    assert ids == tracker.ids
    assert all(i.batch_index() == -1 for i in ids)
    assert [i.entry_id() for i in ids] == list(range(n))
    ack_all(consumer, msgs)
    assert_no_more(consumer)


def test_batches_read_by_reader_and_late_subscriber(client: Any, topic: str) -> None:
    """Stored batches are served again, intact, to a reader and to a subscription created afterwards."""
    n = 120
    producer = client.create_producer(
        topic, compression_type=pulsar.CompressionType.LZ4, batching_enabled=True,
        batching_max_messages=batch_max_messages, batching_max_publish_delay_ms=50,
    )
    tracker = produce_async(producer, n)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    msgs = [reader.read_next(10_000) for _ in range(n)]
    check_fields(msgs, n)
    assert [m.message_id() for m in msgs] == tracker.ids
    late = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    check_fields(receive_n(late, n), n)


def test_batch_bytes_limit_splits_batches(client: Any, topic: str) -> None:
    """A batch closes on batching_max_allowed_size_in_bytes; large and small messages mix."""
    n = 60
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=1000,
        batching_max_allowed_size_in_bytes=16 * 1024, batching_max_publish_delay_ms=100,
    )
    blobs = [bytes([i % 256]) * (100 if i % 3 else 9000) for i in range(n)]
    tracker = SendTracker(n)
    for i, b in enumerate(blobs):
        producer.send_async(b, tracker.callback(i))
    producer.flush()
    tracker.wait()
    msgs = receive_n(consumer, n)
    assert datas(msgs) == blobs
    entries = {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs}
    assert 1 < len(entries) < n
    ack_all(consumer, msgs)
