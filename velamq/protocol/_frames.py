"""Pulsar frames: split a byte stream into commands, and join commands into bytes. Sans-IO.

Byte layout (all integers big-endian):

    simple command   [u32 total_size][u32 command_size][BaseCommand]
                     total_size = 4 + command_size
    payload command  [u32 total_size][u32 command_size][BaseCommand][entry]
    (SEND, MESSAGE)  total_size counts every byte after itself

    entry            [u16 0x0e01][u32 CRC32C][u32 metadata_size][MessageMetadata][payload]
                     the CRC covers everything after the CRC field
    entry, old form  [u32 metadata_size][MessageMetadata][payload]     (no magic: no checksum)
    broker entry     [u16 0x0e02][u32 size][BrokerEntryMetadata]  may precede the entry in MESSAGE;
    metadata         velamq never sends it and skips it on receipt

velamq stores and forwards the entry in its checksummed form, exactly as the producer sent it
(WC-5): the broker never re-encodes metadata or payload. An entry that arrives without a checksum
is given one (the bytes of metadata and payload are unchanged).
"""

from __future__ import annotations

import struct

import crc32c as _crc32c
from google.protobuf.message import DecodeError

from velamq._errors import ChecksumMismatchError, FrameTooLargeError, ProtocolError
from velamq.protocol import _pulsar_api_pb2 as pb
from velamq.protocol._entry import BROKER_ENTRY_MAGIC, CHECKSUM_MAGIC, HEAD_BYTES, verify_entry, with_checksum

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_HEADER = struct.Struct(">II")
_ENTRY_HEAD = struct.Struct(">HII")  # magic, crc, metadata_size

# The smallest possible frame: total_size=4+command_size with an empty command is invalid anyway.
_command_bytes_max = 64 * 1024 * 1024


class Frame:
    """One decoded frame: the command and, for SEND/MESSAGE, the checksummed entry bytes.

    A plain class with slots, built once per frame: a frozen dataclass's __init__ sets each field
    through object.__setattr__, which cost 0.3 µs per unbatched SEND (issue 22). Treat it as
    read-only all the same."""

    __slots__ = ("checksum_valid", "command", "entry")

    def __init__(self, command: pb.BaseCommand, entry: bytes | None = None, checksum_valid: bool = True) -> None:
        self.command = command
        self.entry = entry
        # False when the entry's CRC32C does not verify: the broker answers SEND_ERROR ChecksumError
        # for that one send and keeps the connection (the frame itself was well formed).
        self.checksum_valid = checksum_valid

    def __repr__(self) -> str:
        return f"Frame(command={self.command!r}, entry={self.entry!r}, checksum_valid={self.checksum_valid!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not Frame:
            return NotImplemented
        return (self.command, self.entry, self.checksum_valid) == (other.command, other.entry, other.checksum_valid)

    __hash__ = None  # type: ignore[assignment]  # equal by value, like the dataclass it replaced


def encode_command(command: pb.BaseCommand) -> bytes:
    body = command.SerializeToString()
    return _HEADER.pack(4 + len(body), len(body)) + body


def encode_payload_command(command: pb.BaseCommand, entry: bytes) -> bytes:
    """A SEND or MESSAGE frame around an entry that is already in checksummed form."""
    body = command.SerializeToString()
    return b"".join((_HEADER.pack(4 + len(body) + len(entry), len(body)), body, entry))


class FrameDecoder:
    """Feed bytes as they arrive; get whole frames out. Raises ProtocolError subclasses on bad input.

    After an error the decoder is unusable: the caller closes the connection (OP-6).
    """

    __slots__ = ("__weakref__", "_buffer", "frame_bytes_max", "verify_checksums")  # weakref: tests see it freed

    def __init__(self, frame_bytes_max: int, verify_checksums: bool = True) -> None:
        self._buffer = bytearray()
        self.frame_bytes_max = frame_bytes_max
        self.verify_checksums = verify_checksums

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buffer
        buf += data
        frames: list[Frame] = []
        offset = 0
        end = len(buf)
        # One copy per frame part: commands and entries are cut from a view of the buffer (the
        # view is released before the buffer is trimmed: a bytearray with a view cannot resize).
        with memoryview(buf) as view:
            while end - offset >= 4:
                (total,) = _U32.unpack_from(view, offset)
                if total > self.frame_bytes_max:
                    raise FrameTooLargeError(total, self.frame_bytes_max)
                if total < 4:
                    raise ProtocolError(f"frame size {total} is smaller than its command-size field")
                if end - offset - 4 < total:
                    break
                start = offset + 4
                offset = start + total
                frames.append(self._decode_frame(view, start, offset))
        if offset:
            del buf[:offset]
        return frames

    def _decode_frame(self, view: memoryview, start: int, end: int) -> Frame:
        (command_size,) = _U32.unpack_from(view, start)
        body_start = start + 4
        entry_start = body_start + command_size
        if command_size > end - body_start or command_size > _command_bytes_max:
            raise ProtocolError(f"command size {command_size} exceeds frame size {end - start}")
        command = pb.BaseCommand()
        try:
            # From the view: the parser takes any buffer and copies it itself (one copy, not two;
            # the stubs say bytes only).
            command.ParseFromString(view[body_start:entry_start])  # type: ignore[arg-type]
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise ProtocolError(f"undecodable command: {exc}") from None
        _check_command(command)
        if entry_start == end:
            return Frame(command)
        rest = view[entry_start:end]
        try:
            return Frame(command, self._entry(rest))
        except ChecksumMismatchError:
            return Frame(command, bytes(rest), checksum_valid=False)

    def _entry(self, rest: memoryview) -> bytes:
        if len(rest) >= HEAD_BYTES and self.verify_checksums:
            # The common case first, in one unpack: a checksummed entry (verify_entry's checks).
            magic, expected, meta_size = _ENTRY_HEAD.unpack_from(rest, 0)
            if magic == CHECKSUM_MAGIC:
                if meta_size > len(rest) - HEAD_BYTES:
                    raise ProtocolError(f"metadata size {meta_size} exceeds the entry")
                actual = _crc32c.crc32c(rest[6:])
                if actual != expected:
                    raise ChecksumMismatchError(expected, actual)
                return bytes(rest)
        if len(rest) >= 2 and _U16.unpack_from(rest, 0)[0] == BROKER_ENTRY_MAGIC:
            if len(rest) < 6:
                raise ProtocolError("truncated broker entry metadata")
            (size,) = _U32.unpack_from(rest, 2)
            rest = rest[6 + size :]
        if len(rest) >= 2 and _U16.unpack_from(rest, 0)[0] == CHECKSUM_MAGIC:
            if self.verify_checksums:
                verify_entry(rest)
            else:
                _check_entry_shape(rest, 6)
            return bytes(rest)
        _check_entry_shape(rest, 0)
        return with_checksum(rest)


# Commands whose body may be absent (an empty message is all they carry).
_BODY_OPTIONAL = frozenset((pb.BaseCommand.PING, pb.BaseCommand.PONG))
_FIELD_OF_TYPE = {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.number > 1}


def _check_command(command: pb.BaseCommand) -> None:
    """The protobuf runtime does not enforce proto2 `required` on parse, so a frame without a
    type would read as CONNECT and one without its body as all zeros: refuse both."""
    if not command.HasField("type"):
        raise ProtocolError("command without a type")
    body = _FIELD_OF_TYPE.get(command.type)
    if body is None:
        raise ProtocolError(f"unknown command type {command.type}")
    if not command.HasField(body):  # type: ignore[arg-type]
        if command.type in _BODY_OPTIONAL:
            return
        raise ProtocolError(f"{body} command without its body")
    if not command.IsInitialized():
        raise ProtocolError(f"{body} command is missing required fields")


def _check_entry_shape(entry: bytes | memoryview, metadata_size_at: int) -> None:
    if len(entry) < metadata_size_at + 4:
        raise ProtocolError("truncated entry")
    (meta_size,) = _U32.unpack_from(entry, metadata_size_at)
    if meta_size > len(entry) - metadata_size_at - 4:
        raise ProtocolError(f"metadata size {meta_size} exceeds the entry")
