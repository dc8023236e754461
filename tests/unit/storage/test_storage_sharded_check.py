"""velamq admin storage check on a data directory of several workers: the shards under bundles/
are checked and repaired like the data directory itself, and a shard in use stops --delete."""

from __future__ import annotations

import io
from pathlib import Path

from _sharded_testing import shard_of, started_sharded
from _storage_testing import payload, run

from velamq.metadata import MetadataStore
from velamq.storage import Position

# The checker is imported inside the tests (see test_storage_check.py).

NS = "persistent://public/default/"
LIVE = [NS + f"live-{i}" for i in range(6)]
GONE = [NS + f"gone-{i}" for i in range(6)]


async def build(data_dir: Path) -> None:
    store = MetadataStore(data_dir / "metadata.db")
    await store.start()
    try:
        for name in LIVE:
            await store.create_topic(name)
    finally:
        await store.close()
    async with started_sharded(data_dir, 2) as storage:
        for name in [*GONE, *LIVE]:
            ml = await storage.open_ledger(name)
            await ml.append(payload(0, 1000))
        await storage.flush()


def test_shards_are_checked_and_repaired(tmp_path: Path) -> None:
    from velamq.cli._storage_check import check_storage, run_storage_check

    run(build(tmp_path))
    shard = tmp_path / "bundles" / shard_of(2)(GONE[0])
    (shard / "logs" / "x.tmp").write_bytes(b"half")
    (tmp_path / "bundles" / "notes.txt").write_text("mine")
    report = check_storage(tmp_path)
    assert report.managed_ledgers == 12
    orphans = sorted(f.detail.split(": ")[0] for f in report.findings if f.kind == "orphan managed ledger")
    assert orphans == sorted(f"topic {name}" for name in GONE)
    for f in (f for f in report.findings if f.kind == "orphan managed ledger"):
        key = shard_of(2)(f.detail.split(": ")[0].removeprefix("topic "))
        assert f.detail.endswith(f"(shard {key})") and f.store == tmp_path / "bundles" / key
    assert {(f.kind, f.path.name) for f in report.findings if f.path is not None} == {
        ("temp file", "x.tmp"),
        ("unknown file", "notes.txt"),
    }
    out = io.StringIO()
    assert run_storage_check(tmp_path, delete=True, out=out) == 1, out.getvalue()  # notes.txt stays
    assert "deleted 6" in out.getvalue(), out.getvalue()  # the temp file went with the recovery
    (tmp_path / "bundles" / "notes.txt").unlink()
    # The orphans' bytes are garbage now; once the collector ran, nothing is left to find.

    async def after() -> None:
        async with started_sharded(tmp_path, 2) as storage:
            for name in LIVE:
                ml = await storage.open_ledger(name)
                assert [e.data for e in await ml.read_entries(Position(0, 0), 10)] == [payload(0, 1000)]
            await storage.collect_garbage()
            assert await storage.ledger_names() == sorted(LIVE)

    run(after())
    assert run_storage_check(tmp_path, out=io.StringIO()) == 0


def test_a_shard_in_use_stops_delete(tmp_path: Path) -> None:
    from velamq.cli._storage_check import run_storage_check

    run(build(tmp_path))

    async def main() -> None:
        async with started_sharded(tmp_path, 2) as storage:
            await storage.open_ledger(LIVE[0])  # this worker holds one shard, not the data directory
            out = io.StringIO()
            assert run_storage_check(tmp_path, delete=True, out=out) == 2
            assert "broker is running" in out.getvalue()
            out = io.StringIO()
            assert run_storage_check(tmp_path, out=out) == 1  # the report alone still works
            assert "report may be stale" in out.getvalue()

    run(main())
