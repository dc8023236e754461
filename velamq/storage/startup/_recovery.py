"""Recovery at start: entry logs back to what the index committed, then journal replay (ME-6).

Runs once, in a storage thread, before the journal, flusher and collector threads start. Nothing in
it is per topic: its work depends on the number of entry logs and on the journal's length.

    1. entry logs against the `logs` table: a log file without a row is removed (a flush that
       created it, or a compaction that wrote it, crashed before committing); a log longer than its
       committed length is cut back to it (a flush crashed between writing and committing); temp
       files are removed
    2. read the checkpoint from the database; delete segments wholly before it (a trim cut short)
    3. replay the records from the checkpoint on, in journal order, into write cache halves that go
       through the flusher's own code (_log_writer): metadata operations are applied again (they
       are idempotent), an entry is written unless the index has it already (its ledger's `entries`
       says so; a group split across two halves may have been flushed in part) or its ledger is
       gone (deleted after the append: the record is skipped)
    4. the last half commits a checkpoint at the start of a fresh segment; older segments go
       (each replayed half already removes the segments its checkpoint passed, so replay needs
       little more space than one segment and one half)

A start on a full disk: if nothing is left to replay (a clean shutdown), the checkpoint is all
step 4 would write; when even that fails, the old segments stay (they replay to nothing) and
storage starts. Replaying entries needs space: Storage releases its ballast (_ballast) and
recovers again when this fails for lack of it.

Damage in the journal: a record that does not verify ends its segment. In the newest segment that
is a torn tail (the crash hit a group commit in flight, none of whose appends was acknowledged
under "fsync"): it is truncated and logged. In an older segment it is corruption: logged as an
error, and replay continues with the next segment. A ledger whose next record is then missing (the
record after the gap would leave a hole in its dense entry ids) keeps what it had and its later
records are dropped, with an error naming the ledger: a hole is never created.

A crash during recovery is safe: each replayed half moves the checkpoint only with its own index
rows, and the next start goes on from there.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from velamq._errors import StorageError
from velamq.storage import _layout
from velamq.storage.formats import _meta_ops as ops
from velamq.storage.formats._journal_file import (
    RECORD_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
    JournalLocation,
    JournalRecord,
    SegmentReader,
    list_segments,
    segment_name,
)
from velamq.storage.index._storage_db import StorageDb
from velamq.storage.write._log_writer import LogWriter
from velamq.storage.write._write_cache import WriteBuffer

log = logging.getLogger("velamq.storage")

# Bytes replay gathers in one half before it flushes it.
replay_pending_bytes_max = 16 * 1024 * 1024


@dataclass(slots=True)
class JournalRecovery:
    """What recovery found and did."""

    next_seq: int  # the segment the journal starts with
    log_id_next: int  # the next entry log id
    records_replayed: int = 0  # entries written to the entry logs
    records_present: int = 0  # already indexed
    records_orphaned: int = 0  # their ledger is gone
    records_dropped: int = 0  # after a hole: not written (logged as errors)
    metadata_replayed: int = 0  # metadata operations applied again
    torn_tails: int = 0  # journal segments whose torn tail was truncated
    corrupt_segments: int = 0
    logs_removed: int = 0  # entry log files nothing committed
    log_bytes_truncated: int = 0  # uncommitted bytes cut off the end of entry logs


def check_logs(logs_dir: Path, db: StorageDb) -> tuple[int, int, int]:
    """Step 1: (logs removed, bytes truncated, next log id)."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    rows = {row.log_id: row for row in db.logs()}
    removed = truncated = 0
    highest = max(rows, default=0)
    for name in sorted(os.listdir(logs_dir)):
        path = logs_dir / name
        log_id = _layout.parse_log_id(name)
        if name.endswith(_layout.TMP_SUFFIX):
            path.unlink()
            continue
        if log_id is None:
            continue  # not ours; the checker reports it
        highest = max(highest, log_id)
        row = rows.get(log_id)
        if row is None:
            log.warning("entry log %s: no index row (a flush or compaction cut short); removed", path)
            path.unlink()
            removed += 1
            continue
        size = path.stat().st_size
        if size > row.total_bytes:
            log.warning("entry log %s: %d uncommitted bytes at its end, cut off", path, size - row.total_bytes)
            with open(path, "r+b") as f:
                f.truncate(row.total_bytes)
                os.fsync(f.fileno())
            truncated += size - row.total_bytes
        elif size < row.total_bytes:
            log.error("entry log %s is %d bytes, the index says %d: damaged", path, size, row.total_bytes)
    for log_id in rows:
        if not (logs_dir / _layout.log_file_name(log_id)).exists():
            log.error("entry log %d is in the index but its file is missing", log_id)
    if removed:
        _layout.fsync_dir(logs_dir)
    return removed, truncated, highest + 1


def recover_journal(journal_dir: Path, writer: LogWriter) -> JournalRecovery:
    """Steps 2 to 4 (step 1 has run: the writer's database and logs agree)."""
    db = writer.db
    journal_dir.mkdir(parents=True, exist_ok=True)
    segments = list_segments(journal_dir)
    meta = db.meta()
    if "checkpoint_seq" in meta:
        checkpoint = JournalLocation(meta["checkpoint_seq"], meta["checkpoint_offset"])
    else:
        checkpoint = JournalLocation(segments[0] if segments else 1, SEGMENT_HEADER_BYTES)
    for seq in [s for s in segments if s < checkpoint.seq]:
        (journal_dir / segment_name(seq)).unlink()
    segments = [s for s in segments if s >= checkpoint.seq]
    found = JournalRecovery(max([checkpoint.seq, *segments]) + 1, 0)
    replay = _Replay(db, found)
    buffer = WriteBuffer(1)
    for record in _records(journal_dir, segments, checkpoint, found):
        replay.add(record, buffer)
        if buffer.size_bytes >= replay_pending_bytes_max:
            end = JournalLocation(record.location.seq, record.location.offset + RECORD_HEADER_BYTES + len(record.data))
            writer.flush(buffer, end)
            buffer = WriteBuffer(buffer.generation + 1)
            _remove_segments_before(journal_dir, end.seq)
    fresh = JournalLocation(found.next_seq, SEGMENT_HEADER_BYTES)
    try:
        writer.flush(buffer, fresh)
    except (OSError, StorageError, sqlite3.Error) as exc:
        if not buffer.empty:
            raise
        log.warning("journal recovery: cannot move the checkpoint (%s); the old segments stay, replaying nothing", exc)
        return found
    _remove_segments_before(journal_dir, fresh.seq)
    if found.records_replayed or found.metadata_replayed or found.torn_tails or found.corrupt_segments:
        log.info(
            "journal recovery: %d entries and %d metadata operations replayed, %d entries already indexed, "
            "%d of deleted ledgers, %d dropped, %d torn tails truncated, %d corrupt segments",
            found.records_replayed,
            found.metadata_replayed,
            found.records_present,
            found.records_orphaned,
            found.records_dropped,
            found.torn_tails,
            found.corrupt_segments,
        )
    return found


def _remove_segments_before(journal_dir: Path, seq: int) -> None:
    """Delete the segments a committed checkpoint has passed (space back as replay goes on)."""
    removed = False
    for old in list_segments(journal_dir):
        if old < seq:
            (journal_dir / segment_name(old)).unlink()
            removed = True
    if removed:
        _layout.fsync_dir(journal_dir)


class _Replay:
    """Decides, record by record, what goes into the replay halves."""

    def __init__(self, db: StorageDb, found: JournalRecovery) -> None:
        self._db = db
        self._found = found
        self._next: dict[int, int | None] = {}  # ledger id -> next entry id to write (None: gone)
        self._broken: set[int] = set()

    def _expected(self, ledger_id: int) -> int | None:
        if ledger_id not in self._next:
            self._next[ledger_id] = self._db.ledger_entries(ledger_id)
        return self._next[ledger_id]

    def add(self, record: JournalRecord, buffer: WriteBuffer) -> None:
        found = self._found
        op = ops.from_record(record.ledger_id, record.entry_id, record.data)
        if op is not None:
            found.metadata_replayed += 1
            if op.kind == ops.LEDGER_CREATE and self._expected(op.subject) is None:
                self._next[op.subject] = 0
            for ledger_id in ops.deleted_ledgers([op]):
                self._next[ledger_id] = None
                segment = buffer.segments.pop(ledger_id, None)
                if segment is not None:  # replayed for nothing: deleted later on
                    found.records_replayed -= len(segment.datas)
                    found.records_orphaned += len(segment.datas)
            buffer.add_metadata(op)
            return
        ledger_id, entry_id = record.ledger_id, record.entry_id
        expected = self._expected(ledger_id)
        if expected is None:
            found.records_orphaned += 1
        elif entry_id < expected:
            found.records_present += 1
        elif ledger_id in self._broken or entry_id > expected:
            if ledger_id not in self._broken:
                log.error(
                    "journal replay: ledger %d entry %d is journaled but the ledger has %d entries; "
                    "it and the ledger's later records are dropped",
                    ledger_id,
                    entry_id,
                    expected,
                )
                self._broken.add(ledger_id)
            found.records_dropped += 1
        else:
            buffer.add(ledger_id, entry_id, record.data, record.data_crc)
            self._next[ledger_id] = expected + 1
            found.records_replayed += 1


def _records(
    journal_dir: Path, segments: list[int], checkpoint: JournalLocation, found: JournalRecovery
) -> Iterator[JournalRecord]:
    for i, seq in enumerate(segments):
        path = journal_dir / segment_name(seq)
        reader = SegmentReader(path, seq, checkpoint.offset if seq == checkpoint.seq else SEGMENT_HEADER_BYTES)
        yield from reader.records()
        if not (reader.torn or not reader.header_ok):
            continue
        if i == len(segments) - 1:
            log.warning(
                "journal segment %s: torn or corrupt tail, truncating %d bytes at offset %d",
                path,
                reader.file_bytes - reader.valid_end,
                reader.valid_end,
            )
            with open(path, "r+b") as f:
                f.truncate(reader.valid_end)
            found.torn_tails += 1
        else:
            log.error(
                "journal segment %s: corrupt record at offset %d; the %d bytes after it cannot be replayed",
                path,
                reader.valid_end,
                reader.file_bytes - reader.valid_end,
            )
            found.corrupt_segments += 1
