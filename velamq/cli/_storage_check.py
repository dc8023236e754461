"""`velamq admin storage check [--data-dir D] [--delete]`: find (and remove) what nothing owns (BR-8, BR-9).

Storage that belongs to no live topic, or is damaged (velamq.storage._check lists the kinds):
orphan managed ledgers (a topic's log the metadata store does not know; owned by a topic row, by a
partition of a partitioned topic, or, for names "<topic>#<suffix>" (the broker's compacted stores),
by <topic>), orphan index rows, dead and uncommitted entry logs, missing or damaged entry logs,
stale journal segments, temp files, format 1 data not migrated yet; and offloaded files no ledger
owns or that are missing (velamq/storage/offload/_check.py), under <data_dir>/offloaded or where
the broker config given with --config offloads. A data directory of several workers keeps a
storage per namespace bundle under <data_dir>/bundles/: each is checked (and repaired) as well.

Metadata that points at nothing (BR-8):

    orphan partition row      a topics row "<p>-partition-<n>" whose partitioned topic <p> has n
                              partitions or fewer (without a partitioned <p> it is an ordinary
                              topic: velamq._topic_name.partition_role)
    orphan topic policies     a topic_policies row no topic, partitioned topic or partition carries
                              (reported only: the metadata store offers no way to remove it)
    schema without topic      a schema id ("tenant/ns/name") whose name no topic, partitioned topic or
                              partition of either domain carries: uploaded through the admin API
                              before its topic was created (reported only; a schema in use never is)

Reported only, never deleted: damaged and unknown files. The report reads metadata.db and
storage.db (WAL lets it read while a broker runs; the report may then be stale). With --delete it
first recovers the storage (starts and stops it: the journal is replayed, so storage.db is
complete), then holds the data directory's lock from the check to the last deletion, so it refuses
while a broker runs; orphan rows are removed through velamq.metadata.MetadataStore. A topic the
metadata store knows is never touched; without a metadata store no topic counts as orphaned.

At a million topics the check reads the topic names once and the managed ledgers a page at a time.

Exit status: 0 nothing found (or everything found was removed), 1 something remains, 2 the check
could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from velamq._errors import StorageError
from velamq._topic_name import DOMAINS, PartitionRole, TopicName, partition_role
from velamq.storage import OffloadConfig, Storage, StorageConfig
from velamq.storage.checker import (
    OFFLOADED_DIR,
    Finding,
    OffloadFinding,
    check,
    check_offloaded,
    lock_data_dir,
    lock_is_held,
    remove_offloaded,
    repair,
    shard_dirs,
    unlock_data_dir,
)

METADATA_FILE = "metadata.db"
_OWNER_SEPARATOR = "#"


@dataclass(slots=True)
class CheckReport:
    data_dir: Path
    findings: list[Finding] = field(default_factory=list)
    topics_known: int = 0
    managed_ledgers: int = 0
    entry_logs: int = 0
    log_bytes: int = 0
    live_bytes: int = 0
    broker_running: bool = False
    errors: list[str] = field(default_factory=list)
    offload: OffloadConfig | None = None  # where offloaded ledgers are (docs/offload.md)
    offloaded: list[OffloadFinding] = field(default_factory=list)

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


def check_storage(data_dir: Path, *, probe_lock: bool = True, offload: OffloadConfig | None = None) -> CheckReport:
    """Everything orphaned in a data directory. Reads only. probe_lock=False if the caller holds it."""
    report = CheckReport(data_dir)
    if not data_dir.is_dir():
        report.errors.append(f"{data_dir} is not a directory")
        return report
    report.broker_running = probe_lock and _in_use(data_dir)
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
    known = meta

    def is_live(name: str) -> bool:
        assert known is not None
        return _live(name, known)

    try:
        found = check(data_dir, is_live if meta is not None else None, broker_running=report.broker_running)
    except (StorageError, sqlite3.Error) as exc:
        report.errors.append(f"cannot read the storage of {data_dir}: {exc}")
        return report
    report.findings += found.findings
    stores = [data_dir, *(path for _, path in shard_dirs(data_dir))]
    if offload is None and any((store / OFFLOADED_DIR).is_dir() for store in stores):
        offload = OffloadConfig()  # the filesystem driver's default root
    if offload is not None:
        report.offload = offload
        try:
            report.offloaded = check_offloaded(offload, data_dir, broker_running=report.broker_running)
        except (ImportError, OSError, StorageError, sqlite3.Error) as exc:
            report.errors.append(f"cannot check the offloaded files: {exc}")
    report.managed_ledgers = found.managed_ledgers
    report.entry_logs, report.log_bytes, report.live_bytes = found.entry_logs, found.log_bytes, found.live_bytes
    return report


def _check_metadata(meta: _Metadata, report: CheckReport) -> None:
    for name in sorted(meta.topics):
        partition = _partition_of(name)
        if partition is None:
            continue
        parent, _ = partition
        partitions = meta.partitioned.get(parent, 0)
        # Without a partitioned parent the row is an ordinary topic (the broker's rule, too).
        if partition_role(TopicName.parse(name), partitions) is PartitionRole.OUT_OF_RANGE:
            why = f"{parent} has {partitions} partitions"
            report.findings.append(Finding("orphan partition row", None, f"topics row {name}: {why}", row=name))
    parents = {p[0] for t in meta.topics if (p := _partition_of(t)) is not None}

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


def delete_findings(report: CheckReport) -> list[str]:
    """Remove every deletable finding; returns error messages for those that could not be removed."""
    rows = [f.row for f in report.deletable if f.row is not None]
    errors = repair(report.data_dir, [f for f in report.deletable if f.row is None])
    if report.offload is not None:
        errors += remove_offloaded(report.offload, report.data_dir, [f for f in report.offloaded if f.deletable])
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


def run_storage_check(data_dir: Path, *, delete: bool = False, out: TextIO | None = None,
                      offload: OffloadConfig | None = None) -> int:
    """Print the report (and delete with delete=True); returns the exit status (see the docstring)."""
    out = out or sys.stdout
    lock_fds: list[int] = []
    if delete and data_dir.is_dir():
        try:
            if _in_use(data_dir):
                raise StorageError(f"{data_dir} is in use by another Storage")
            stores = [data_dir, *(path for _, path in shard_dirs(data_dir))]
            for store in stores:  # the journals replayed: each storage.db is complete
                asyncio.run(_recover(store))
            # Held from the check to the last deletion: no broker may start meanwhile.
            for store in stores:
                lock_fds.append(lock_data_dir(store))
        except StorageError as exc:
            for fd in lock_fds:
                unlock_data_dir(fd)
            why = "a broker is running there; stop it to --delete" if "in use" in str(exc) else str(exc)
            print(f"velamq storage check of {data_dir}: {why}", file=out)
            return 2
    try:
        return _run(data_dir, delete, out, offload)
    finally:
        for fd in lock_fds:
            unlock_data_dir(fd)


def _in_use(data_dir: Path) -> bool:
    """Whether a broker runs on data_dir: its lock, or a shard's (a worker's), is held."""
    return lock_is_held(data_dir) or any(lock_is_held(path) for _, path in shard_dirs(data_dir))


async def _recover(data_dir: Path) -> None:
    storage = Storage(StorageConfig(data_dir, memory_bytes=64 * 1024 * 1024))
    await storage.start()
    await storage.close()


def _run(data_dir: Path, delete: bool, out: TextIO, offload: OffloadConfig | None = None) -> int:
    report = check_storage(data_dir, probe_lock=not delete, offload=offload)
    print(f"velamq storage check of {data_dir}", file=out)
    print(f"  {report.managed_ledgers} managed ledgers, {report.topics_known} topics in the metadata store", file=out)
    print(f"  {report.entry_logs} entry logs, {_human(report.log_bytes)}, {_human(report.live_bytes)} live", file=out)
    if report.broker_running:
        print("  a broker is running on this directory: the report may be stale", file=out)
    for error in report.errors:
        print(f"  error: {error}", file=out)
    for f in report.findings:
        where = f"  {f.path.relative_to(data_dir)}" if f.path else ""
        size = f" ({_human(f.bytes)})" if f.bytes else ""
        flag = "" if f.deletable else " [report only]"
        print(f"  {f.kind:<24}{where}  {f.detail}{size}{flag}", file=out)
    for o in report.offloaded:
        size = f" ({_human(o.bytes)})" if o.bytes else ""
        print(f"  {o.kind:<24}  {o.path}  {o.detail}{size}{'' if o.deletable else ' [report only]'}", file=out)
    if any(e.startswith("cannot read") or "is not a directory" in e for e in report.errors):
        return 2
    deletable = report.deletable
    offloaded = [o for o in report.offloaded if o.deletable]
    found = len(report.findings) + len(report.offloaded)
    if not found:
        print("  nothing orphaned", file=out)
        return 0
    reclaim = sum(f.bytes for f in deletable) + sum(o.bytes for o in offloaded)
    removable = len(deletable) + len(offloaded)
    if not delete:
        print(f"  {found} found, {removable} removable ({_human(reclaim)}); run with --delete to remove them", file=out)
        return 1
    errors = delete_findings(CheckReport(data_dir, deletable, offload=report.offload, offloaded=offloaded))
    for error in errors:
        print(f"  could not delete {error}", file=out)
    print(f"  deleted {removable - len(errors)} ({_human(reclaim)})", file=out)
    return 1 if errors or removable < found else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="velamq admin storage check", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("./data"), help="the broker's data directory")
    parser.add_argument("--delete", action="store_true", help="remove what is orphaned")
    parser.add_argument("--config", type=Path, help="the broker's config file: where ledgers are offloaded")
    args = parser.parse_args(argv)
    offload = None
    if args.config is not None:
        from velamq.broker import BrokerConfig

        offload = BrokerConfig.from_file(args.config).offload
    return run_storage_check(args.data_dir, delete=args.delete, offload=offload)
