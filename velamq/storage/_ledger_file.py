"""One ledger's file and its offset index: byte layouts, recovery scan, reads and writes.

Ledger file `<ledger id:020d>.log`: a header, then records back to back. Entry i of the ledger is
record i. All integers little-endian. The file is created (header only, fsynced) by the journal
thread before the ledger's first entry is journaled; records are added by the flusher, a write
cache half at a time, so a ledger's entries lie together in its own file (ME-4).

    header (32 bytes)
    offset  size  field
    0       8     magic b"VLMQLOG2" (format version 2)
    8       8     u64 ledger id
    16      8     u64 created, epoch milliseconds
    24      4     reserved, zero
    28      4     u32 CRC32C of bytes 0..27

    record (from offset 32)
    0       4     u32 length n of data, in bytes (an entry is never empty)
    4       4     u32 CRC32C (Castagnoli) of data
    8       n     data: the entry, opaque bytes

A crash during a flush can leave a torn tail: a short header, a length running past the end of
the file, a CRC that does not verify, or zeros where the file system extended the file but never
wrote the data. The journal still holds those entries (the checkpoint moves only after the flush),
so recovery cuts the tail off and replays them. Empty entries are refused by append because a
zero-filled tail would otherwise read as a run of valid empty records (CRC32C of b"" is 0).

Index file `<ledger id:020d>.idx`, written once when the ledger is sealed (rolled over) and all its
entries are in the file, so that reopening an old ledger needs neither a scan nor its data:

    offset  size  field
    0       8     magic b"VLMQIDX2" (format version 2)
    8       8     u64 ledger id
    16      8     u64 entry count N
    24      8     u64 ledger file length in bytes at seal (header included)
    32      8     u64 created, epoch milliseconds
    40      8     u64 closed (sealed), epoch milliseconds
    48      8N    u64 offset of record i in the ledger file, i = 0 .. N-1
    48+8N   4     u32 CRC32C of all preceding bytes of this file

Everything here blocks; the storage threads call it, never the event loop.
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c

from velamq._errors import CorruptEntryError

log = logging.getLogger("velamq.storage")

LEDGER_MAGIC = b"VLMQLOG2"
LEDGER_HEADER = struct.Struct("<8sQQI")
LEDGER_HEADER_BYTES = LEDGER_HEADER.size + 4  # 32
RECORD_HEADER = struct.Struct("<II")
RECORD_HEADER_BYTES = RECORD_HEADER.size
INDEX_MAGIC = b"VLMQIDX2"
INDEX_HEADER = struct.Struct("<8sQQQQQ")
INDEX_HEADER_BYTES = INDEX_HEADER.size
INDEX_TRAILER = struct.Struct("<I")

# A record longer than this is taken for garbage by the recovery scan (a torn length field).
record_data_bytes_max = 1 << 30
# How much of a ledger file the recovery scan reads per system call.
scan_chunk_bytes = 4 * 1024 * 1024

# writev takes at most IOV_MAX buffers per call (1024 on Linux).
iov_max = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def crc_of(data: bytes | memoryview) -> int:
    return int(crc32c.crc32c(data))


def record_header(data: bytes, crc: int | None = None) -> bytes:
    return RECORD_HEADER.pack(len(data), crc_of(data) if crc is None else crc)


def new_offsets() -> array[int]:
    """An array of u64 offsets; typecode 'q' so it also holds the file's length as an int."""
    return array("q")


def encode_ledger_header(ledger_id: int, created_ms: int) -> bytes:
    body = LEDGER_HEADER.pack(LEDGER_MAGIC, ledger_id, created_ms, 0)
    return body + struct.pack("<I", crc_of(body))


def parse_ledger_header(raw: bytes, ledger_id: int) -> int | None:
    """created_ms from a ledger file's first bytes, or None if they are not its valid header."""
    if len(raw) < LEDGER_HEADER_BYTES:
        return None
    magic, stored_id, created_ms, _ = LEDGER_HEADER.unpack_from(raw, 0)
    (crc,) = struct.unpack_from("<I", raw, LEDGER_HEADER.size)
    if magic != LEDGER_MAGIC or stored_id != ledger_id or crc != crc_of(raw[: LEDGER_HEADER.size]):
        return None
    return int(created_ms)


def create_ledger_file(path: Path, ledger_id: int, created_ms: int, *, sync: bool) -> None:
    """Create a new ledger file holding only its header (the caller fsyncs the directory)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, [encode_ledger_header(ledger_id, created_ms)])
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


@dataclass(slots=True)
class ScanResult:
    """What a recovery scan found in a ledger file."""

    offsets: array[int]  # start of each intact record
    valid_bytes: int  # end of the last intact record; the file is truncated here
    file_bytes: int  # length of the file before any truncation
    created_ms: int | None  # from the header; None if the header is missing or damaged


def scan(path: Path, ledger_id: int) -> ScanResult:
    """Read a ledger file front to back and stop at the first record that is not intact."""
    offsets = new_offsets()
    with open(path, "rb", buffering=0) as f:
        file_bytes = os.fstat(f.fileno()).st_size
        created_ms = parse_ledger_header(f.read(LEDGER_HEADER_BYTES), ledger_id)
        if created_ms is None:
            return ScanResult(offsets, 0, file_bytes, None)
        buf = b""
        buf_start = pos = LEDGER_HEADER_BYTES  # file offsets of buf[0] and of the next record
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
            if crc_of(memoryview(buf)[rel + RECORD_HEADER_BYTES : rel + RECORD_HEADER_BYTES + length]) != crc:
                break
            offsets.append(pos)
            pos += RECORD_HEADER_BYTES + length
    return ScanResult(offsets, pos, file_bytes, created_ms)


def recover(path: Path, ledger_id: int, created_ms_if_lost: int, *, sync: bool) -> ScanResult:
    """Scan a ledger file that was not sealed and cut off a torn or corrupt tail, durably.

    A file whose header is damaged (its creation was cut short) gets a new header and no records.
    """
    result = scan(path, ledger_id)
    if result.created_ms is None:
        log.warning(
            "ledger file %s: header missing or damaged, rewriting it (%d bytes dropped)", path, result.file_bytes
        )
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, encode_ledger_header(ledger_id, created_ms_if_lost), 0)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        result.created_ms = created_ms_if_lost
        result.valid_bytes = LEDGER_HEADER_BYTES
    elif result.valid_bytes < result.file_bytes:
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


def encode_index(
    ledger_id: int, offsets: Sequence[int], file_bytes: int, created_ms: int, closed_ms: int
) -> bytes:
    body = INDEX_HEADER.pack(INDEX_MAGIC, ledger_id, len(offsets), file_bytes, created_ms, closed_ms)
    body += struct.pack(f"<{len(offsets)}Q", *offsets)
    return body + INDEX_TRAILER.pack(crc_of(body))


@dataclass(frozen=True, slots=True)
class LedgerIndex:
    """A sealed ledger's offsets, as read from its index file."""

    ledger_id: int
    entries: int
    file_bytes: int
    created_ms: int
    closed_ms: int
    raw: bytes  # the index file; offsets are unpacked on demand, two per read

    def offset(self, entry_id: int) -> int:
        """Start of record entry_id, or the file length for entry_id == entries."""
        if entry_id >= self.entries:
            return self.file_bytes
        return int(struct.unpack_from("<Q", self.raw, INDEX_HEADER_BYTES + 8 * entry_id)[0])

    @property
    def size_bytes(self) -> int:
        return len(self.raw)


def decode_index(raw: bytes, ledger_id: int) -> LedgerIndex | None:
    if len(raw) < INDEX_HEADER_BYTES + INDEX_TRAILER.size:
        return None
    magic, stored_id, entries, file_bytes, created_ms, closed_ms = INDEX_HEADER.unpack_from(raw, 0)
    expected_len = INDEX_HEADER_BYTES + 8 * entries + INDEX_TRAILER.size
    if magic != INDEX_MAGIC or stored_id != ledger_id or len(raw) != expected_len:
        return None
    (crc,) = INDEX_TRAILER.unpack_from(raw, expected_len - INDEX_TRAILER.size)
    if crc_of(memoryview(raw)[: expected_len - INDEX_TRAILER.size]) != crc:
        return None
    return LedgerIndex(ledger_id, entries, file_bytes, created_ms, closed_ms, raw)


def read_index(path: Path, ledger_id: int) -> LedgerIndex | None:
    """The index at path, or None if it is missing or does not verify (the caller rescans)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode_index(raw, ledger_id)


def read_records(
    path: Path, where: str, first_entry_id: int, start: int, end: int, count: int, required: int | None = None
) -> list[bytes]:
    """Read `count` consecutive records occupying bytes [start, end) of a ledger file.

    Every record is checked: a length that does not fit or a CRC that does not verify raises
    CorruptEntryError naming the entry, so damage in the middle of a ledger is never skipped.
    Only the first `required` records (all, by default) must be intact: the rest are a read-ahead,
    which ends quietly before a damaged record (the read that asks for it gets the error).
    """
    if required is None:
        required = count
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
        problem = None
        if len(buf) - rel < RECORD_HEADER_BYTES:
            problem = "short record header"
        else:
            length, crc = RECORD_HEADER.unpack_from(buf, rel)
            if length == 0 or rel + RECORD_HEADER_BYTES + length > len(buf):
                problem = f"bad length {length}"
            else:
                data = bytes(view[rel + RECORD_HEADER_BYTES : rel + RECORD_HEADER_BYTES + length])
                if crc_of(data) != crc:
                    problem = "CRC32C mismatch"
        if problem is not None:
            if i < required:
                raise CorruptEntryError(where, f"entry {entry_id}: {problem}")
            return out
        out.append(data)
        rel += RECORD_HEADER_BYTES + length
    if rel != len(buf):
        raise CorruptEntryError(where, f"entries {first_entry_id}..: records do not match the offsets")
    return out


def write_all(fd: int, buffers: Sequence[bytes | memoryview]) -> int:
    """writev every buffer, in chunks of IOV_MAX, resuming after short writes. Returns the bytes."""
    total_written = 0
    for i in range(0, len(buffers), iov_max):
        chunk = buffers[i : i + iov_max]
        total = sum(len(b) for b in chunk)
        written = os.writev(fd, chunk)
        if written < total:
            # Rare (disk full, signals): finish the rest with plain writes.
            rest = memoryview(b"".join(chunk))[written:]
            while rest:
                rest = rest[os.write(fd, rest) :]
        total_written += total
    return total_written
