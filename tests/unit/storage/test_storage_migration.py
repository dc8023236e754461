"""A data directory of storage format 1 (a file per ledger) is migrated at start, whole or not at
all: same ledger ids, entry ids, data, ledger times and cursors; the old files are gone after."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

from _storage_testing import run, started

from velamq.storage import Position
from velamq.storage.index._storage_db import StorageDb

DATA = Path(__file__).parent / "data"
EXPECTED: dict[str, Any] = json.loads((DATA / "format1.json").read_text())


def format_1_dir(tmp_path: Path) -> Path:
    """The fixture written by format 1 (see data/make_format1.py): a crash copy."""
    with tarfile.open(DATA / "format1.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "data"


async def check_migrated(data_dir: Path) -> None:
    async with started(data_dir, ledger_entries_max=4) as storage:
        assert await storage.ledger_names() == sorted(EXPECTED["entries"])
        for name, entries in EXPECTED["entries"].items():
            ml = await storage.open_ledger(name)
            got = await ml.read_entries(Position(0, 0), 1000)
            assert [[e.position.ledger_id, e.position.entry_id, e.data.decode("latin-1")] for e in got] == entries
            infos = ml.ledgers()
            assert all(i.closed_ms is not None for i in infos[:-1])
            assert all(i.created_ms > 0 for i in infos)
            for cursor, (mark_delete, acked) in EXPECTED["cursors"].get(name, {}).items():
                c = ml.cursors[cursor]
                assert list(c.mark_delete_position) == mark_delete and c.individually_acked.to_json() == acked
        a = await storage.open_ledger("persistent://public/default/a")
        last = EXPECTED["entries"]["persistent://public/default/a"][-1]
        assert await a.append(b"after") == Position(last[0], last[1] + 1)  # the current ledger goes on
        fresh = await storage.open_ledger("persistent://public/default/new")
        assert fresh.current_ledger_id > max(e[0] for es in EXPECTED["entries"].values() for e in es)
    assert sorted(p.name for p in data_dir.iterdir()) == ["LOCK", "journal", "logs", "storage.db"]
    (segment,) = (data_dir / "journal").iterdir()  # the old segments and checkpoint are gone
    assert segment.suffix == ".wal" and int(segment.stem) > 2


def test_format_1_is_migrated_at_start(tmp_path: Path) -> None:
    data_dir = format_1_dir(tmp_path)
    assert (data_dir / "ledgers").is_dir() and (data_dir / "journal" / "checkpoint").exists()
    run(check_migrated(data_dir))
    # Entries only the old journal held (after its checkpoint) are there too (checked above); and
    # the migrated directory starts again like any other.
    async def again() -> None:
        async with started(data_dir) as storage:
            got = await (await storage.open_ledger("persistent://public/default/a")).read_entries(Position(0, 0), 100)
            assert got[-1].data == b"after"

    run(again())


def test_a_migration_cut_short_starts_again_from_the_old_files(tmp_path: Path) -> None:
    data_dir = format_1_dir(tmp_path)
    # What a crash in the middle of a migration leaves: a database marked "migrating", some logs.
    db = StorageDb(data_dir / "storage.db", sync=False, create=True)
    with db.transaction():
        db.set_meta({"migrating": 1, "ledger_id_next": 999})
    db.close()
    (data_dir / "logs").mkdir()
    (data_dir / "logs" / "0000000001.log").write_bytes(b"half a log")
    run(check_migrated(data_dir))


def test_old_files_left_after_a_finished_migration_are_only_removed(tmp_path: Path) -> None:
    data_dir = format_1_dir(tmp_path)
    run(check_migrated(data_dir))
    # A crash after the migration's last transaction, before the old files were removed.
    old = format_1_dir(tmp_path / "again")
    shutil.copytree(old / "ledgers", data_dir / "ledgers")
    shutil.copy(old / "ledger_id_next", data_dir / "ledger_id_next")

    async def check() -> None:
        async with started(data_dir) as storage:
            got = await (await storage.open_ledger("persistent://public/default/a")).read_entries(Position(0, 0), 100)
            assert got[-1].data == b"after"  # written after the migration: not migrated over again

    run(check())
    assert not (data_dir / "ledgers").exists() and not (data_dir / "ledger_id_next").exists()
