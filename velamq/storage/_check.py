"""What the storage checker finds in a data directory, and removing it (BR-8, BR-9).

The storage side of `velamq admin storage check` (velamq/cli/_storage_check.py adds the metadata
store's side: which topics are live). Reads storage.db and lists the files; nothing here runs in a
broker. Findings:

    orphan managed ledger    a topic's log the metadata store does not know (its ledgers, index
                             rows and cursors; its bytes become garbage for the collector)
    orphan index rows        ledgers, runs or cursors that point at nothing
    dead entry log           a sealed log with no live byte left (the collector would delete it)
    uncommitted entry log    a log file without a row: a flush or compaction cut short (removed at
                             the next start; reported only while a broker runs, it may be new)
    missing entry log        a row without its file: entries are lost (report only)
    damaged entry log        a header that does not name the log, or shorter than committed
    stale journal segment    a segment wholly before the checkpoint (a trim cut short)
    temp file                left by an interrupted write
    format 1 data            a storage format 1 directory not migrated yet (report only: the next
                             start migrates it)
    unknown file             not storage's; reported, never deleted

`repair` removes the deletable findings. It must run with the data directory locked and after a
recovery (the journal replayed, so the database is complete): the checker starts and stops a
Storage first. A live topic is never touched: only managed ledgers the caller's `is_live` rejects.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from velamq.storage import _layout
from velamq.storage._config import OFFLOADED_DIR
from velamq.storage._shard_layout import BUNDLES_DIR, SHARD_ID_FILE, SHARD_ID_NEXT_FILE, shard_dirs, shards_root
from velamq.storage.formats._entry_log import LOG_HEADER_BYTES, log_header_ok
from velamq.storage.formats._journal_file import JOURNAL_DIR, list_segments, parse_segment_name, segment_name
from velamq.storage.index._storage_db import LogRow, StorageDb
from velamq.storage.startup._migrate_v1 import format_1_paths
from velamq.storage.write._log_writer import remove_log

# Managed ledgers read from the database at a time.
names_page = 10_000

KNOWN_TOP = {
    _layout.LOCK_FILE,
    _layout.BALLAST_FILE,
    _layout.DB_FILE,
    _layout.DB_FILE + "-wal",
    _layout.DB_FILE + "-shm",
    _layout.LOGS_DIR,
    JOURNAL_DIR,
    OFFLOADED_DIR,  # the filesystem offload driver's default root (velamq/storage/offload)
    BUNDLES_DIR,  # ShardedStorage's shards, each checked as a data directory of its own
    SHARD_ID_FILE,  # a shard's number (_shard_layout)
}


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    path: Path | None  # the file, for file findings
    detail: str
    bytes: int = 0
    deletable: bool = True
    ml_id: int | None = None  # an orphan managed ledger's id
    log_id: int | None = None  # a dead entry log's id
    row: str | None = None  # a metadata store row to delete (the CLI's findings)
    store: Path | None = None  # the shard directory it is in (None: data_dir itself)


@dataclass(slots=True)
class StorageCheck:
    findings: list[Finding] = field(default_factory=list)
    managed_ledgers: int = 0
    entry_logs: int = 0
    log_bytes: int = 0
    live_bytes: int = 0


def check(data_dir: Path, is_live: Callable[[str], bool] | None, *, broker_running: bool) -> StorageCheck:
    """Everything orphaned or damaged in the storage files of data_dir, and in every shard under
    data_dir/bundles (ShardedStorage: each a data directory of its own). Reads only.

    is_live(topic name) says whether the metadata store knows the topic; None: it cannot tell, and
    no managed ledger counts as orphaned. A shard whose lock is held counts as in use by a broker."""
    out = _check_store(data_dir, is_live, broker_running=broker_running)
    for key, path in shard_dirs(data_dir):
        found = _check_store(path, is_live, broker_running=broker_running or _layout.lock_is_held(path))
        for f in found.findings:
            detail = f.detail if f.path is not None else f"{f.detail} (shard {key})"
            out.findings.append(dataclasses.replace(f, detail=detail, store=path))
        out.managed_ledgers += found.managed_ledgers
        out.entry_logs += found.entry_logs
        out.log_bytes += found.log_bytes
        out.live_bytes += found.live_bytes
    _check_shards_root(shards_root(data_dir), out)
    return out


def _check_shards_root(root: Path, out: StorageCheck) -> None:
    """The files of data_dir/bundles itself (the shard directories are checked on their own)."""
    if not root.is_dir():
        return
    for child in sorted(root.iterdir()):
        if child.name.endswith(_layout.TMP_SUFFIX):
            out.findings.append(Finding("temp file", child, "an interrupted write", child.stat().st_size))
        elif not child.is_dir() and child.name not in (_layout.LOCK_FILE, SHARD_ID_NEXT_FILE):
            out.findings.append(Finding("unknown file", child, "not storage's, left alone", deletable=False))


def _check_store(data_dir: Path, is_live: Callable[[str], bool] | None, *, broker_running: bool) -> StorageCheck:
    """The findings of one Storage's data directory."""
    out = StorageCheck()
    for path in format_1_paths(data_dir):
        out.findings.append(
            Finding("format 1 data", path, "migrated at the next start of the broker", deletable=False)
        )
    db_path = data_dir / _layout.DB_FILE
    rows: dict[int, LogRow] = {}
    checkpoint_seq = None
    if db_path.exists():
        db = StorageDb(db_path, sync=False)
        try:
            _check_db(db, is_live, out)
            rows = {row.log_id: row for row in db.logs()}
            checkpoint_seq = db.meta().get("checkpoint_seq")
        finally:
            db.close()
    _check_logs(data_dir / _layout.LOGS_DIR, rows, broker_running, out)
    _check_journal(data_dir / JOURNAL_DIR, checkpoint_seq, out)
    old = format_1_paths(data_dir)
    for child in sorted(data_dir.iterdir()):
        if child.name not in KNOWN_TOP and not child.name.startswith("metadata.db") and child not in old:
            out.findings.append(Finding("unknown file", child, "not storage's, left alone", deletable=False))
    return out


def _check_db(db: StorageDb, is_live: Callable[[str], bool] | None, out: StorageCheck) -> None:
    after = ""
    while True:
        page = db.ml_names(after, names_page)
        if not page:
            break
        out.managed_ledgers += len(page)
        after = page[-1][1]
        if is_live is None:
            continue
        for ml_id, name in page:
            if not is_live(name):
                ledgers = db.ledger_ids_of(ml_id)
                size = sum(sum(r.size_bytes for r in db.runs_of_ledger(i)) for i in ledgers)
                detail = f"topic {name}: {len(ledgers)} ledgers"
                out.findings.append(Finding("orphan managed ledger", None, detail, size, ml_id=ml_id))
    for what, count in db.orphans().items():
        if count:
            out.findings.append(Finding("orphan index rows", None, f"{count} {what}"))


def _check_logs(logs_dir: Path, rows: dict[int, LogRow], broker_running: bool, out: StorageCheck) -> None:
    present: set[int] = set()
    if logs_dir.is_dir():
        for name in sorted(os.listdir(logs_dir)):
            path = logs_dir / name
            if name.endswith(_layout.TMP_SUFFIX):
                out.findings.append(Finding("temp file", path, "an interrupted write", path.stat().st_size))
                continue
            log_id = _layout.parse_log_id(name)
            if log_id is None:
                out.findings.append(Finding("unknown file", path, "not storage's, left alone", deletable=False))
                continue
            present.add(log_id)
            size = path.stat().st_size
            row = rows.get(log_id)
            if row is None:
                detail = "no index row: a flush or compaction cut short"
                if broker_running:
                    detail += " (or one in progress)"
                out.findings.append(Finding("uncommitted entry log", path, detail, size, deletable=not broker_running))
                continue
            out.entry_logs += 1
            out.log_bytes += row.total_bytes
            out.live_bytes += row.live_bytes
            with open(path, "rb") as f:
                header = f.read(LOG_HEADER_BYTES)
            header_ok = log_header_ok(header, log_id)
            if not header_ok or size < row.total_bytes:
                detail = f"{size} bytes, {row.total_bytes} committed; header {'ok' if header_ok else 'bad'}"
                out.findings.append(Finding("damaged entry log", path, detail, deletable=False))
            elif row.sealed and row.live_bytes <= 0:
                out.findings.append(Finding("dead entry log", path, "no live entry left", size, log_id=log_id))
    for log_id in sorted(set(rows) - present):
        path = logs_dir / _layout.log_file_name(log_id)
        out.findings.append(Finding("missing entry log", path, "in the index, but the file is gone", deletable=False))


def _check_journal(journal_dir: Path, checkpoint_seq: int | None, out: StorageCheck) -> None:
    if not journal_dir.is_dir():
        return
    if checkpoint_seq is not None:
        for seq in list_segments(journal_dir):
            if seq < checkpoint_seq:
                path = journal_dir / segment_name(seq)
                detail = f"before the checkpoint (segment {checkpoint_seq})"
                out.findings.append(Finding("stale journal segment", path, detail, path.stat().st_size))
    for path in sorted(journal_dir.iterdir()):
        if path.name.endswith(_layout.TMP_SUFFIX):
            out.findings.append(Finding("temp file", path, "an interrupted write", path.stat().st_size))
        elif parse_segment_name(path.name) is None and path.name != "checkpoint":
            out.findings.append(Finding("unknown file", path, "not storage's, left alone", deletable=False))


def repair(data_dir: Path, findings: list[Finding], *, sync: bool = True) -> list[str]:
    """Remove the deletable findings (the caller holds the locks of data_dir and of its shards,
    after a recovery of each). Returns errors."""
    stores: dict[Path, list[Finding]] = {}
    for f in findings:
        stores.setdefault(f.store or data_dir, []).append(f)
    return [error for store, found in stores.items() for error in _repair_store(store, found, sync=sync)]


def _repair_store(data_dir: Path, findings: list[Finding], *, sync: bool) -> list[str]:
    errors: list[str] = []
    orphans = [f for f in findings if f.deletable and f.ml_id is not None]
    dead_logs = [f for f in findings if f.deletable and f.log_id is not None]
    rows = [f for f in findings if f.deletable and f.kind == "orphan index rows"]
    if orphans or dead_logs or rows:
        db = StorageDb(data_dir / _layout.DB_FILE, sync=sync)
        try:
            for start in range(0, len(orphans), names_page):
                with db.transaction():
                    for f in orphans[start : start + names_page]:
                        assert f.ml_id is not None
                        db.delete_ml(f.ml_id)
            if rows:
                with db.transaction():
                    db.delete_orphans()
            for f in dead_logs:
                assert f.log_id is not None
                with db.transaction():
                    db.delete_log(f.log_id)
                remove_log(data_dir / _layout.LOGS_DIR, f.log_id, sync=sync)
        finally:
            db.close()
    for f in findings:
        if not f.deletable or f.path is None or f.log_id is not None:
            continue
        try:
            f.path.unlink()
            if sync:
                _layout.fsync_dir(f.path.parent)
        except FileNotFoundError:
            pass
        except OSError as exc:
            errors.append(f"{f.path}: {exc}")
    return errors
