"""SEND_RECEIPT frames, the broker's answer to every stored entry, encoded from one template.

Byte layout: a simple command frame (see _frames.py) around

    BaseCommand { type = SEND_RECEIPT, send_receipt = CommandSendReceipt {
        producer_id, sequence_id, message_id = MessageIdData { ledgerId, entryId },
        highest_sequence_id (only when the SEND carried one) } }

Building a BaseCommand per receipt costs about twice as much as setting the five fields of one
kept message and serializing it (issue 12: the receipt is paid once per unbatched entry), so a
SendReceiptEncoder keeps that message. Its bytes are exactly what a fresh message would give.
"""

from __future__ import annotations

import struct

from velamq.protocol import _pulsar_api_pb2 as pb
from velamq.protocol._ids import U64

_HEADER = struct.Struct(">II")


class SendReceiptEncoder:
    """Encodes SEND_RECEIPT frames from one kept BaseCommand. One per connection (not thread-safe)."""

    __slots__ = ("_command", "_has_highest", "_message_id", "_receipt")

    def __init__(self) -> None:
        self._command = pb.BaseCommand(type=pb.BaseCommand.SEND_RECEIPT)
        self._receipt = self._command.send_receipt
        self._message_id = self._receipt.message_id
        self._has_highest = False  # whether highest_sequence_id is set in the kept message

    def encode(self, producer_id: int, sequence_id: int, highest_sequence_id: int | None,
               ledger_id: int, entry_id: int) -> bytes:
        """The frame; ledger and entry ids may be negative (a duplicate's -1, -1)."""
        receipt = self._receipt
        receipt.producer_id = producer_id
        receipt.sequence_id = sequence_id
        if highest_sequence_id is None:
            if self._has_highest:  # cleared only when set: most producers never send it
                receipt.ClearField("highest_sequence_id")
                self._has_highest = False
        else:
            receipt.highest_sequence_id = highest_sequence_id
            self._has_highest = True
        message_id = self._message_id
        message_id.ledgerId = ledger_id % U64
        message_id.entryId = entry_id % U64
        body = self._command.SerializeToString()
        return _HEADER.pack(4 + len(body), len(body)) + body
