"""Ack grouping and batch acks: the two cases the ordered-consumer work found wrong."""

from __future__ import annotations

from velamq.client._message import MessageId
from velamq.client.consumer._ack_grouping import AckGroupingTracker, BatchAcks
from velamq.protocol import pb


def test_cumulative_ack_after_a_seek_backwards_is_sent() -> None:
    sent: list[tuple[int, list[tuple[int, int]]]] = []

    def send(ack_type: int, ids: list[pb.MessageIdData]) -> bool:
        sent.append((ack_type, [(i.ledgerId, i.entryId) for i in ids]))
        return True

    tracker = AckGroupingTracker(send, grouping_time_ms=0, max_size=100)
    tracker.add_cumulative(MessageId(1, 10))
    tracker.flush()
    tracker.discard()  # what seek() does
    tracker.add_cumulative(MessageId(1, 5))
    tracker.flush()
    assert sent == [(pb.CommandAck.Cumulative, [(1, 10)]), (pb.CommandAck.Cumulative, [(1, 5)])]


def test_batch_ack_without_encoding_tracks_the_same_state() -> None:
    acks = BatchAcks()
    acks.register((1, 2), 4, {0, 1, 2, 3})
    assert acks.ack((1, 2), 0, encode=False) == (False, [])
    assert acks.ack((1, 2), 1, encode=True) == (False, [0b1100])
    assert acks.ack((1, 2), 2, encode=False) == (False, [])
    assert acks.ack((1, 2), 3, encode=False) == (True, [])
