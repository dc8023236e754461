"""One ledger's file and its offset index: the byte layout, recovery scan and reads.

Ledger file `<ledger id:020d>.log`: records back to back from offset 0, no file header. Entry i of
the ledger is record i. All integers little-endian.

    offset  size  field
    0       4     u32 length of data, in bytes (an entry is never empty, see below)
    4       4     u32 CRC32C (Castagnoli) of data
    8       n     data: the entry, opaque bytes

A crash can leave a torn tail: a short header, a length running past the end of the file, a CRC
that does not verify, or zeros where the file system extended the file but never wrote the data.
Empty entries are refused by append because a zero-filled tail would otherwise read as a run of
valid empty records (CRC32C of b"" is 0).

Index file `<ledger id:020d>.idx`, written once when the ledger is sealed (rolled over), so that
reopening an old ledger needs neither a scan nor the ledger's data in memory:

    offset  size  field
    0       8     magic b"VLMQIDX1" (format version 1)
    8       8     u64 ledger id
    16      8     u64 entry count N
    24      8     u64 ledger file length in bytes at seal
    32      8N    u64 offset of record i in the ledger file, i = 0 .. N-1
    32+8N   4     u32 CRC32C of all preceding bytes of this file

Everything here blocks; the storage threads call it, never the event loop.
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c

from velamq._errors import CorruptEntryError

log = logging.getLogger("velamq.storage")

RECORD_HEADER = struct.Struct("<II")
RECORD_HEADER_BYTES = RECORD_HEADER.size
INDEX_MAGIC = b"VLMQIDX1"
INDEX_HEADER = struct.Struct("<8sQQQ")
INDEX_HEADER_BYTES = INDEX_HEADER.size
INDEX_TRAILER = struct.Struct("<I")

# A record longer than this is taken for garbage by the recovery scan (a torn length field).
record_data_bytes_max = 1 << 30
# How much of a ledger file the recovery scan reads per system call.
scan_chunk_bytes = 4 * 1024 * 1024


def crc_of(data: bytes | memoryview) -> int:
    return int(crc32c.crc32c(data))


def record_header(data: bytes) -> bytes:
    return RECORD_HEADER.pack(len(data), crc_of(data))


def new_offsets() -> array[int]:
    """An array of u64 offsets; typecode 'q' so it also holds the file's length as an int."""
    return array("q")


@dataclass(slots=True)
class ScanResult:
    """What a recovery scan found in a ledger file."""

    offsets: array[int]  # start of each intact record
    valid_bytes: int  # end of the last intact record; the file is truncated here
    file_bytes: int  # length of the file before any truncation
    tail: list[bytes]  # data of the last intact records, newest last, at most tail_bytes_max in all


def scan(path: Path, tail_bytes_max: int) -> ScanResult:
    """Read a ledger file front to back and stop at the first record that is not intact."""
    offsets = new_offsets()
    tail: deque[bytes] = deque()
    tail_bytes = 0
    with open(path, "rb", buffering=0) as f:
        file_bytes = os.fstat(f.fileno()).st_size
        buf = b""
        buf_start = 0  # file offset of buf[0]
        pos = 0  # file offset of the next record
        eof = False
        while True:
            rel = pos - buf_start
            # Make sure the next header, then the next record, is wholly in buf (or the file ends).
            need = RECORD_HEADER_BYTES
            if len(buf) - rel >= RECORD_HEADER_BYTES:
                length = RECORD_HEADER.unpack_from(buf, rel)[0]
                if 0 < length <= record_data_bytes_max:
                    need += length
            if len(buf) - rel < need and not eof:
                chunk = f.read(max(scan_chunk_bytes, need))
                buf = buf[rel:] + chunk
                buf_start = pos
                eof = not chunk
                continue
            if len(buf) - rel < RECORD_HEADER_BYTES:
                break
            length, crc = RECORD_HEADER.unpack_from(buf, rel)
            if length == 0 or length > record_data_bytes_max or len(buf) - rel < RECORD_HEADER_BYTES + length:
                break
            data = buf[rel + RECORD_HEADER_BYTES : rel + RECORD_HEADER_BYTES + length]
            if crc_of(data) != crc:
                break
            offsets.append(pos)
            pos += RECORD_HEADER_BYTES + length
            tail.append(data)
            tail_bytes += length
            while tail_bytes > tail_bytes_max and tail:
                tail_bytes -= len(tail.popleft())
    return ScanResult(offsets, pos, file_bytes, list(tail))


def recover(path: Path, tail_bytes_max: int, *, sync: bool) -> ScanResult:
    """Scan a ledger file that was not sealed and cut off a torn or corrupt tail, durably."""
    result = scan(path, tail_bytes_max)
    if result.valid_bytes < result.file_bytes:
        log.warning(
            "ledger file %s: torn or corrupt tail, truncating %d bytes after entry %d (offset %d)",
            path,
            result.file_bytes - result.valid_bytes,
            len(result.offsets) - 1,
            result.valid_bytes,
        )
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, result.valid_bytes)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    return result


def encode_index(ledger_id: int, offsets: Sequence[int], file_bytes: int) -> bytes:
    body = INDEX_HEADER.pack(INDEX_MAGIC, ledger_id, len(offsets), file_bytes)
    body += struct.pack(f"<{len(offsets)}Q", *offsets)
    return body + INDEX_TRAILER.pack(crc_of(body))


@dataclass(frozen=True, slots=True)
class LedgerIndex:
    """A sealed ledger's offsets, as read from its index file."""

    ledger_id: int
    entries: int
    file_bytes: int
    raw: bytes  # the index file; offsets are unpacked on demand, two per read

    def offset(self, entry_id: int) -> int:
        """Start of record entry_id, or the file length for entry_id == entries."""
        if entry_id >= self.entries:
            return self.file_bytes
        return int(struct.unpack_from("<Q", self.raw, INDEX_HEADER_BYTES + 8 * entry_id)[0])


def read_index(path: Path, ledger_id: int) -> LedgerIndex | None:
    """The index at path, or None if it is missing or does not verify (the caller rescans)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) < INDEX_HEADER_BYTES + INDEX_TRAILER.size:
        return None
    magic, stored_id, entries, file_bytes = INDEX_HEADER.unpack_from(raw, 0)
    expected_len = INDEX_HEADER_BYTES + 8 * entries + INDEX_TRAILER.size
    if magic != INDEX_MAGIC or stored_id != ledger_id or len(raw) != expected_len:
        return None
    (crc,) = INDEX_TRAILER.unpack_from(raw, expected_len - INDEX_TRAILER.size)
    if crc_of(memoryview(raw)[: expected_len - INDEX_TRAILER.size]) != crc:
        return None
    return LedgerIndex(ledger_id, entries, file_bytes, raw)


def read_records(path: Path, where: str, first_entry_id: int, start: int, end: int, count: int) -> list[bytes]:
    """Read `count` consecutive records occupying bytes [start, end) of a ledger file.

    Every record is checked: a length that does not fit or a CRC that does not verify raises
    CorruptEntryError naming the entry, so damage in the middle of a ledger is never skipped.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = os.pread(fd, end - start, start)
    finally:
        os.close(fd)
    if len(buf) != end - start:
        raise CorruptEntryError(
            where, f"entries {first_entry_id}..{first_entry_id + count - 1}: file ends at {start + len(buf)}"
        )
    out: list[bytes] = []
    rel = 0
    view = memoryview(buf)
    for i in range(count):
        entry_id = first_entry_id + i
        if len(buf) - rel < RECORD_HEADER_BYTES:
            raise CorruptEntryError(where, f"entry {entry_id}: short record header")
        length, crc = RECORD_HEADER.unpack_from(buf, rel)
        rel += RECORD_HEADER_BYTES
        if length == 0 or rel + length > len(buf):
            raise CorruptEntryError(where, f"entry {entry_id}: bad length {length}")
        data = bytes(view[rel : rel + length])
        if crc_of(data) != crc:
            raise CorruptEntryError(where, f"entry {entry_id}: CRC32C mismatch")
        out.append(data)
        rel += length
    if rel != len(buf):
        raise CorruptEntryError(where, f"entries {first_entry_id}..: records do not match the offsets")
    return out
