"""`velamq admin storage check [--data-dir D] [--delete]`: find (and remove) what nothing owns (BR-8, BR-9).

Storage that belongs to no topic:

    orphan ledger directory   ledgers/<topic>/ of a topic the metadata store does not know: its
                              ledger files, indexes and cursors (BR-9). A ledger directory is owned
                              by a topic row, by a partition of a partitioned topic, or, for names
                              "<topic>#<suffix>" (the broker's compacted stores), by <topic>.
    unidentified directory    a directory under ledgers/ with no name file and an undecodable name
    dangling index file       <id>.idx whose <id>.log is gone (a trim cut short)
    temp file                 *.tmp left by an atomic write cut short
    stale journal segment     a journal segment wholly before the checkpoint (a trim cut short)

Metadata that points at nothing (BR-8):

    orphan partition row      a topics row "<p>-partition-<n>" whose partitioned topic <p> does not
                              exist or has n partitions or fewer
    orphan topic policies     a topic_policies row no topic, partitioned topic or partition carries
                              (reported only: the metadata store offers no way to remove it)
    schema without topic      a schema id ("tenant/ns/name") whose name no topic, partitioned topic or
                              partition of either domain carries: uploaded through the admin API
                              before its topic was created (reported only; a schema in use never is)

Reported only, never deleted: ledger files whose header does not name them, and files the storage
does not know. The check reads metadata.db read-only; with --delete, orphan rows are removed through
velamq.metadata.MetadataStore and files directly. Deleting needs the data directory's lock, so it
refuses while a broker runs there; the report alone works either way (a running broker may make it
stale: a topic created meanwhile can show as an orphan).

Exit status: 0 nothing found (or everything found was removed), 1 something remains, 2 the check
could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import fcntl
import os
import shutil
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from velamq._errors import StorageError
from velamq._topic_name import DOMAINS, TopicName
from velamq.storage import _layout
from velamq.storage._journal_file import (
    CHECKPOINT_FILE,
    JOURNAL_DIR,
    decode_checkpoint,
    list_segments,
    parse_segment_name,
    segment_name,
)
from velamq.storage._ledger_file import LEDGER_HEADER_BYTES, parse_ledger_header

METADATA_FILE = "metadata.db"
# Files of the data directory itself that are not findings.
_KNOWN_TOP = {_layout.LOCK_FILE, _layout.LEDGER_ID_FILE, _layout.LEDGERS_DIR, JOURNAL_DIR}
_OWNER_SEPARATOR = "#"


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    path: Path | None  # the file or directory, for storage findings
    detail: str
    bytes: int = 0
    deletable: bool = True
    row: str | None = None  # the topic row to delete, for metadata findings


@dataclass(slots=True)
class CheckReport:
    data_dir: Path
    findings: list[Finding] = field(default_factory=list)
    topics_known: int = 0
    ledger_dirs: int = 0
    broker_running: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def deletable(self) -> list[Finding]:
        return [f for f in self.findings if f.deletable]


@dataclass(slots=True)
class _Metadata:
    topics: set[str]
    partitioned: dict[str, int]
    policy_names: set[str]
    schema_ids: set[str] = field(default_factory=set)


def _read_metadata(path: Path) -> _Metadata:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        topics = {r[0] for r in conn.execute("SELECT name FROM topics")} if "topics" in tables else set()
        partitioned: dict[str, int] = {}
        if "partitioned_topics" in tables:
            partitioned = {r[0]: int(r[1]) for r in conn.execute("SELECT name, partitions FROM partitioned_topics")}
        policies: set[str] = set()
        if "topic_policies" in tables:
            policies = {r[0] for r in conn.execute("SELECT name FROM topic_policies")}
        schema_ids: set[str] = set()
        if "schemas" in tables:
            schema_ids = {r[0] for r in conn.execute("SELECT DISTINCT schema_id FROM schemas")}
        return _Metadata(topics, partitioned, policies, schema_ids)
    finally:
        conn.close()


def _partition_of(name: str) -> tuple[str, int] | None:
    try:
        tn = TopicName.parse(name)
    except Exception:
        return None
    if tn.partition_index < 0:
        return None
    return str(tn.partitioned_parent), tn.partition_index


def _live(name: str, meta: _Metadata) -> bool:
    owner = name.split(_OWNER_SEPARATOR, 1)[0]
    if owner in meta.topics:
        return True
    partition = _partition_of(owner)
    return partition is not None and partition[1] < meta.partitioned.get(partition[0], 0)


def _tree_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _broker_holds_lock(data_dir: Path) -> bool:
    lock = data_dir / _layout.LOCK_FILE
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return True
        raise
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def check_storage(data_dir: Path, *, probe_lock: bool = True) -> CheckReport:
    """Everything orphaned in a data directory. Reads only. probe_lock=False if the caller holds it."""
    report = CheckReport(data_dir)
    if not data_dir.is_dir():
        report.errors.append(f"{data_dir} is not a directory")
        return report
    report.broker_running = probe_lock and _broker_holds_lock(data_dir)
    meta_path = data_dir / METADATA_FILE
    meta: _Metadata | None = None
    if meta_path.exists():
        try:
            meta = _read_metadata(meta_path)
        except sqlite3.Error as exc:
            report.errors.append(f"cannot read {meta_path}: {exc}")
    else:
        report.errors.append(f"no metadata store at {meta_path}: cannot tell which topics are live")
    if meta is not None:
        report.topics_known = len(meta.topics) + len(meta.partitioned)
        _check_metadata(meta, report)
    _check_ledgers(data_dir, meta, report)
    _check_journal(data_dir / JOURNAL_DIR, report)
    for child in sorted(data_dir.iterdir()):
        if child.name not in _KNOWN_TOP and not child.name.startswith(METADATA_FILE):
            report.findings.append(Finding("unknown file", child, "not storage's, left alone", deletable=False))
    return report


def _check_metadata(meta: _Metadata, report: CheckReport) -> None:
    for name in sorted(meta.topics):
        partition = _partition_of(name)
        if partition is None:
            continue
        parent, index = partition
        partitions = meta.partitioned.get(parent, 0)
        if index >= partitions:
            why = f"{parent} has {partitions} partitions" if partitions else f"{parent} does not exist"
            report.findings.append(Finding("orphan partition row", None, f"topics row {name}: {why}", row=name))
    parents = {(_partition_of(t) or ("", 0))[0] for t in meta.topics}

    def owned(name: str) -> bool:
        return name in meta.topics or name in meta.partitioned or name in parents

    for name in sorted(meta.policy_names):
        if not owned(name):
            report.findings.append(
                Finding(
                    "orphan topic policies", None, f"topic_policies row {name}: no topic carries it", deletable=False
                )
            )
    for sid in sorted(meta.schema_ids):
        # A schema id is shared by both domains and by every partition (velamq.metadata.schema_id).
        if not any(owned(f"{domain}://{sid}") for domain in DOMAINS):
            report.findings.append(
                Finding("schema without topic", None, f"schemas of {sid}: no topic carries it", deletable=False)
            )


def _check_ledgers(data_dir: Path, meta: _Metadata | None, report: CheckReport) -> None:
    root = data_dir / _layout.LEDGERS_DIR
    if not root.is_dir():
        return
    for child in sorted(root.iterdir()):
        if not child.is_dir():
            report.findings.append(Finding("unknown file", child, "not a ledger directory", deletable=False))
            continue
        report.ledger_dirs += 1
        name = _layout.read_name_file(child)
        if name is None:
            report.findings.append(
                Finding("unidentified directory", child, "no name file and no decodable name", _tree_bytes(child))
            )
            continue
        if meta is not None and not _live(name, meta):
            files = sum(1 for _ in child.rglob("*") if _.is_file())
            report.findings.append(
                Finding("orphan ledger directory", child, f"topic {name}: {files} files", _tree_bytes(child))
            )
            continue
        _check_ledger_files(child, report)


def _check_ledger_files(directory: Path, report: CheckReport) -> None:
    names = set(os.listdir(directory))
    for file_name in sorted(names):
        path = directory / file_name
        if file_name in (_layout.NAME_FILE, _layout.CURSORS_DIR):
            continue
        if file_name.endswith(_layout.TMP_SUFFIX):
            report.findings.append(Finding("temp file", path, "an atomic write cut short", path.stat().st_size))
            continue
        ledger_id = _layout.parse_ledger_id(file_name, _layout.LOG_SUFFIX)
        if ledger_id is not None:
            with open(path, "rb") as f:
                header = f.read(LEDGER_HEADER_BYTES)
            if parse_ledger_header(header, ledger_id) is None:
                report.findings.append(
                    Finding("damaged ledger file", path, "its header does not name it", deletable=False)
                )
            continue
        index_id = _layout.parse_ledger_id(file_name, _layout.INDEX_SUFFIX)
        if index_id is not None:
            if _layout.ledger_file_name(index_id) not in names:
                report.findings.append(
                    Finding("dangling index file", path, f"ledger {index_id} has no file", path.stat().st_size)
                )
            continue
        report.findings.append(Finding("unknown file", path, "not storage's, left alone", deletable=False))
    cursors = directory / _layout.CURSORS_DIR
    if cursors.is_dir():
        for path in sorted(cursors.iterdir()):
            if path.name.endswith(_layout.TMP_SUFFIX):
                report.findings.append(Finding("temp file", path, "an atomic write cut short", path.stat().st_size))


def _check_journal(journal_dir: Path, report: CheckReport) -> None:
    if not journal_dir.is_dir():
        return
    checkpoint = None
    try:
        checkpoint = decode_checkpoint((journal_dir / CHECKPOINT_FILE).read_bytes())
    except FileNotFoundError:
        pass
    if checkpoint is not None:
        for seq in list_segments(journal_dir):
            if seq < checkpoint.seq:
                path = journal_dir / segment_name(seq)
                report.findings.append(
                    Finding("stale journal segment", path, f"before the checkpoint {checkpoint}", path.stat().st_size)
                )
    for path in sorted(journal_dir.iterdir()):
        if path.name.endswith(_layout.TMP_SUFFIX):
            report.findings.append(Finding("temp file", path, "an atomic write cut short", path.stat().st_size))
        elif path.name != CHECKPOINT_FILE and parse_segment_name(path.name) is None:
            report.findings.append(Finding("unknown file", path, "not storage's, left alone", deletable=False))


def delete_findings(report: CheckReport) -> list[str]:
    """Remove every deletable finding; returns error messages for those that could not be removed."""
    errors: list[str] = []
    rows = [f.row for f in report.deletable if f.row is not None]
    for finding in report.deletable:
        path = finding.path
        if path is None:
            continue
        try:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            _layout.fsync_dir(path.parent)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    if rows:
        errors += asyncio.run(_delete_rows(report.data_dir / METADATA_FILE, rows))
    return errors


async def _delete_rows(path: Path, rows: list[str]) -> list[str]:
    from velamq.metadata import MetadataStore

    store = MetadataStore(path)
    await store.start()
    errors = []
    try:
        for row in rows:
            try:
                await store.delete_topic(row)
            except Exception as exc:
                errors.append(f"topics row {row}: {exc}")
    finally:
        await store.close()
    return errors


def _human(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def run_storage_check(data_dir: Path, *, delete: bool = False, out: TextIO | None = None) -> int:
    """Print the report (and delete with delete=True); returns the exit status (see the docstring)."""
    out = out or sys.stdout
    lock_fd = -1
    if delete and data_dir.is_dir():
        try:  # held from the check to the last deletion: no broker may start meanwhile
            lock_fd = _layout.lock_data_dir(data_dir)
        except StorageError:
            print(f"velamq storage check of {data_dir}: a broker is running there; stop it to --delete", file=out)
            return 2
    try:
        return _run(data_dir, delete, out)
    finally:
        if lock_fd >= 0:
            _layout.unlock_data_dir(lock_fd)


def _run(data_dir: Path, delete: bool, out: TextIO) -> int:
    report = check_storage(data_dir, probe_lock=not delete)
    print(f"velamq storage check of {data_dir}", file=out)
    print(f"  {report.ledger_dirs} ledger directories, {report.topics_known} topics in the metadata store", file=out)
    if report.broker_running:
        print("  a broker is running on this directory: the report may be stale", file=out)
    for error in report.errors:
        print(f"  error: {error}", file=out)
    for f in report.findings:
        where = f"  {f.path.relative_to(data_dir)}" if f.path else ""
        size = f" ({_human(f.bytes)})" if f.bytes else ""
        flag = "" if f.deletable else " [report only]"
        print(f"  {f.kind:<24}{where}  {f.detail}{size}{flag}", file=out)
    if any(e.startswith("cannot read") or "is not a directory" in e for e in report.errors):
        return 2
    deletable = report.deletable
    if not report.findings:
        print("  nothing orphaned", file=out)
        return 0
    reclaim = sum(f.bytes for f in deletable)
    if not delete:
        print(f"  {len(report.findings)} found, {len(deletable)} removable ({_human(reclaim)});"
              " run with --delete to remove them", file=out)
        return 1
    errors = delete_findings(CheckReport(data_dir, deletable))
    for error in errors:
        print(f"  could not delete {error}", file=out)
    print(f"  deleted {len(deletable) - len(errors)} ({_human(reclaim)})", file=out)
    return 1 if errors or len(deletable) < len(report.findings) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="velamq admin storage check", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("./data"), help="the broker's data directory")
    parser.add_argument("--delete", action="store_true", help="remove what is orphaned")
    args = parser.parse_args(argv)
    return run_storage_check(args.data_dir, delete=args.delete)
