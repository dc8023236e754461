"""velamq admin storage check on a data directory of several workers: the shards under bundles/
are checked and repaired like the data directory itself, and a shard in use stops --delete."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from _offload_entries import ROWS, mixed_entries
from _sharded_testing import shard_of, started_sharded
from _storage_testing import payload, run
from wait_helpers import until

from velamq.metadata import MetadataStore
from velamq.storage import OffloadConfig, Position, ShardedStorage, StorageConfig

# The checker is imported inside the tests (see test_storage_check.py).

NS = "persistent://public/default/"
LIVE = [NS + f"live-{i}" for i in range(6)]
GONE = [NS + f"gone-{i}" for i in range(6)]


async def create_topics(data_dir: Path, names: list[str]) -> None:
    """The metadata rows of these topics (what the checker judges ledgers against)."""
    store = MetadataStore(data_dir / "metadata.db")
    await store.start()
    try:
        for name in names:
            await store.create_topic(name)
    finally:
        await store.close()


async def build(data_dir: Path) -> None:
    await create_topics(data_dir, LIVE)
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


@pytest.mark.parametrize("root", ["per shard", "shared"])
def test_offloaded_files_of_every_shard_are_judged_by_their_own_ledgers(tmp_path: Path, root: str) -> None:
    """With the filesystem driver's default root each shard offloads under its own directory; with
    a configured root all shards share it. Either way a complete offload of every shard is left
    alone, and a file no ledger of any shard owns is found."""
    from velamq.cli._storage_check import check_storage

    data = tmp_path / "data"
    uri = "" if root == "per shard" else str(tmp_path / "tier")
    offload = OffloadConfig("filesystem", uri=uri, deletion_lag_ms=3_600_000, check_interval_s=3600.0)
    route = shard_of(2)
    topics = [LIVE[0], next(n for n in LIVE if route(n) != route(LIVE[0]))]

    async def build_offloaded() -> None:
        await create_topics(data, topics)
        config = StorageConfig(data, sync_policy="none", ledger_entries_max=5, offload=offload)
        storage = ShardedStorage(config, entry_rows=ROWS, shard_of=route)
        await storage.start()
        try:
            for name in topics:
                ml = await storage.open_ledger(name)
                positions = [await ml.append(e) for e in mixed_entries(12)]
                assert storage.request_offload(ml, positions[-1])
                await until(lambda ml=ml: storage.offload_status(ml.name).status != "RUNNING")
                assert storage.offload_status(name).status == "SUCCESS"
        finally:
            await storage.close()

    run(build_offloaded())
    roots = [Path(uri)] if uri else [data / "bundles" / route(n) / "offloaded" for n in topics]
    assert all(list(r.rglob("*.parquet")) for r in roots)
    assert [f.kind for f in check_storage(data, offload=offload).offloaded] == []
    stray = next(roots[-1].rglob("*.parquet")).with_name("ledger-00000000000000009999.parquet")
    stray.write_bytes(b"PAR1 of a ledger nobody has")
    found = [(f.kind, f.path) for f in check_storage(data, offload=offload).offloaded]
    assert found == [("orphan offloaded file", str(stray))]
