"""Managed ledger: append, read, rollover, positions, find_first, group commit (ME-6)."""

from __future__ import annotations

import asyncio
import functools
import os
import struct
from pathlib import Path

import pytest
from _storage_testing import TOPIC, payload, run, started

from velamq import LedgerClosedError, StorageError
from velamq.storage import Entry, Position, Storage, StorageConfig


def test_entry_ids_are_dense_from_zero_and_roll_over_by_entries(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=4) as storage:
            ml = await storage.open_ledger(TOPIC)
            assert ml.last_confirmed is None and ml.first_position is None
            first_ledger = ml.current_ledger_id
            positions = [await ml.append(payload(i)) for i in range(10)]
            ids = sorted({p.ledger_id for p in positions})
            assert ids[0] == first_ledger and len(ids) == 3
            assert ids == sorted(ids) and len(set(ids)) == 3
            assert [p.entry_id for p in positions] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
            assert positions == sorted(positions)
            assert [(info.ledger_id, info.entries, info.size_bytes) for info in ml.ledgers()] == [
                (ids[0], 4, sum(28 + len(payload(i)) for i in range(4))),
                (ids[1], 4, sum(28 + len(payload(i)) for i in range(4, 8))),
                (ids[2], 2, sum(28 + len(payload(i)) for i in range(8, 10))),
            ]
            infos = ml.ledgers()
            assert all(info.created_ms > 0 for info in infos)
            assert [info.closed_ms is None for info in infos] == [False, False, True]  # the current one is open
            assert all(i.created_ms <= i.closed_ms for i in infos[:2] if i.closed_ms is not None)
            assert ml.entries_total == 10
            assert ml.size_bytes == sum(info.size_bytes for info in ml.ledgers())
            assert ml.first_position == Position(ids[0], 0)
            assert ml.last_confirmed == positions[-1]
            assert ml.current_ledger_id == ids[2]
            # Every entry comes back, in order, from any start, across ledgers.
            entries = await ml.read_entries(Position(ids[0], -1), 100)
            assert entries == [Entry(p, payload(i)) for i, p in enumerate(positions)]
            for k in range(10):
                got = await ml.read_entries(positions[k], 3)
                assert [e.position for e in got] == positions[k : k + 3]
            assert await ml.read_entries(ml.next_position(positions[-1]), 10) == []
            assert storage.metrics()["velamq_storage_ledgers_rolled_total"] == 2

    run(main())


def test_rolls_over_by_bytes(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, ledger_bytes_max=1000) as storage:
            ml = await storage.open_ledger(TOPIC)
            positions = [await ml.append(payload(i, 300)) for i in range(7)]
            # 328 bytes per record: the fourth starts at 984 < 1000, so 4 fit; then 3.
            assert [p.entry_id for p in positions] == [0, 1, 2, 3, 0, 1, 2]
            assert len(ml.ledgers()) == 2

    run(main())


def test_next_position_and_count_entries_at_ledger_boundaries(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=3) as storage:
            ml = await storage.open_ledger(TOPIC)
            l1 = ml.current_ledger_id
            positions = [await ml.append(payload(i)) for i in range(7)]
            l2, l3 = positions[3].ledger_id, positions[6].ledger_id
            assert ml.next_position(Position(l1, -1)) == Position(l1, 0)
            assert ml.next_position(Position(l1, 1)) == Position(l1, 2)
            assert ml.next_position(Position(l1, 2)) == Position(l2, 0)  # crosses into the next ledger
            assert ml.next_position(Position(l2, 2)) == Position(l3, 0)
            assert ml.next_position(Position(l3, 0)) == Position(l3, 1)  # newest: (current, last + 1)
            for i in range(6):
                assert ml.next_position(positions[i]) == positions[i + 1]

            everything = Position(l1, -1)
            assert ml.count_entries(everything, positions[-1]) == 7
            assert ml.count_entries(everything, Position(l1, 2)) == 3
            assert ml.count_entries(Position(l1, 2), Position(l2, 2)) == 3
            assert ml.count_entries(Position(l1, 1), Position(l3, 0)) == 5
            assert ml.count_entries(positions[3], positions[3]) == 0
            assert ml.count_entries(positions[4], positions[2]) == 0
            # Positions past the end count only what exists.
            assert ml.count_entries(everything, Position(l3, 99)) == 7
            assert ml.count_entries(Position(0, 0), Position(l2 + 100, 0)) == 7
            # A read may start at the position after a ledger's last entry.
            assert [e.position for e in await ml.read_entries(Position(l1, 3), 2)] == positions[3:5]

    run(main())


def published_at_or_after(t: int, data: bytes) -> bool:
    return int.from_bytes(data[:4], "big") >= t


def test_find_first_binary_search(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=7) as storage:
            ml = await storage.open_ledger(TOPIC)
            assert await ml.find_first(lambda data: True) is None
            # Entries carry an increasing "publish time"; seek finds the first at or after t.
            positions = [await ml.append(i.to_bytes(4, "big") + b"x") for i in range(0, 100, 2)]
            for t in range(-1, 101):
                expected = next((p for i, p in zip(range(0, 100, 2), positions, strict=True) if i >= t), None)
                got = await ml.find_first(functools.partial(published_at_or_after, t))
                assert got == expected, t

    run(main())


def test_reads_come_from_memory_at_the_tail_and_from_files_behind_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            positions = [await ml.append(payload(i)) for i in range(50)]
            before = storage.metrics()
            assert [e.data for e in await ml.read_entries(positions[40], 10)] == [payload(i) for i in range(40, 50)]
            after = storage.metrics()
            assert (
                after["velamq_storage_read_entries_cache_total"] - before["velamq_storage_read_entries_cache_total"]
                == 10
            )
            assert after["velamq_storage_read_entries_disk_total"] == before["velamq_storage_read_entries_disk_total"]
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            # After a restart every entry is in its file: one read, the rest comes by read-ahead.
            assert [e.data for e in await ml.read_entries(positions[0], 10)] == [payload(i) for i in range(10)]
            assert len(await ml.read_entries(positions[10], 100)) == 40
            metrics = storage.metrics()
            assert metrics["velamq_storage_read_entries_disk_total"] == 10
            assert metrics["velamq_storage_read_cache_hits_total"] == 40
            assert metrics["velamq_storage_ledger_file_reads_total"] == 1

    run(main())


def test_large_entries_overflow_the_caches_and_are_read_from_files(tmp_path: Path) -> None:
    async def main() -> None:
        budget = {"tail_cache_bytes": 3_000_000, "read_cache_bytes": 0, "write_cache_bytes": 4_000_000}
        async with started(tmp_path, ledger_entries_max=5, **budget) as storage:
            ml = await storage.open_ledger(TOPIC)
            await ml.open_cursor("sub", "latest")  # an active cursor: new entries go to the tail cache
            big = [payload(i, 700_000) for i in range(12)]  # > the tail cache and the write cache
            positions = [await ml.append(b) for b in big]
            await storage.flush()
            entries = await ml.read_entries(positions[0], 100)
            assert [e.data for e in entries] == big
            metrics = storage.metrics()
            assert metrics["velamq_storage_read_entries_disk_total"] > 0
            assert metrics["velamq_storage_read_entries_cache_total"] > 0
            assert metrics["velamq_storage_tail_cache_evictions_total"] > 0
            assert metrics["velamq_storage_tail_cache_bytes"] <= 3_000_000

    run(main())


def test_group_commit_many_concurrent_appends_few_fsyncs(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, sync_policy="fsync") as storage:
            mls = [await storage.open_ledger(f"{TOPIC}-{k}") for k in range(4)]
            base = storage.metrics()
            n = 2000
            results = await asyncio.gather(*(mls[i % 4].append(payload(i)) for i in range(n)))
            metrics = storage.metrics()
            appends = metrics["velamq_storage_appends_total"] - base["velamq_storage_appends_total"]
            fsyncs = metrics["velamq_storage_fsyncs_total"] - base["velamq_storage_fsyncs_total"]
            assert appends == n
            assert 1 <= fsyncs < n / 10, fsyncs  # one journal, one fsync per group, all 4 topics in it
            assert metrics["velamq_storage_entries_per_fsync"] >= 10
            # Positions follow call order within each topic.
            for k in range(4):
                mine = [p for i, p in enumerate(results) if i % 4 == k]
                assert [p.entry_id for p in mine] == list(range(n // 4))
            assert metrics["velamq_storage_bytes_written_total"] >= sum(28 + len(payload(i)) for i in range(n))
            assert metrics["velamq_storage_open_ledgers"] == 4

    run(main())


def test_append_resolves_only_when_durable(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, sync_policy="fsync") as storage:
            ml = await storage.open_ledger(TOPIC)
            task = asyncio.ensure_future(ml.append(b"one"))
            await asyncio.sleep(0)  # the position is taken, the writer has not answered yet
            assert ml.last_confirmed is None
            assert await ml.read_entries(Position(ml.current_ledger_id, 0), 1) == []
            pos = await task
            assert ml.last_confirmed == pos
            # Durable in the journal: the last record (after the records that created the topic's
            # log and its ledger) is a 28-byte record header and the entry ...
            (segment,) = (tmp_path / "journal").glob("*.wal")
            assert segment.read_bytes()[-3:] == b"one"
            assert struct.unpack_from("<IIQQ", segment.read_bytes(), os.path.getsize(segment) - 31)[2:] == pos
            # ... and in a shared entry log (a 32-byte header, the same record) once flushed.
            assert list((tmp_path / "logs").iterdir()) == []
            await storage.flush()
            (log,) = (tmp_path / "logs").iterdir()
            assert os.path.getsize(log) == 32 + 28 + 3 and log.read_bytes()[-3:] == b"one"

    run(main())


def test_open_ledger_returns_the_same_object_and_names_survive(tmp_path: Path) -> None:
    names = [
        TOPIC,
        "persistent://t/ns/a.b",
        "persistent://public/default/" + "x" * 400,
        "non-persistent://é/ñ/..",
        "..",
    ]

    async def main() -> None:
        async with started(tmp_path) as storage:
            first = await asyncio.gather(*(storage.open_ledger(n) for n in names))
            again = await asyncio.gather(*(storage.open_ledger(n) for n in names))
            assert all(a is b for a, b in zip(first, again, strict=True))
            assert len({ml.current_ledger_id for ml in first}) == len(names)  # unique ids
            for ml in first:
                await ml.append(ml.name.encode())
            assert await storage.ledger_names() == sorted(names)
        async with started(tmp_path) as storage:
            assert await storage.ledger_names() == sorted(names)
            assert await storage.ledger_names(after=sorted(names)[1], limit=2) == sorted(names)[2:4]
            assert all([await storage.ledger_exists(n) for n in names])
            assert not await storage.ledger_exists(TOPIC + "-not")
            for n in names:
                ml = await storage.open_ledger(n)
                assert [e.data for e in await ml.read_entries(Position(0, 0), 5)] == [n.encode()]

    run(main())


def test_delete_ledger_removes_it_and_ids_are_never_reused(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            old = await ml.append(b"old")
            await ml.open_cursor("sub", "earliest")
            await storage.delete_ledger(TOPIC)
            assert await storage.ledger_names() == [] and not await storage.ledger_exists(TOPIC)
            with pytest.raises(LedgerClosedError):
                await ml.append(b"x")
            await storage.delete_ledger("persistent://public/default/never-existed")
        async with started(tmp_path) as storage:
            assert await storage.ledger_names() == [] and not await storage.ledger_exists(TOPIC)
            ml = await storage.open_ledger(TOPIC)
            assert ml.last_confirmed is None and ml.cursors == {}
            assert (await ml.append(b"new")).ledger_id > old.ledger_id

    run(main())


def test_closed_ledger_refuses_work_and_storage_reopens_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            pending = [asyncio.ensure_future(ml.append(payload(i))) for i in range(20)]
            await asyncio.sleep(0)
            await ml.close()  # appends already in flight still complete
            assert [p.entry_id for p in await asyncio.gather(*pending)] == list(range(20))
            with pytest.raises(LedgerClosedError):
                await ml.append(b"x")
            with pytest.raises(LedgerClosedError):
                await ml.read_entries(Position(0, 0), 1)
            await ml.close()  # idempotent
            assert storage.metrics()["velamq_storage_open_ledgers"] == 0
            reopened = await storage.open_ledger(TOPIC)
            assert reopened is not ml
            assert reopened.entries_total == 20
            assert (await reopened.append(b"x")).entry_id == 20

    run(main())


def test_refuses_empty_entries_and_unstarted_storage(tmp_path: Path) -> None:
    async def main() -> None:
        storage = Storage(StorageConfig(tmp_path))
        with pytest.raises(StorageError):
            await storage.open_ledger(TOPIC)
        await storage.start()
        try:
            ml = await storage.open_ledger(TOPIC)
            with pytest.raises(ValueError):
                await ml.append(b"")
            assert (await ml.append(bytearray(b"ab"))).entry_id == 0  # type: ignore[arg-type]
            with pytest.raises(StorageError):  # one Storage per data directory
                other = Storage(StorageConfig(tmp_path))
                await other.start()
        finally:
            await storage.close()

    run(main())


def test_config_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        StorageConfig(tmp_path, sync_policy="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        StorageConfig(tmp_path, ledger_entries_max=0)


def test_a_failed_write_fails_its_appends_and_the_log_goes_on_in_a_new_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            good = await ml.append(b"before")

            def disk_full(fd: int, buffers: list[bytes]) -> int:
                raise OSError(28, "No space left on device")

            with monkeypatch.context() as patch:
                patch.setattr(os, "writev", disk_full)
                with pytest.raises(StorageError, match="No space left"):
                    await ml.append(b"lost")
                assert not storage.writable
            # Nothing latched: the failed ledger ends at its durable entries (no hole), the next
            # append starts a new ledger.
            after = await ml.append(b"after")
            assert after.ledger_id > good.ledger_id and after.entry_id == 0
            assert ml.ledgers()[0].entries == 1
            assert [e.data for e in await ml.read_entries(good, 10)] == [b"before", b"after"]
            await ml.close()
            ml = await storage.open_ledger(TOPIC)  # what the database has is the same
            assert [(e.position, e.data) for e in await ml.read_entries(good, 10)] == [
                (good, b"before"),
                (after, b"after"),
            ]
            assert storage.writable

    run(main())


def test_public_api_is_pinned() -> None:
    import velamq.storage

    assert sorted(velamq.storage.__all__) == [
        "CursorOwner",
        "Entry",
        "EntryRows",
        "LedgerInfo",
        "LedgerStore",
        "ManagedCursor",
        "ManagedLedger",
        "MemoryBudget",
        "OffloadConfig",
        "OffloadPolicy",
        "OffloadStatus",
        "PolicySource",
        "Position",
        "PublishBuffer",
        "RangeSet",
        "RowColumns",
        "ShardedStorage",
        "Storage",
        "StorageConfig",
    ]
