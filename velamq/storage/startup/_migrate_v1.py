"""Storage format 1 (a directory per topic, a file per ledger) is migrated at start.

Format 1, as velamq wrote it before the shared entry logs:

    <data_dir>/ledger_id_next            next ledger id, ASCII decimal
    <data_dir>/journal/checkpoint        28 bytes: b"VLMQCKP1", u64 segment, u64 offset, u32 CRC32C
    <data_dir>/journal/<seq:020d>.wal    journal segments: the same layout as format 2's
    <data_dir>/ledgers/<encoded topic>/
        name                             the topic name, UTF-8
        <ledger id:020d>.log             b"VLMQLOG2", u64 ledger id, u64 created ms, u32 0, u32 CRC32C;
                                         then records: u32 length n, u32 CRC32C of data, n bytes data
        <ledger id:020d>.idx             written at seal: b"VLMQIDX2", u64 id, u64 entries N,
                                         u64 file bytes, u64 created ms, u64 closed ms, N x u64
                                         offsets, u32 CRC32C of everything before
        cursors/<encoded cursor>.json    the cursor's JSON (the same as format 2 keeps)

The migration reads all of it the way format 1's own recovery did (a ledger file's records up to
the first that does not verify; then the journal records after the checkpoint that continue a
ledger), and writes it in format 2 with the same ledger ids and entry ids (so message ids clients
hold stay valid): the topics, ledgers and cursors as metadata operations and the entries through
the flusher's own code (_log_writer), a bounded batch at a time.

Crash safety: the new storage.db carries meta "migrating" until the last transaction, which also
moves the checkpoint past the old journal; only then are the old files removed. A start that finds
"migrating" throws away what was written and migrates again from the untouched old files; a start
that finds old files next to a finished database only removes them. So a data directory is never
read half in one format and half in the other.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from velamq._errors import StorageError
from velamq.storage import _layout
from velamq.storage._layout import crc_of
from velamq.storage.formats import _meta_ops as ops
from velamq.storage.formats._journal_file import (
    JOURNAL_DIR,
    SEGMENT_HEADER_BYTES,
    JournalLocation,
    SegmentReader,
    decode_checkpoint,
    list_segments,
    segment_name,
)
from velamq.storage.index._storage_db import StorageDb
from velamq.storage.ledger._cursor import CursorState
from velamq.storage.write._log_writer import LogIds, LogWriter
from velamq.storage.write._write_cache import WriteBuffer

log = logging.getLogger("velamq.storage")

LEDGERS_DIR = "ledgers"
LEDGER_ID_FILE = "ledger_id_next"
CHECKPOINT_FILE = "checkpoint"
_LEDGER_HEADER = struct.Struct("<8sQQI")
_LEDGER_HEADER_BYTES = 32
_RECORD = struct.Struct("<II")
_INDEX_HEADER = struct.Struct("<8sQQQQQ")
_CRC = struct.Struct("<I")
# Entry bytes migrated per flush.
batch_bytes_max = 16 * 1024 * 1024


def format_1_paths(data_dir: Path) -> list[Path]:
    """The format 1 files and directories in data_dir (empty if there are none)."""
    candidates = [data_dir / LEDGERS_DIR, data_dir / LEDGER_ID_FILE, data_dir / JOURNAL_DIR / CHECKPOINT_FILE]
    return [p for p in candidates if p.exists()]


def migrate_if_format_1(data_dir: Path, *, sync: bool, log_bytes_max: int) -> bool:
    """Migrate a format 1 data directory to format 2; False if there was nothing to migrate."""
    old = format_1_paths(data_dir)
    if not old:
        return False
    db_path = data_dir / _layout.DB_FILE
    if db_path.exists():
        db = StorageDb(db_path, sync=sync)
        try:
            finished = "migrating" not in db.meta()
        finally:
            db.close()
        if finished:
            _remove_format_1(data_dir, sync)
            return True
        log.warning("storage: a migration from format 1 was cut short; starting it again")
        for suffix in ("", "-wal", "-shm"):
            db_path.with_name(db_path.name + suffix).unlink(missing_ok=True)
        shutil.rmtree(data_dir / _layout.LOGS_DIR, ignore_errors=True)
    log.warning("storage: %s holds storage format 1 (a file per ledger); migrating it to format 2", data_dir)
    _Migration(data_dir, sync, log_bytes_max).run()
    _remove_format_1(data_dir, sync)
    log.warning("storage: migration of %s to format 2 done", data_dir)
    return True


@dataclass(slots=True)
class _OldLedger:
    ledger_id: int
    path: Path
    created_ms: int
    closed_ms: int | None
    entries: int = 0  # records migrated so far


class _Migration:
    def __init__(self, data_dir: Path, sync: bool, log_bytes_max: int) -> None:
        self.data_dir = data_dir
        self.sync = sync
        logs_dir = data_dir / _layout.LOGS_DIR
        logs_dir.mkdir(parents=True, exist_ok=True)
        self.db = StorageDb(data_dir / _layout.DB_FILE, sync=sync, create=True)
        self.writer = LogWriter(logs_dir, self.db, LogIds(1), sync=sync, log_bytes_max=log_bytes_max, now_ms=_now_ms)
        self.buffer = WriteBuffer(1)
        self.buffer_bytes = 0
        self.ledger_id_max = 0

    def run(self) -> None:
        try:
            with self.db.transaction():
                self.db.set_meta({"migrating": 1})
            journal = self._journal_tail()
            ml_id = 0
            root = self.data_dir / LEDGERS_DIR
            for directory in sorted(root.iterdir()) if root.is_dir() else []:
                if directory.is_dir():
                    ml_id += 1
                    self._topic(ml_id, directory, journal)
            self._flush()
            seq = max([*list_segments(self.data_dir / JOURNAL_DIR), 0]) + 1
            counter = max(self.ledger_id_max + 1, _read_counter(self.data_dir))
            with self.db.transaction():
                self.db.set_meta(
                    {
                        "checkpoint_seq": seq,
                        "checkpoint_offset": SEGMENT_HEADER_BYTES,
                        "ledger_id_next": counter,
                        "ml_id_next": ml_id + 1,
                    }
                )
                self.db.seal_logs()
                self.db.delete_meta("migrating")
        finally:
            self.writer.close()
            self.db.close()

    def _flush(self) -> None:
        self.writer.flush(self.buffer, None)
        self.buffer = WriteBuffer(self.buffer.generation + 1)
        self.buffer_bytes = 0

    def _add(self, ledger: _OldLedger, data: bytes, crc: int) -> None:
        self.buffer.add(ledger.ledger_id, ledger.entries, data, crc)
        ledger.entries += 1
        self.buffer_bytes += len(data)
        if self.buffer_bytes >= batch_bytes_max:
            self._flush()

    def _topic(self, ml_id: int, directory: Path, journal: dict[int, list[tuple[int, bytes, int]]]) -> None:
        name = _topic_name(directory)
        self.buffer.add_metadata(ops.ml_create(ml_id, name))
        ledger_ids = sorted(i for n in os.listdir(directory) if (i := _ledger_id(n, ".log")) is not None)
        for k, ledger_id in enumerate(ledger_ids):
            ledger = self._open_ledger(directory, ledger_id, newest=k == len(ledger_ids) - 1)
            self.ledger_id_max = max(self.ledger_id_max, ledger_id)
            self.buffer.add_metadata(ops.ledger_create(ledger_id, ml_id, ledger.created_ms))
            if ledger.closed_ms is not None:
                self.buffer.add_metadata(ops.ledger_seal(ledger_id, ledger.closed_ms))
            for data, crc in _records(ledger.path, ledger_id):
                self._add(ledger, data, crc)
            for entry_id, data, crc in journal.pop(ledger_id, []):
                if entry_id == ledger.entries:
                    self._add(ledger, data, crc)
                elif entry_id > ledger.entries:
                    log.error("migration: %s ledger %d lacks entry %d; its later entries are dropped",
                              name, ledger_id, ledger.entries)
                    break
        cursors = directory / "cursors"
        for path in sorted(cursors.iterdir()) if cursors.is_dir() else []:
            if path.suffix == ".json":
                raw = path.read_bytes()
                state = CursorState.from_json_bytes(raw, str(path))
                self.buffer.add_metadata(ops.cursor_put(ml_id, state.name, raw))

    def _open_ledger(self, directory: Path, ledger_id: int, *, newest: bool) -> _OldLedger:
        path = directory / f"{ledger_id:020d}.log"
        with open(path, "rb") as f:
            header = f.read(_LEDGER_HEADER_BYTES)
        created_ms = _parse_ledger_header(header, ledger_id)
        if created_ms is None:
            raise StorageError(f"migration: {path} has no valid header; move it aside and start again")
        closed_ms = _index_closed_ms(directory / f"{ledger_id:020d}.idx", ledger_id)
        if closed_ms is None and not newest:
            closed_ms = int(path.stat().st_mtime * 1000)  # format 1 sealed such a ledger the same way
        return _OldLedger(ledger_id, path, created_ms, closed_ms)

    def _journal_tail(self) -> dict[int, list[tuple[int, bytes, int]]]:
        """Format 1's journal records after its checkpoint, by ledger, in journal order."""
        journal_dir = self.data_dir / JOURNAL_DIR
        segments = list_segments(journal_dir)
        checkpoint = None
        path = journal_dir / CHECKPOINT_FILE
        if path.exists():
            checkpoint = decode_checkpoint(path.read_bytes())
        if checkpoint is None:
            checkpoint = JournalLocation(segments[0] if segments else 1, SEGMENT_HEADER_BYTES)
        out: dict[int, list[tuple[int, bytes, int]]] = {}
        for seq in segments:
            if seq < checkpoint.seq:
                continue
            start = checkpoint.offset if seq == checkpoint.seq else SEGMENT_HEADER_BYTES
            for record in SegmentReader(journal_dir / segment_name(seq), seq, start).records():
                out.setdefault(record.ledger_id, []).append((record.entry_id, record.data, record.data_crc))
        return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _topic_name(directory: Path) -> str:
    try:
        return (directory / "name").read_text("utf-8")
    except FileNotFoundError:
        if directory.name.startswith("~"):
            raise StorageError(f"migration: {directory} has no name file; move it aside and start again") from None
        return unquote(directory.name)


def _ledger_id(file_name: str, suffix: str) -> int | None:
    stem = file_name[: -len(suffix)] if file_name.endswith(suffix) else ""
    return int(stem) if stem.isdigit() else None


def _read_counter(data_dir: Path) -> int:
    try:
        text = (data_dir / LEDGER_ID_FILE).read_text("ascii").strip()
    except FileNotFoundError:
        return 1
    return int(text) if text.isdigit() else 1


def _parse_ledger_header(raw: bytes, ledger_id: int) -> int | None:
    if len(raw) < _LEDGER_HEADER_BYTES:
        return None
    magic, stored_id, created_ms, _ = _LEDGER_HEADER.unpack_from(raw, 0)
    (crc,) = _CRC.unpack_from(raw, _LEDGER_HEADER.size)
    if magic != b"VLMQLOG2" or stored_id != ledger_id or crc != crc_of(raw[: _LEDGER_HEADER.size]):
        return None
    return int(created_ms)


def _index_closed_ms(path: Path, ledger_id: int) -> int | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) < _INDEX_HEADER.size + 4:
        return None
    magic, stored_id, entries, _, _, closed_ms = _INDEX_HEADER.unpack_from(raw, 0)
    expected = _INDEX_HEADER.size + 8 * entries + 4
    if magic != b"VLMQIDX2" or stored_id != ledger_id or len(raw) != expected:
        return None
    if _CRC.unpack_from(raw, expected - 4)[0] != crc_of(raw[: expected - 4]):
        return None
    return int(closed_ms)


def _records(path: Path, ledger_id: int) -> Iterator[tuple[bytes, int]]:
    """A format 1 ledger file's records, up to the first that does not verify, read in chunks."""
    with open(path, "rb") as f:
        f.seek(_LEDGER_HEADER_BYTES)
        buf = b""
        pos = 0
        eof = False
        while True:
            length = _RECORD.unpack_from(buf, pos)[0] if len(buf) - pos >= _RECORD.size else -1
            need = _RECORD.size + max(length, 0)
            if len(buf) - pos < need and not eof:
                chunk = f.read(max(batch_bytes_max, need))
                buf, pos, eof = buf[pos:] + chunk, 0, not chunk
                continue
            if length <= 0 or len(buf) - pos < need:
                break
            crc = _RECORD.unpack_from(buf, pos)[1]
            data = buf[pos + _RECORD.size : pos + need]
            if crc_of(data) != crc:
                break
            yield data, crc
            pos += need
        if pos < len(buf):
            log.warning("migration: %s ends with bytes that are not a whole record (ledger %d); left out",
                        path, ledger_id)


def _remove_format_1(data_dir: Path, sync: bool) -> None:
    journal_dir = data_dir / JOURNAL_DIR
    db = StorageDb(data_dir / _layout.DB_FILE, sync=sync)
    try:
        checkpoint_seq = db.meta().get("checkpoint_seq", 0)
    finally:
        db.close()
    for seq in list_segments(journal_dir):
        if seq < checkpoint_seq:
            (journal_dir / segment_name(seq)).unlink()
    (journal_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
    (data_dir / LEDGER_ID_FILE).unlink(missing_ok=True)
    shutil.rmtree(data_dir / LEDGERS_DIR, ignore_errors=True)
    if sync:
        for directory in (data_dir, journal_dir):
            if directory.is_dir():
                _layout.fsync_dir(directory)
