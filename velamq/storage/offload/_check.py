"""What the storage checker finds among offloaded files (velamq/storage/_check.py has the rest).

    orphan offloaded file     a ledger's Parquet file or manifest whose ledger storage.db does not
                              have as offloaded: retention or a topic deletion whose file deletion
                              failed (the store was down), or an offload cut short (a crash before
                              the mark); while a broker runs it may be an offload in progress
    temp file                 a '.'-prefixed file a local write left behind
    missing offloaded file    a ledger whose local copy is deleted, and whose manifest or Parquet
                              file is gone: its entries are lost (report only)
    unknown file              under the root but not a ledger's (report only)

Reads storage.db and lists the store; `remove` deletes the deletable findings through the store.
A data directory with shards (bundles/, ShardedStorage) has a storage.db per shard and, with the
filesystem driver's default root, an offloaded/ per shard: every one is read, and since ledger
ids are unique across the shards, one ledger list judges the files of all of them.
"""

from __future__ import annotations

from pathlib import Path

from velamq.storage import _layout
from velamq.storage._config import OffloadConfig
from velamq.storage._shard_layout import shard_dirs
from velamq.storage.index._storage_db import StorageDb
from velamq.storage.offload._parquet import WriteLimits
from velamq.storage.offload._status import OffloadFinding
from velamq.storage.offload._store import MANIFESTS, OffloadStore, make_filesystem


def open_store(config: OffloadConfig, data_dir: Path) -> OffloadStore:
    fs, root = make_filesystem(config, data_dir)
    return OffloadStore(fs, root, WriteLimits())


def _ledger_flags(data_dir: Path) -> dict[int, tuple[bool, bool]]:
    """(offloaded, local copy kept) of every ledger in storage.db."""
    db = StorageDb(data_dir / _layout.DB_FILE, sync=False)
    try:
        return db.offload_flags()
    finally:
        db.close()


def _stores(config: OffloadConfig, data_dir: Path) -> tuple[list[OffloadStore], dict[int, tuple[bool, bool]]]:
    """The offload stores of data_dir and its shards (one, unless each has its default root), and
    the offload flags of every ledger of them all."""
    dirs = [data_dir, *(path for _, path in shard_dirs(data_dir))]
    flags: dict[int, tuple[bool, bool]] = {}
    stores: dict[str, OffloadStore] = {}
    for directory in dirs:
        if (directory / _layout.DB_FILE).exists():
            flags |= _ledger_flags(directory)
        store = open_store(config, directory)
        stores.setdefault(store.root, store)
    return list(stores.values()), flags


def check_offloaded(config: OffloadConfig, data_dir: Path, *, broker_running: bool) -> list[OffloadFinding]:
    stores, flags = _stores(config, data_dir)
    store = stores[0]
    out: list[OffloadFinding] = []
    present: dict[int, set[str]] = {}
    for f in (f for s in stores for f in s.files()):
        name = f.path.rpartition("/")[2]
        if name.startswith("."):
            out.append(OffloadFinding("temp file", f.path, "an interrupted write", f.size, not broker_running))
            continue
        if f.ledger_id is None:
            out.append(OffloadFinding("unknown file", f.path, "not storage's, left alone", f.size, False))
            continue
        present.setdefault(f.ledger_id, set()).add("manifest" if f"/{MANIFESTS}/" in f.path else "parquet")
        offloaded, _ = flags.get(f.ledger_id, (False, True))
        if not offloaded:
            why = "no such ledger" if f.ledger_id not in flags else "the ledger is not marked offloaded"
            if broker_running:
                why += " (or an offload in progress)"
            out.append(OffloadFinding("orphan offloaded file", f.path, f"ledger {f.ledger_id} of {f.topic}: {why}",
                                      f.size, not broker_running))
    for ledger_id, (offloaded, local) in sorted(flags.items()):
        if offloaded and not local and present.get(ledger_id, set()) != {"manifest", "parquet"}:
            detail = f"ledger {ledger_id}: its local copy is deleted and its offloaded copy is incomplete"
            root = store.root if len(stores) == 1 else "every offload root"
            out.append(OffloadFinding("missing offloaded file", root, detail, deletable=False))
    return out


def remove_offloaded(config: OffloadConfig, data_dir: Path, findings: list[OffloadFinding]) -> list[str]:
    store = open_store(config, data_dir)
    errors = []
    for f in findings:
        if not f.deletable:
            continue
        try:
            store.fs.delete_file(f.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            errors.append(f"{f.path}: {exc}")
    return errors
