"""Shared entry logs: many ledgers' entries in one file, and the runs that index them (ME-4).

A flush writes the entries of one write cache half, sorted by (ledger, entry), into the active entry
log: a ledger's entries of that half lie back to back, as one run. Entry logs roll over at
entry_log_bytes_max, so the number of files depends on the bytes stored, never on the number of
topics (BookKeeper's DbLedgerStorage; Pulsar's memory model). A log is never changed once written, except
that recovery cuts off bytes a crashed flush wrote but never committed to the index; the garbage
collector (_gc) copies what is still live out of a sparse log and then deletes it.

File `logs/<log id:010d>.log`, all integers little-endian:

    header (32 bytes)
    offset  size  field
    0       8     magic b"VLMQELG1"
    8       8     u64 log id (the same as in the file name)
    16      8     u64 created, epoch milliseconds
    24      4     reserved, zero
    28      4     u32 CRC32C of bytes 0..27

    record (from offset 32, back to back): the journal's record layout (_journal_file)
    0       4     u32 length n of data (an entry is never empty)
    4       4     u32 CRC32C of data
    8       8     u64 ledger id
    16      8     u64 entry id
    24      4     u32 CRC32C of bytes 0..23 of this record
    28      n     data

Records describe themselves (ledger, entry, two CRCs), so the index can be rebuilt from the logs
(`scan_log`) and every read checks that the bytes it got are the entry it asked for.

A run (`Run`, one row of the index) is a ledger's dense entries first_entry .. first_entry+count-1,
back to back in one log from `offset`; `ends[i]` is the end of record i relative to `offset`.

Everything here blocks; storage threads call it, never the event loop.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from velamq._errors import CorruptEntryError
from velamq.storage import _layout
from velamq.storage._layout import crc_of
from velamq.storage.formats._journal_file import RECORD_FIELDS, RECORD_HEADER_BYTES, scan_records

LOG_MAGIC = b"VLMQELG1"
LOG_HEADER = struct.Struct("<8sQQI")
LOG_HEADER_BYTES = LOG_HEADER.size + 4  # 32
_CRC = struct.Struct("<I")

# How much of a log a scan or a copy reads per system call.
log_chunk_bytes = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Run:
    """Dense entries of one ledger, back to back in one entry log: one row of the entry index."""

    ledger_id: int
    first_entry: int
    count: int
    log_id: int
    offset: int  # where the first record starts in the log
    ends: array[int]  # ends[i]: end of record i, relative to offset ("I": a run is < 4 GiB)

    @property
    def end_entry(self) -> int:
        return self.first_entry + self.count

    @property
    def size_bytes(self) -> int:
        """Record bytes of the run, headers included."""
        return self.ends[-1]

    def covers(self, entry_id: int) -> bool:
        return self.first_entry <= entry_id < self.first_entry + self.count

    def byte_range(self, first: int, last: int) -> tuple[int, int]:
        """File offsets [start, end) of the records of entries first..last (inclusive)."""
        i, j = first - self.first_entry, last - self.first_entry
        return self.offset + (self.ends[i - 1] if i else 0), self.offset + self.ends[j]

    @property
    def memory_bytes(self) -> int:
        """What the run costs in the index cache."""
        return 4 * self.count + 120


def pack_ends(ends: array[int]) -> bytes:
    return ends.tobytes() if ends.itemsize == 4 and _little_endian else struct.pack(f"<{len(ends)}I", *ends)


def unpack_ends(raw: bytes) -> array[int]:
    ends = array("I")
    if ends.itemsize == 4 and _little_endian:
        ends.frombytes(raw)
    else:  # pragma: no cover - big-endian or odd platforms
        ends.extend(struct.unpack(f"<{len(raw) // 4}I", raw))
    return ends


_little_endian = array("I", [1]).tobytes() == b"\x01\x00\x00\x00"


def encode_log_header(log_id: int, created_ms: int) -> bytes:
    body = LOG_HEADER.pack(LOG_MAGIC, log_id, created_ms, 0)
    return body + _CRC.pack(crc_of(body))


def log_header_ok(raw: bytes, log_id: int) -> bool:
    if len(raw) < LOG_HEADER_BYTES:
        return False
    magic, stored_id, _, _ = LOG_HEADER.unpack_from(raw, 0)
    (crc,) = _CRC.unpack_from(raw, LOG_HEADER.size)
    return bool(magic == LOG_MAGIC and stored_id == log_id and crc == crc_of(raw[: LOG_HEADER.size]))


class EntryLogFile:
    """An entry log open for appending (the flusher's active log, or a compaction's output)."""

    __slots__ = ("fd", "log_id", "path", "size_bytes", "unsynced")

    def __init__(self, path: Path, log_id: int, fd: int, size_bytes: int) -> None:
        self.path = path
        self.log_id = log_id
        self.fd = fd
        self.size_bytes = size_bytes
        self.unsynced = False

    @classmethod
    def create(cls, logs_dir: Path, log_id: int, created_ms: int, *, sync: bool) -> EntryLogFile:
        """A new log holding only its header; durable (file and directory) when sync."""
        path = logs_dir / _layout.log_file_name(log_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _layout.write_all(fd, [encode_log_header(log_id, created_ms)])
            if sync:
                _layout.sync_fd(fd)
                _layout.fsync_dir(logs_dir)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)  # a disk full or I/O error: no half-made log is left
            raise
        return cls(path, log_id, fd, LOG_HEADER_BYTES)

    @classmethod
    def reopen(cls, logs_dir: Path, log_id: int, committed_bytes: int) -> EntryLogFile:
        """The active log again after a restart; bytes past what the index committed are cut off
        (a flush that crashed between writing the log and committing its index)."""
        path = logs_dir / _layout.log_file_name(log_id)
        fd = os.open(path, os.O_WRONLY)
        try:
            size = os.fstat(fd).st_size
            if size < committed_bytes:
                raise CorruptEntryError(f"entry log {path}", f"{size} bytes, the index says {committed_bytes}")
            if size > committed_bytes:
                os.ftruncate(fd, committed_bytes)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, log_id, fd, committed_bytes)

    def append(self, buffers: list[bytes | memoryview], nbytes: int) -> int:
        """Write buffers (nbytes in all) at the end; returns the offset they start at."""
        start = self.size_bytes
        os.lseek(self.fd, start, os.SEEK_SET)
        written = _layout.write_all(self.fd, buffers)
        assert written == nbytes, (written, nbytes)
        self.size_bytes += nbytes
        self.unsynced = True
        return start

    def sync(self) -> None:
        if self.unsynced:
            _layout.sync_fd(self.fd)
            self.unsynced = False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def record_header(ledger_id: int, entry_id: int, data: bytes, crc: int) -> bytes:
    fields = RECORD_FIELDS.pack(len(data), crc, ledger_id, entry_id)
    return fields + _CRC.pack(crc_of(fields))


def read_span(path: Path, start: int, end: int) -> bytes:
    """Bytes [start, end) of a log. FileNotFoundError if the log is gone (collected meanwhile)."""
    fd = _layout.open_retrying(path, os.O_RDONLY)
    try:
        return os.pread(fd, end - start, start)
    finally:
        os.close(fd)


def parse_records(
    buf: bytes, where: str, ledger_id: int, first_entry: int, count: int, required: int | None = None
) -> list[bytes]:
    """The data of `count` consecutive records of ledger_id from first_entry on, checked.

    A record that is short, names another entry, or fails a CRC raises CorruptEntryError naming the
    entry; only the first `required` records (all, by default) must be intact: the rest are a
    read-ahead, which ends quietly before a damaged record (the read that asks for it gets the error).
    """
    if required is None:
        required = count
    out: list[bytes] = []
    view = memoryview(buf)
    rel = 0
    unpack = RECORD_FIELDS.unpack_from
    for i in range(count):
        entry_id = first_entry + i
        problem = None
        if len(buf) - rel < RECORD_HEADER_BYTES:
            problem = "short record header"
        else:
            length, data_crc, got_ledger, got_entry = unpack(buf, rel)
            (header_crc,) = _CRC.unpack_from(buf, rel + RECORD_FIELDS.size)
            begin = rel + RECORD_HEADER_BYTES
            if header_crc != crc_of(view[rel : rel + RECORD_FIELDS.size]):
                problem = "record header CRC32C mismatch"
            elif (got_ledger, got_entry) != (ledger_id, entry_id):
                problem = f"the record is ledger {got_ledger} entry {got_entry}"
            elif length == 0 or begin + length > len(buf):
                problem = f"bad length {length}"
            else:
                data = bytes(view[begin : begin + length])
                if crc_of(data) != data_crc:
                    problem = "CRC32C mismatch"
        if problem is not None:
            if i < required:
                raise CorruptEntryError(where, f"entry {entry_id}: {problem}")
            return out
        out.append(data)
        rel = begin + length
    return out


@dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int  # where the record starts
    ledger_id: int
    entry_id: int
    size_bytes: int  # header and data


def scan_log(path: Path, log_id: int) -> Iterator[LogRecord]:
    """Every intact record of a log, front to back, stopping at the first that is not (the index
    rebuild and the checker use it). Raises CorruptEntryError if the header does not verify."""
    with open(path, "rb", buffering=0) as f:
        if not log_header_ok(f.read(LOG_HEADER_BYTES), log_id):
            raise CorruptEntryError(f"entry log {path}", "its header does not name it")
        for pos, ledger_id, entry_id, _, data in scan_records(f, LOG_HEADER_BYTES, log_chunk_bytes):
            yield LogRecord(pos, ledger_id, entry_id, RECORD_HEADER_BYTES + len(data))
