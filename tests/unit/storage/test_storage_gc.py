"""The garbage collector: space of deleted topics and trimmed ledgers comes back, crash-safe at every
step, without disturbing readers, on the clock's schedule."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest
from _faulty_disk import FaultyDisk
from _storage_testing import NEVER_MS, TOPIC, config, payload, read_everything, run, snapshot, started
from wait_helpers import until

from velamq._clock import ManualClock
from velamq._errors import StorageError
from velamq.storage import Position, Storage
from velamq.storage.index._storage_db import StorageDb

SMALL = {"entry_log_bytes_max": 64 * 1024, "flush_interval_ms": NEVER_MS}


def disk_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in (data_dir / "logs").iterdir())


async def fill(storage: Storage, topics: int, per_topic: int, size: int = 1000) -> dict[str, list[bytes]]:
    """Round robin over the topics, a flush every topic round: every log holds a bit of each."""
    written: dict[str, list[bytes]] = {f"{TOPIC}-{k}": [] for k in range(topics)}
    mls = [await storage.open_ledger(name) for name in written]
    for i in range(per_topic):
        for ml in mls:
            data = payload(i, size)
            await ml.append(data)
            written[ml.name].append(data)
        await storage.flush()
    return written


def test_deleting_most_topics_then_collecting_returns_their_space(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, **SMALL) as storage:
            written = await fill(storage, 10, 40)
            before = disk_bytes(tmp_path)
            logs_before = len(list((tmp_path / "logs").iterdir()))
            assert logs_before >= 6  # 400 kB in 64 KiB logs
            for name in list(written)[1:]:
                await storage.delete_ledger(name)
            keep = next(iter(written))
            result = await storage.collect_garbage()
            assert result.logs_compacted >= logs_before - 1 and result.bytes_reclaimed > 0
            after = disk_bytes(tmp_path)
            assert after < before / 5  # one topic in ten is left
            assert len(list((tmp_path / "logs").iterdir())) <= 2
            m = storage.metrics()
            assert m["velamq_storage_gc_logs_compacted_total"] == result.logs_compacted
            assert m["velamq_storage_gc_bytes_reclaimed_total"] == result.bytes_reclaimed
            assert m["velamq_storage_entry_log_live_bytes"] == m["velamq_storage_entry_log_bytes"] - 32 * m[
                "velamq_storage_entry_logs"
            ]
            assert [d for _, d in await read_everything(storage, keep)] == written[keep]
            # A second pass finds nothing to do.
            again = await storage.collect_garbage()
            assert again.logs_compacted == 0 and again.logs_deleted == 0
        async with started(tmp_path) as storage:
            assert [d for _, d in await read_everything(storage, keep)] == written[keep]

    run(main())


def test_trimmed_ledgers_come_back_as_space_too(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=10, **SMALL) as storage:
            ml = await storage.open_ledger(TOPIC)
            positions = []
            for i in range(200):
                positions.append(await ml.append(payload(i, 1000)))
                if i % 10 == 9:
                    await storage.flush()
            before = disk_bytes(tmp_path)
            await ml.trim(positions[189])
            await storage.collect_garbage()
            assert disk_bytes(tmp_path) < before / 10
            got = await ml.read_entries(Position(0, 0), 1000)
            assert [e.position for e in got] == positions[190:]

    run(main())


def test_readers_find_runs_the_collector_moved(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, **SMALL) as storage:
            written = await fill(storage, 4, 30)
            keep = next(iter(written))
            ml = storage.open_ledgers[keep]
            start = Position(ml.first_position.ledger_id, 0) if ml.first_position else Position(0, 0)
            assert [e.data for e in await ml.read_entries(start, 5)] == written[keep][:5]  # runs cached
            for name in list(written)[1:]:
                await storage.delete_ledger(name)
            storage.read_cache.clear()
            assert (await storage.collect_garbage()).logs_compacted > 0
            # The index cache still points at logs that are gone: the read looks the runs up again.
            got = await ml.read_entries(start, 1000)
            assert [e.data for e in got] == written[keep]

    run(main())


def test_a_deletion_during_a_compaction_stays_a_deletion(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, **SMALL) as storage:
            written = await fill(storage, 4, 30)
            names = list(written)
            for name in names[2:]:
                await storage.delete_ledger(name)
            gc = storage._threads.gc
            assert gc is not None
            copied, resume = threading.Event(), threading.Event()

            def hook(step: str) -> None:
                if step == "gc-copied" and not copied.is_set():
                    copied.set()
                    resume.wait(10)

            gc.step_hook = hook
            collecting = asyncio.ensure_future(storage.collect_garbage())
            await asyncio.get_running_loop().run_in_executor(None, copied.wait, 10)
            # The copy of names[1]'s runs is written, not committed: delete it now.
            await storage.delete_ledger(names[1])
            await storage.flush()
            resume.set()
            await collecting
            gc.step_hook = None
            await storage.collect_garbage()
            assert await storage.ledger_names() == [names[0]]
            assert [d for _, d in await read_everything(storage, names[0])] == written[names[0]]
        db = StorageDb(tmp_path / "storage.db", sync=False)
        try:
            for row in db.logs():  # nothing of names[1] counts as live in the new log
                assert row.live_bytes == sum(r.size_bytes for r in db.runs_in_log(row.log_id))
        finally:
            db.close()

    run(main())


GC_STEPS = ["gc-row-deleted", "gc-copied", "gc-committed", "gc-deleted"]


def test_a_crash_at_every_step_of_a_collection_loses_nothing_and_leaves_no_garbage(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    crashes: list[tuple[str, Path]] = []
    written: dict[str, list[bytes]] = {}

    async def main() -> None:
        async with started(data_dir, **SMALL) as storage:
            written.update(await fill(storage, 6, 30))
            # One log with nothing live (deleted whole), the others sparse (compacted).
            mls = [storage.open_ledgers[n] for n in written]
            only = await storage.open_ledger(TOPIC + "-alone")
            for i in range(70):
                await only.append(payload(i, 1000))
            await storage.flush()
            await storage.delete_ledger(only.name)
            for name in list(written)[2:]:
                await storage.delete_ledger(name)
                del written[name]
            assert mls
            gc = storage._threads.gc
            assert gc is not None

            def hook(step: str) -> None:
                crash = tmp_path / f"crash-{len(crashes)}-{step}"
                snapshot(data_dir, crash)
                crashes.append((step, crash))

            gc.step_hook = hook
            await storage.collect_garbage()
            gc.step_hook = None

    run(main())
    assert {s for s, _ in crashes} == set(GC_STEPS)

    for step, crash in crashes:

        async def check(crash: Path = crash, step: str = step) -> None:
            async with started(crash) as storage:
                assert await storage.ledger_names() == sorted(written), step
                for name, datas in written.items():
                    assert [d for _, d in await read_everything(storage, name)] == datas, (step, name)
                await storage.collect_garbage()  # finishes what the crash interrupted
            db = StorageDb(crash / "storage.db", sync=False)
            try:
                rows = {row.log_id for row in db.logs()}
                files = {int(p.stem) for p in (crash / "logs").iterdir()}
                assert rows == files, step  # no stray log, no missing one
                live = sum(row.live_bytes for row in db.logs())
                assert live == sum(28 * len(d) + sum(map(len, d)) for d in written.values()), step
            finally:
                db.close()

        run(check())


def test_collection_runs_on_the_clock(tmp_path: Path) -> None:
    clock = ManualClock()

    async def main() -> None:
        settings = dict(SMALL, gc_interval_s=10.0, gc_minor_interval_s=60.0, gc_major_interval_s=600.0)
        storage = Storage(config(tmp_path, **settings), clock=clock)
        await storage.start()
        try:
            written = await fill(storage, 5, 30)
            for name in list(written)[1:]:
                await storage.delete_ledger(name)
            await storage.flush()
            m = storage.metrics
            clock.advance(10)  # a pass that only deletes empty logs: none is empty
            await until(lambda: m()["velamq_storage_gc_runs_total"] == 1, "the first pass ran")
            assert m()["velamq_storage_gc_logs_compacted_total"] == 0
            for k in range(5):  # a minor compaction comes at 60 s: logs under 20 % live go
                clock.advance(10)
                await until(lambda k=k: m()["velamq_storage_gc_runs_total"] == 2 + k, "the next pass ran")
            assert m()["velamq_storage_gc_logs_compacted_total"] > 0
            keep = next(iter(written))
            assert [d for _, d in await read_everything(storage, keep)] == written[keep]
        finally:
            await storage.close()

    run(main())


def test_a_collection_on_a_full_disk_fails_with_one_line_and_the_next_pass_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ENOSPC is expected while the disk is full: the collector says so in one line, without a
    traceback, and a later pass (once there is room) compacts as usual."""
    disk = FaultyDisk(tmp_path / "logs")

    async def main() -> None:
        async with started(tmp_path, **SMALL) as storage:
            written = await fill(storage, 4, 30)
            keep, *doomed = written
            for name in doomed:
                await storage.delete_ledger(name)
            await storage.flush()
            with disk.installed(monkeypatch), caplog.at_level(logging.INFO, logger="velamq.storage"):
                disk.no_space()
                with pytest.raises(StorageError):
                    await storage.collect_garbage()
                assert disk.failed_writes > 0
                said = [r for r in caplog.records if "garbage" in r.getMessage()]
                assert len(said) == 1, [r.getMessage() for r in said]
                assert said[0].levelno == logging.WARNING and said[0].exc_info is None
                assert "disk is full" in said[0].getMessage() and "tries again" in said[0].getMessage()
                disk.heal()
                assert (await storage.collect_garbage()).logs_compacted > 0
            assert [d for _, d in await read_everything(storage, keep)] == written[keep]

    run(main())
