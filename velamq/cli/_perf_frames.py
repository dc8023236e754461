"""The lean load of `velamq perf produce --lean`: SEND frames built without a client, receipts
counted without decoding each one (issue 22).

A client library spends 10-30 µs of CPU per message (velamq's and the official one), so a tool
built on one measures the client, not the broker. The lean path instead:

- builds each SEND frame from kept byte templates: the command and the message metadata are
  written field by field (their protobuf encoding, checked against protobuf's own in the tests),
  with the frame's CRC32C from the C `crc32c` package; about 1.5 µs per frame;
- counts the SEND_RECEIPTs of a read by their first bytes (the frame type), decoding only the last
  one of the read, whose sequence id must ascend (the broker answers a producer's sends in order);
- answers a broker's PING with a PONG; any other reply is an error (a refused send, a closed
  producer).

Sans-IO: the socket (blocking or asyncio) belongs to the caller. benchmarks/lean_publish.py and
benchmarks/lean_consume.py use these pieces too.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

import crc32c as _crc32c

from velamq._errors import VelamqError
from velamq.protocol import encode_command, pb, varint

T = pb.BaseCommand
_HEADER: Final = struct.Struct(">II")
_U32: Final = struct.Struct(">I")
_ENTRY_HEAD: Final = struct.Struct(">HII")  # checksum magic, CRC32C, metadata size
_CHECKSUM_MAGIC: Final = 0x0E01
RECEIPT_PREFIX: Final = bytes((0x08, T.SEND_RECEIPT))  # BaseCommand field 1 (type) = SEND_RECEIPT

# Wire tags (field number << 3 | wire type) of the fields the lean frames carry.
_VARINT, _BYTES = 0, 2


def _tag(message: type[pb.BaseCommand] | type[pb.CommandSend] | type[pb.MessageMetadata], name: str,
         wire_type: int) -> bytes:
    return varint(message.DESCRIPTOR.fields_by_name[name].number << 3 | wire_type)


_TYPE_SEND: Final = _tag(T, "type", _VARINT) + varint(T.SEND)
_SEND: Final = _tag(T, "send", _BYTES)
_PRODUCER_ID: Final = _tag(pb.CommandSend, "producer_id", _VARINT)
_SEQUENCE_ID: Final = _tag(pb.CommandSend, "sequence_id", _VARINT)
_NUM_MESSAGES: Final = _tag(pb.CommandSend, "num_messages", _VARINT)
_PRODUCER_NAME: Final = _tag(pb.MessageMetadata, "producer_name", _BYTES)
_META_SEQUENCE_ID: Final = _tag(pb.MessageMetadata, "sequence_id", _VARINT)
_PUBLISH_TIME: Final = _tag(pb.MessageMetadata, "publish_time", _VARINT)
_NUM_IN_BATCH: Final = _tag(pb.MessageMetadata, "num_messages_in_batch", _VARINT)
_SMALL: Final = [bytes((i,)) for i in range(128)]  # the varints of 0..127
_LOW: Final = [bytes((i | 0x80,)) for i in range(128)]  # the first byte of a larger varint


class LeanError(VelamqError):
    """The broker refused the lean load or answered something it does not expect."""


class SendFrames:
    """SEND frames of one producer: `frame(sequence_id, publish_time_ms)` gives the bytes of one.

    `body` is the entry's payload: one message's bytes, or a whole batch payload (build_batch)
    when `num_messages` > 1. The metadata holds the required fields only (producer name, sequence
    id, publish time) and num_messages_in_batch for a batch, encoded in field order as protobuf
    does."""

    __slots__ = ("_batch_meta", "_batch_send", "_body", "_name", "_producer")

    def __init__(self, producer_id: int, producer_name: str, body: bytes, num_messages: int = 1) -> None:
        name = producer_name.encode()
        self._producer = _PRODUCER_ID + varint(producer_id)
        self._name = _PRODUCER_NAME + varint(len(name)) + name
        self._body = body
        self._batch_send = _NUM_MESSAGES + varint(num_messages) if num_messages > 1 else b""
        self._batch_meta = _NUM_IN_BATCH + varint(num_messages) if num_messages > 1 else b""

    def frame(self, sequence_id: int, publish_time_ms: int) -> bytes:
        return self.frames(sequence_id, 1, publish_time_ms)

    def frames(self, first_sequence_id: int, count: int, publish_time_ms: int) -> bytes:
        """`count` frames with ascending sequence ids from `first_sequence_id`, as one write."""
        # Everything but the sequence id is the same for the frames of one call: kept as bytes,
        # so each frame is a few concatenations, one CRC32C over its metadata and one over the body.
        # A sequence id's varint is its low 7 bits (a table) before the varint of the rest, which
        # changes once in 128 ids.
        crc, pack_u32, header, entry_head = _crc32c.crc32c, _U32.pack, _HEADER.pack, _ENTRY_HEAD.pack
        send_head = _TYPE_SEND + _SEND
        send_lead, send_tail = self._producer + _SEQUENCE_ID, self._batch_send
        meta_lead = self._name + _META_SEQUENCE_ID
        meta_tail = _PUBLISH_TIME + varint(publish_time_ms) + self._batch_meta
        body = self._body
        fixed = 4 + 10 + len(body)
        out: list[bytes] = []
        high, high_bytes = -1, b""
        for sequence_id in range(first_sequence_id, first_sequence_id + count):
            if sequence_id < 128:
                seq = _SMALL[sequence_id]
            else:
                if sequence_id >> 7 != high:
                    high = sequence_id >> 7
                    high_bytes = varint(high)
                seq = _LOW[sequence_id & 0x7F] + high_bytes
            send = send_lead + seq + send_tail
            command = send_head + _SMALL[len(send)] + send  # a CommandSend of these fields is < 128 bytes
            meta = meta_lead + seq + meta_tail
            checksum = crc(body, crc(meta, crc(pack_u32(len(meta)))))
            out += (header(fixed + len(command) + len(meta), len(command)), command,
                    entry_head(_CHECKSUM_MAGIC, checksum, len(meta)), meta, body)
        return b"".join(out)


def scan_frames(buf: bytearray, prefix: bytes, other: Callable[[bytes], None]) -> tuple[int, int, int]:
    """The whole frames at the start of `buf`, without decoding the common ones: (bytes they take,
    how many have a command starting with `prefix`, the offset of the last of those or -1); every
    other frame's command bytes go to `other`."""
    offset, end, count, last = 0, len(buf), 0, -1
    while end - offset >= 4:
        (total,) = _U32.unpack_from(buf, offset)
        if end - offset - 4 < total:
            break
        if buf[offset + 8:offset + 8 + len(prefix)] == prefix:
            count += 1
            last = offset
        else:
            other(command_bytes(buf, offset))
        offset += 4 + total
    return offset, count, last


def command_bytes(buf: bytearray, offset: int) -> bytes:
    """The command of the frame at `offset` (after its total and command sizes)."""
    (size,) = _U32.unpack_from(buf, offset + 4)
    return bytes(buf[offset + 8:offset + 8 + size])


PONG: Final = encode_command(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong()))


class ReceiptCounter:
    """Counts SEND_RECEIPT frames in a byte stream (`__call__(data)` -> receipts in it). A PING is
    answered through `write`; anything else raises LeanError. The last receipt of each read is
    decoded: its sequence id must be above the previous one checked."""

    def __init__(self, write: Callable[[bytes], object]) -> None:
        self._write = write
        self._buf = bytearray()
        self.last_sequence_id = -1

    def __call__(self, data: bytes) -> int:
        buf = self._buf
        buf += data
        offset, count, last = scan_frames(buf, RECEIPT_PREFIX, self._other)
        if last >= 0:
            self._check_order(command_bytes(buf, last))
        del buf[:offset]
        return count

    def _check_order(self, body: bytes) -> None:
        command = pb.BaseCommand()
        command.ParseFromString(body)
        sequence_id = command.send_receipt.sequence_id
        if sequence_id <= self.last_sequence_id:
            raise LeanError(f"receipt {sequence_id} after {self.last_sequence_id}")
        self.last_sequence_id = sequence_id

    def _other(self, body: bytes) -> None:
        command = pb.BaseCommand()
        command.ParseFromString(body)
        if command.type == T.PING:
            self._write(PONG)
            return
        if command.type == T.SEND_ERROR:
            raise LeanError(f"the broker refused a send: {command.send_error.message}")
        raise LeanError(f"unexpected reply: {T.Type.Name(command.type)}")


def connect_command(client_version: str) -> bytes:
    command = pb.BaseCommand(type=T.CONNECT)
    command.connect.client_version = client_version
    command.connect.protocol_version = 21
    return encode_command(command)


def producer_command(topic: str, producer_id: int, request_id: int) -> bytes:
    command = pb.BaseCommand(type=T.PRODUCER)
    command.producer.topic = topic
    command.producer.producer_id = producer_id
    command.producer.request_id = request_id
    return encode_command(command)


def whole_command(buf: bytes | bytearray) -> tuple[pb.BaseCommand, int] | None:
    """The first frame's command in `buf` and the bytes the frame takes, or None if incomplete."""
    if len(buf) < 8:
        return None
    total, size = _HEADER.unpack_from(buf)
    if len(buf) < 4 + total:
        return None
    command = pb.BaseCommand()
    command.ParseFromString(bytes(buf[8:8 + size]))
    return command, 4 + total
