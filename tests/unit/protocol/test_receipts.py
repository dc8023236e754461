"""SendReceiptEncoder gives exactly the bytes of a SEND_RECEIPT built afresh, whatever came before."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from velamq.protocol import FrameDecoder, SendReceiptEncoder, encode_command, pb, unsigned64

U64_MAX = (1 << 64) - 1
ids = st.integers(min_value=-1, max_value=(1 << 63) - 1)
receipts = st.tuples(
    st.integers(min_value=0, max_value=U64_MAX),  # producer id
    st.integers(min_value=0, max_value=U64_MAX),  # sequence id
    st.none() | st.integers(min_value=0, max_value=U64_MAX),  # highest sequence id
    ids,  # ledger id
    ids,  # entry id
)


def fresh(producer_id: int, sequence_id: int, highest: int | None, ledger_id: int, entry_id: int) -> bytes:
    reply = pb.BaseCommand(type=pb.BaseCommand.SEND_RECEIPT)
    r = reply.send_receipt
    r.producer_id = producer_id
    r.sequence_id = sequence_id
    if highest is not None:
        r.highest_sequence_id = highest
    r.message_id.ledgerId = unsigned64(ledger_id)
    r.message_id.entryId = unsigned64(entry_id)
    return encode_command(reply)


Receipt = tuple[int, int, int | None, int, int]


@given(st.lists(receipts, min_size=1, max_size=20))
def test_the_template_encodes_each_receipt_as_a_fresh_command_would(sequence: list[Receipt]) -> None:
    encoder = SendReceiptEncoder()  # one encoder for the whole sequence: nothing may leak across
    for receipt in sequence:
        assert encoder.encode(*receipt) == fresh(*receipt)


def test_a_receipt_decodes_with_the_fields_it_was_given() -> None:
    encoder = SendReceiptEncoder()
    data = encoder.encode(7, 41, 45, 3, 9) + encoder.encode(7, 42, None, -1, -1)
    first, second = (f.command.send_receipt for f in FrameDecoder(1 << 20).feed(data))
    assert (first.producer_id, first.sequence_id, first.highest_sequence_id) == (7, 41, 45)
    assert (first.message_id.ledgerId, first.message_id.entryId) == (3, 9)
    assert not second.HasField("highest_sequence_id")
    assert (second.message_id.ledgerId, second.message_id.entryId) == (U64_MAX, U64_MAX)
