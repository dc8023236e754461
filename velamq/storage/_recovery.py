"""Recovery at start: replay the journal from the last checkpoint into the ledger files (ME-6).

Runs once, in a storage thread, before the journal and flusher threads start:

    1. read the checkpoint; delete segments wholly before it (a trim that was cut short)
    2. pass 1 over the records from the checkpoint on: which ledgers do they belong to?
    3. scan the ledger directories (this also yields every topic and the highest ledger id), and
       find those ledgers' files
    4. pass 2: for each record, in journal order, append it to its ledger's file unless the file
       has it already. The first time a ledger is touched its file is scanned, and a torn tail
       (a flush cut short by the crash) is truncated, so the file holds a prefix of the ledger and
       the journal supplies the rest. A record of a ledger whose file is gone (deleted or trimmed
       after the append) is skipped.
    5. fsync the ledger files written, write a checkpoint at the start of a fresh segment, delete
       every older segment.

Damage in the journal: a record that does not verify ends its segment. In the newest segment that
is a torn tail (the crash hit a group commit in flight, none of whose appends was acknowledged
under "fsync"): it is truncated and logged. In an older segment it is corruption: logged as an
error, and replay continues with the next segment. A ledger whose next record is then missing
(the record after the gap would leave a hole in its dense entry ids) keeps what it had and its
later records are dropped, with an error naming the ledger: a hole is never created.

A crash during recovery is safe: until step 5's checkpoint is written, the next start replays
the same records again, and records already in a file are recognized by entry id and skipped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from velamq.storage import _layout
from velamq.storage._journal_file import (
    CHECKPOINT_FILE,
    SEGMENT_HEADER_BYTES,
    JournalLocation,
    JournalRecord,
    SegmentReader,
    decode_checkpoint,
    encode_checkpoint,
    list_segments,
    segment_name,
)
from velamq.storage._ledger_file import (
    RECORD_HEADER,
    read_index,
    recover,
    write_all,
)

log = logging.getLogger("velamq.storage")

# Records replay holds before writing them to their ledger files.
replay_pending_bytes_max = 8 * 1024 * 1024


@dataclass(slots=True)
class JournalRecovery:
    """What recovery found; the directory scan rides along so the Storage scans only once."""

    next_seq: int  # the segment the journal starts with
    dirs: dict[str, Path]  # every managed ledger directory, by topic name
    ledger_id_max: int
    records_replayed: int = 0  # written to ledger files
    records_present: int = 0  # already in their ledger files
    records_orphaned: int = 0  # their ledger is gone
    records_dropped: int = 0  # after a hole, or after a seal: not written (logged as errors)
    torn_tails: int = 0  # ledger files and journal segments whose torn tail was truncated
    corrupt_segments: int = 0


@dataclass(eq=False, slots=True)
class _Target:
    path: Path
    entries: int  # entries in the file so far (or in the sealed ledger)
    sealed: bool
    fd: int = -1
    pending: list[bytes] = field(default_factory=list)
    pending_bytes: int = 0
    broken: bool = False


def recover_journal(data_dir: Path, journal_dir: Path, *, sync: bool, now_ms: int) -> JournalRecovery:
    journal_dir.mkdir(parents=True, exist_ok=True)
    segments = list_segments(journal_dir)
    checkpoint = _read_checkpoint(journal_dir)
    if checkpoint is None:
        checkpoint = JournalLocation(segments[0] if segments else 1, SEGMENT_HEADER_BYTES)
    for seq in [s for s in segments if s < checkpoint.seq]:
        (journal_dir / segment_name(seq)).unlink()
    segments = [s for s in segments if s >= checkpoint.seq]

    wanted: set[int] = set()
    for record in _records(journal_dir, segments, checkpoint, repair=False, found=None):
        wanted.add(record.ledger_id)
    dirs, ledger_id_max, paths = _layout.scan_ledger_dirs(data_dir, frozenset(wanted))
    found = JournalRecovery(max([checkpoint.seq, *segments]) + 1, dirs, ledger_id_max)

    targets: dict[int, _Target | None] = {}
    pending_bytes = 0
    try:
        for record in _records(journal_dir, segments, checkpoint, repair=True, found=found):
            if record.ledger_id not in targets:
                targets[record.ledger_id] = _open_target(record.ledger_id, paths, sync, now_ms, found)
            target = targets[record.ledger_id]
            if target is None:
                found.records_orphaned += 1
                continue
            pending_bytes += _replay(record, target, found)
            if pending_bytes > replay_pending_bytes_max:
                for t in targets.values():
                    if t is not None:
                        _write_pending(t)
                pending_bytes = 0
        for t in targets.values():
            if t is not None:
                _write_pending(t)
                if sync and t.fd >= 0:
                    _layout.sync_fd(t.fd)
    finally:
        for t in targets.values():
            if t is not None and t.fd >= 0:
                os.close(t.fd)
                t.fd = -1

    fresh = JournalLocation(found.next_seq, SEGMENT_HEADER_BYTES)
    _layout.write_atomic(journal_dir / CHECKPOINT_FILE, encode_checkpoint(fresh), sync=sync)
    for seq in list_segments(journal_dir):
        if seq < fresh.seq:
            (journal_dir / segment_name(seq)).unlink()
    if sync:
        _layout.fsync_dir(journal_dir)
    if found.records_replayed or found.torn_tails or found.corrupt_segments:
        log.info(
            "journal recovery: %d entries replayed into ledger files, %d already there, %d of deleted ledgers, "
            "%d dropped, %d torn tails truncated, %d corrupt segments",
            found.records_replayed,
            found.records_present,
            found.records_orphaned,
            found.records_dropped,
            found.torn_tails,
            found.corrupt_segments,
        )
    return found


def _read_checkpoint(journal_dir: Path) -> JournalLocation | None:
    path = journal_dir / CHECKPOINT_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    checkpoint = decode_checkpoint(raw)
    if checkpoint is None:
        # Written atomically, so never torn by a crash: this is damage. Replaying from the oldest
        # segment is safe (records already in files are skipped), just slower.
        log.error("journal checkpoint %s does not verify; replaying every segment", path)
    return checkpoint


def _records(
    journal_dir: Path,
    segments: list[int],
    checkpoint: JournalLocation,
    *,
    repair: bool,
    found: JournalRecovery | None,
) -> Iterator[JournalRecord]:
    for i, seq in enumerate(segments):
        path = journal_dir / segment_name(seq)
        reader = SegmentReader(path, seq, checkpoint.offset if seq == checkpoint.seq else SEGMENT_HEADER_BYTES)
        yield from reader.records()
        if not repair or found is None or not (reader.torn or not reader.header_ok):
            continue
        newest = i == len(segments) - 1
        if newest:
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


def _open_target(
    ledger_id: int, paths: dict[int, Path], sync: bool, now_ms: int, found: JournalRecovery
) -> _Target | None:
    path = paths.get(ledger_id)
    if path is None:
        return None
    index = read_index(path.with_name(_layout.index_file_name(ledger_id)), ledger_id)
    if index is not None:
        return _Target(path, index.entries, sealed=True)
    result = recover(path, ledger_id, now_ms, sync=sync)
    if result.valid_bytes < result.file_bytes:
        found.torn_tails += 1
    target = _Target(path, len(result.offsets), sealed=False)
    target.fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    return target


def _replay(record: JournalRecord, target: _Target, found: JournalRecovery) -> int:
    """Queue the record for its file if it is the file's next entry; returns the bytes queued."""
    if record.entry_id < target.entries:
        found.records_present += 1
        return 0
    if target.broken:
        found.records_dropped += 1
        return 0
    if target.sealed or record.entry_id > target.entries:
        what = "after its seal" if target.sealed else f"but the ledger has {target.entries} entries"
        log.error(
            "journal replay: %s entry %d is journaled %s; it and the ledger's later records are dropped",
            target.path,
            record.entry_id,
            what,
        )
        target.broken = True
        found.records_dropped += 1
        return 0
    target.pending.append(RECORD_HEADER.pack(len(record.data), record.data_crc))
    target.pending.append(record.data)
    target.pending_bytes += len(record.data)
    target.entries += 1
    found.records_replayed += 1
    return len(record.data)


def _write_pending(target: _Target) -> None:
    if target.pending:
        write_all(target.fd, target.pending)
        target.pending = []
        target.pending_bytes = 0
