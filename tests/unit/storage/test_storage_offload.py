"""Offloading through Storage with the filesystem driver: asked and by threshold, the local copy
deleted after the lag, reads served from the Parquet files as if local, retention and topic
deletion removing the files, restarts (TS-1 to TS-5)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
from _offload_entries import mixed_entries, offloading
from _storage_testing import TOPIC, read_everything, run
from wait_helpers import until

from velamq.storage import ManagedLedger, OffloadConfig, Position, Storage
from velamq.storage.offload._store import topic_dir

HOUR_MS = 3_600_000


def offload_config(root: Path, **kwargs: object) -> OffloadConfig:
    kwargs.setdefault("deletion_lag_ms", HOUR_MS)
    kwargs.setdefault("check_interval_s", 3600.0)
    return OffloadConfig("filesystem", uri=str(root), **kwargs)  # type: ignore[arg-type]


def parquet_files(root: Path) -> list[Path]:
    return sorted((root / topic_dir(TOPIC)).glob("*.parquet"))


async def fill(ml: ManagedLedger, entries: list[bytes]) -> list[Position]:
    return [await ml.append(e) for e in entries]


async def offloaded(storage: Storage, ml: ManagedLedger, up_to: Position) -> None:
    assert storage.request_offload(ml, up_to)
    await until(lambda: storage.offload_status(ml.name).status != "RUNNING")
    status = storage.offload_status(ml.name)
    assert status.status == "SUCCESS", status


def test_an_asked_offload_writes_parquet_and_reads_come_back_the_same(tmp_path: Path) -> None:
    entries = mixed_entries(40)
    root = tmp_path / "tier"

    async def main() -> None:
        offload = offload_config(root, deletion_lag_ms=0)
        async with offloading(tmp_path / "d", ledger_entries_max=10, offload=offload) as st:
            ml = await st.open_ledger(TOPIC)
            positions = await fill(ml, entries)
            assert st.offload_status(TOPIC).status == "NOT_RUN"
            await offloaded(st, ml, positions[25])  # ledgers 1 and 2 of 4 are wholly before it
            infos = ml.ledgers()
            assert [i.offloaded_ms is not None for i in infos] == [True, True, False, False]
            assert st.offload_status(TOPIC).first_unoffloaded == (infos[2].ledger_id, 0)
            assert len(parquet_files(root)) == 2
            before = await read_everything(st, TOPIC)
            await st.flush()  # out of the write cache: reads of these ledgers must go to the files
            await st.check_offload()  # lag 0: the local copies go
            assert [i.local for i in ml.ledgers()] == [False, False, True, True]
            st.read_cache.clear()
            assert await read_everything(st, TOPIC) == before == list(zip(positions, entries, strict=True))
            assert st.metrics()["velamq_storage_offload_row_groups_read_total"] >= 2
            # A read in the middle of an offloaded ledger, and one across into the local ones.
            st.read_cache.clear()
            got = await ml.read_entries(positions[13], 10)
            assert [(e.position, e.data) for e in got] == list(zip(positions[13:23], entries[13:23], strict=True))
        # After a restart the marks are still there, and the reads too.
        async with offloading(tmp_path / "d", ledger_entries_max=10, offload=offload_config(root)) as st:
            ml = await st.open_ledger(TOPIC)
            assert [i.local for i in ml.ledgers()] == [False, False, True, True]
            assert await read_everything(st, TOPIC) == list(zip(positions, entries, strict=True))

    run(main())


def test_pyarrow_reads_the_files_with_no_velamq_code(tmp_path: Path) -> None:
    entries = mixed_entries(30)
    root = tmp_path / "tier"

    async def main() -> int:
        async with offloading(tmp_path / "d", ledger_entries_max=10, offload=offload_config(root)) as st:
            ml = await st.open_ledger(TOPIC)
            positions = await fill(ml, entries)
            await offloaded(st, ml, positions[-1])
            rows = 0
            for info in ml.ledgers()[:2]:
                rows += pq.read_metadata(root / topic_dir(TOPIC) / f"ledger-{info.ledger_id:020d}.parquet").num_rows
            return rows

    rows = run(main())
    dataset = ds.dataset(str(root / topic_dir(TOPIC)), format="parquet")
    table = dataset.to_table(columns=["ledger_id", "entry_id", "batch_index", "value"])
    assert table.num_rows == rows and rows >= 20
    assert sorted(set(table.column("entry_id").to_pylist())) == list(range(10))


def test_the_threshold_offloads_oldest_first_and_the_lag_keeps_local_copies(tmp_path: Path) -> None:
    from velamq._clock import ManualClock

    clock = ManualClock()
    root = tmp_path / "tier"

    async def main() -> None:
        async with offloading(tmp_path / "d", clock, ledger_entries_max=5,
                              offload=offload_config(root, threshold_bytes=0)) as storage:
            ml = await storage.open_ledger(TOPIC)
            await fill(ml, mixed_entries(17))  # 3 sealed ledgers and the current one
            await storage.check_offload()
            assert [i.offloaded_ms is not None for i in ml.ledgers()] == [True, True, True, False]
            assert all(i.local for i in ml.ledgers())  # the lag has not passed
            clock.advance(HOUR_MS / 1000 - 1)
            await storage.check_offload()
            assert all(i.local for i in ml.ledgers())
            clock.advance(1)
            await storage.check_offload()
            assert [i.local for i in ml.ledgers()] == [False, False, False, True]
            assert storage.metrics()["velamq_storage_offload_ledgers_total"] == 3

    run(main())


def test_retention_and_deletion_remove_the_offloaded_files(tmp_path: Path) -> None:
    root = tmp_path / "tier"

    async def main() -> None:
        offload = offload_config(root, deletion_lag_ms=0)
        async with offloading(tmp_path / "d", ledger_entries_max=5, offload=offload) as st:
            ml = await st.open_ledger(TOPIC)
            positions = await fill(ml, mixed_entries(16))
            await offloaded(st, ml, positions[-1])
            assert len(parquet_files(root)) == 3
            await st.check_offload()
            await ml.trim(positions[9])  # the first two ledgers
            await until(lambda: len(parquet_files(root)) == 1)
            assert len(list((root / topic_dir(TOPIC) / "_manifests").glob("*.json"))) == 1
            await st.delete_ledger(TOPIC)
            await until(lambda: not (root / topic_dir(TOPIC)).exists())

    run(main())


def test_an_offload_cut_short_leaves_the_ledger_local_and_is_done_again(tmp_path: Path) -> None:
    """What a kill -9 between the Parquet file and the mark leaves: a file, no manifest or no mark.
    The ledger stays local and readable; the next offload overwrites the file."""
    root = tmp_path / "tier"
    entries = mixed_entries(12)

    async def main() -> None:
        async with offloading(tmp_path / "d", ledger_entries_max=5, offload=offload_config(root)) as st:
            ml = await st.open_ledger(TOPIC)
            await fill(ml, entries)
        directory = root / topic_dir(TOPIC)
        directory.mkdir(parents=True)
        first = (await_ledger_ids(tmp_path / "d"))[0]
        (directory / f"ledger-{first:020d}.parquet").write_bytes(b"PAR1 torn")
        (directory / f".ledger-{first:020d}.parquet.writing").write_bytes(b"PAR1 torn")
        async with offloading(tmp_path / "d", ledger_entries_max=5,
                           offload=offload_config(root, threshold_bytes=0, deletion_lag_ms=0)) as st:
            ml = await st.open_ledger(TOPIC)
            assert all(i.offloaded_ms is None and i.local for i in ml.ledgers())
            assert [d for _, d in await read_everything(st, TOPIC)] == entries
            await st.check_offload()
            await st.check_offload()
            assert [i.local for i in ml.ledgers()] == [False, False, True]
            st.read_cache.clear()
            assert [d for _, d in await read_everything(st, TOPIC)] == entries
        assert pq.read_metadata(directory / f"ledger-{first:020d}.parquet").num_rows > 0

    run(main())


def await_ledger_ids(data_dir: Path) -> list[int]:
    from velamq.storage.index._storage_db import StorageDb

    db = StorageDb(data_dir / "storage.db", sync=False)
    try:
        return db.ledger_ids_of(1)
    finally:
        db.close()


def test_a_store_that_fails_says_so_and_local_reads_go_on(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"a file where the root should be")
    entries = mixed_entries(12)

    async def main() -> None:
        async with offloading(tmp_path / "d", ledger_entries_max=5, offload=offload_config(blocker)) as st:
            ml = await st.open_ledger(TOPIC)
            positions = await fill(ml, entries)
            assert st.request_offload(ml, positions[-1])
            await until(lambda: st.offload_status(TOPIC).status == "ERROR")
            status = st.offload_status(TOPIC)
            assert status.last_error and status.first_unoffloaded == (ml.ledgers()[0].ledger_id, 0)
            assert st.metrics()["velamq_storage_offload_errors_total"] == 1
            assert all(i.offloaded_ms is None for i in ml.ledgers())
            assert [d for _, d in await read_everything(st, TOPIC)] == entries
            assert await ml.append(b"more") is not None

    run(main())
    assert os.path.isfile(blocker)


def test_offloading_without_pyarrow_is_refused_with_what_to_install(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = f"""
import asyncio, sys
sys.modules["pyarrow"] = None  # as if it were not installed
from velamq._errors import StorageError
from velamq.broker.log._offload_rows import PulsarEntryRows
from velamq.storage import OffloadConfig, Storage, StorageConfig
config = StorageConfig({str(tmp_path)!r}, sync_policy="none", offload=OffloadConfig())
storage = Storage(config, entry_rows=PulsarEntryRows())
try:
    asyncio.run(storage.start())
except StorageError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "managedLedgerOffloadDriver=filesystem" in out.stdout and "velamq[offload]" in out.stdout, out
