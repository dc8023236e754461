"""The journal's byte layout: segment files, records and the checkpoint (ME-6).

One journal (write-ahead log) serves every topic of a Storage. It lives in `<data_dir>/journal/`:

    <seq:020d>.wal     segments, numbered from 1; appends go to the newest one; a segment rolls
                       over at journal_segment_bytes, so trimming deletes whole files

Where replay starts (the checkpoint: everything journaled before it is in the entry logs and the
storage database) is kept in the storage database, committed in the same transaction as the index
rows of the flush that moved it (_storage_db). Storage format 1 kept it in `journal/checkpoint`
(layout below); only the migration reads that file now.

All integers little-endian.

    segment header (24 bytes)
    offset  size  field
    0       8     magic b"VLMQWAL1"
    8       8     u64 segment sequence number (the same as in the file name)
    16      4     reserved, zero
    20      4     u32 CRC32C of bytes 0..19

    record (from offset 24, back to back; entry logs use the same record layout, _entry_log)
    0       4     u32 length n of data (never empty)
    4       4     u32 CRC32C of data
    8       8     u64 ledger id (for a metadata record: its subject, see _meta_ops)
    16      8     u64 entry id (>= META_ENTRY_BASE: a metadata record, the kind in the low byte)
    24      4     u32 CRC32C of bytes 0..23 of this record
    28      n     data

    checkpoint file of format 1 (28 bytes)
    0       8     magic b"VLMQCKP1"
    8       8     u64 segment sequence number
    16      8     u64 offset in that segment
    24      4     u32 CRC32C of bytes 0..23

A record is intact when both CRCs verify. The header CRC keeps a torn or garbled length from
sending the scan off into the data; zeros (a file extended but never written) fail it too, since
the CRC32C of 24 zero bytes is not zero. Replay reads records from the checkpoint forward and stops
in a segment at the first record that is not intact (see _recovery).

Everything here blocks; the journal thread and recovery call it, never the event loop.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from velamq.storage._layout import crc_of

JOURNAL_DIR = "journal"
SEGMENT_SUFFIX = ".wal"
CHECKPOINT_FILE = "checkpoint"

SEGMENT_MAGIC = b"VLMQWAL1"
SEGMENT_HEADER = struct.Struct("<8sQI")
SEGMENT_HEADER_BYTES = SEGMENT_HEADER.size + 4  # 24
RECORD_FIELDS = struct.Struct("<IIQQ")
RECORD_HEADER_BYTES = RECORD_FIELDS.size + 4  # 28
CHECKPOINT_MAGIC = b"VLMQCKP1"
CHECKPOINT = struct.Struct("<8sQQ")
CHECKPOINT_BYTES = CHECKPOINT.size + 4  # 28
_CRC = RECORD_CRC = struct.Struct("<I")  # after a record's fields: the CRC32C of the fields

# Entry ids from here up mark metadata records (ledger created, sealed, deleted, cursor written...):
# the kind is entry_id - META_ENTRY_BASE. Real entry ids never come near (2^64 - 256).
META_ENTRY_BASE = (1 << 64) - 256
# A record longer than this is taken for garbage (a torn length field).
record_data_bytes_max = 1 << 30
# How much of a segment the replay reads per system call.
replay_chunk_bytes = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True, order=True)
class JournalLocation:
    """A place in the journal: a segment and a byte offset in it."""

    seq: int
    offset: int

    def __str__(self) -> str:
        return f"{self.seq}:{self.offset}"


def segment_name(seq: int) -> str:
    return f"{seq:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    stem = name[: -len(SEGMENT_SUFFIX)] if name.endswith(SEGMENT_SUFFIX) else ""
    return int(stem) if stem.isdigit() else None


def list_segments(journal_dir: Path) -> list[int]:
    try:
        names = os.listdir(journal_dir)
    except FileNotFoundError:
        return []
    return sorted(seq for n in names if (seq := parse_segment_name(n)) is not None)


def encode_segment_header(seq: int) -> bytes:
    body = SEGMENT_HEADER.pack(SEGMENT_MAGIC, seq, 0)
    return body + _CRC.pack(crc_of(body))


def segment_header_ok(raw: bytes, seq: int) -> bool:
    if len(raw) < SEGMENT_HEADER_BYTES:
        return False
    magic, stored_seq, _ = SEGMENT_HEADER.unpack_from(raw, 0)
    (crc,) = _CRC.unpack_from(raw, SEGMENT_HEADER.size)
    return bool(magic == SEGMENT_MAGIC and stored_seq == seq and crc == crc_of(raw[: SEGMENT_HEADER.size]))


def record_header(data_len: int, data_crc: int, ledger_id: int, entry_id: int) -> bytes:
    fields = RECORD_FIELDS.pack(data_len, data_crc, ledger_id, entry_id)
    return fields + _CRC.pack(crc_of(fields))


def encode_checkpoint(location: JournalLocation) -> bytes:
    body = CHECKPOINT.pack(CHECKPOINT_MAGIC, location.seq, location.offset)
    return body + _CRC.pack(crc_of(body))


def decode_checkpoint(raw: bytes) -> JournalLocation | None:
    if len(raw) != CHECKPOINT_BYTES:
        return None
    magic, seq, offset = CHECKPOINT.unpack_from(raw, 0)
    (crc,) = _CRC.unpack_from(raw, CHECKPOINT.size)
    if magic != CHECKPOINT_MAGIC or crc != crc_of(raw[: CHECKPOINT.size]):
        return None
    return JournalLocation(seq, offset)


@dataclass(frozen=True, slots=True)
class JournalRecord:
    ledger_id: int
    entry_id: int
    data: bytes
    data_crc: int
    location: JournalLocation  # where the record starts


class SegmentReader:
    """Reads the intact records of one segment from an offset on.

    After `records()` is exhausted, `valid_end` is the offset just past the last intact record,
    `file_bytes` the segment's length and `header_ok` whether its header verified (if not, no
    record is read and valid_end is 0).
    """

    def __init__(self, path: Path, seq: int, start: int) -> None:
        self.path = path
        self.seq = seq
        self.start = max(start, SEGMENT_HEADER_BYTES)
        self.valid_end = 0
        self.file_bytes = 0
        self.header_ok = False

    @property
    def torn(self) -> bool:
        """Whether bytes follow the last intact record (a torn or corrupt tail)."""
        return self.valid_end < self.file_bytes

    def records(self) -> Iterator[JournalRecord]:
        with open(self.path, "rb", buffering=0) as f:
            self.file_bytes = os.fstat(f.fileno()).st_size
            self.header_ok = segment_header_ok(f.read(SEGMENT_HEADER_BYTES), self.seq)
            if not self.header_ok:
                return
            self.valid_end = self.start
            f.seek(self.start)
            for pos, ledger_id, entry_id, data_crc, data in scan_records(f, self.start, replay_chunk_bytes):
                yield JournalRecord(ledger_id, entry_id, bytes(data), data_crc, JournalLocation(self.seq, pos))
                self.valid_end = pos + RECORD_HEADER_BYTES + len(data)


def scan_records(f: BinaryIO, pos: int, chunk_bytes: int) -> Iterator[tuple[int, int, int, int, memoryview]]:
    """The intact records of a journal segment or an entry log (the same record format), read from
    `f` (positioned at `pos`) a chunk at a time: (position, ledger id, entry id, data CRC, data).
    Stops at the first record whose header or data does not verify, or at the end of the file."""
    buf = b""
    buf_start = pos
    eof = False
    while True:
        rel = pos - buf_start
        need = RECORD_HEADER_BYTES
        length = -1
        if len(buf) - rel >= RECORD_HEADER_BYTES:
            length, data_crc, ledger_id, entry_id = RECORD_FIELDS.unpack_from(buf, rel)
            (header_crc,) = _CRC.unpack_from(buf, rel + RECORD_FIELDS.size)
            if header_crc != crc_of(memoryview(buf)[rel : rel + RECORD_FIELDS.size]):
                return
            if length == 0 or length > record_data_bytes_max:
                return
            need += length
        if len(buf) - rel < need:
            if eof:
                return
            chunk = f.read(max(chunk_bytes, need))
            buf = buf[rel:] + chunk
            buf_start = pos
            eof = not chunk
            continue
        begin = rel + RECORD_HEADER_BYTES
        data = memoryview(buf)[begin : begin + length]
        if crc_of(data) != data_crc:
            return
        yield pos, ledger_id, entry_id, data_crc, data
        pos += RECORD_HEADER_BYTES + length
