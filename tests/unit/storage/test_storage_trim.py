"""ManagedLedger.trim and the ledgers' times: whole ledgers only, never the current one (BR-5, BR-9)."""

from __future__ import annotations

from pathlib import Path

from _storage_testing import NEVER_MS, TOPIC, config, payload, read_everything, run, snapshot, started

from velamq._clock import ManualClock
from velamq.storage import Position, Storage
from velamq.storage.index._storage_db import StorageDb


def indexed_ledgers(data_dir: Path) -> list[int]:
    """Ledgers the storage database has (while a Storage runs there too: WAL lets us read)."""
    db = StorageDb(data_dir / "storage.db", sync=False)
    try:
        return db.ledger_ids_of(1)  # the one managed ledger of these tests has id 1
    finally:
        db.close()


def test_trim_deletes_whole_ledgers_up_to_a_position(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=4) as storage:
            ml = await storage.open_ledger(TOPIC)
            p = [await ml.append(payload(i)) for i in range(14)]  # ledgers: 4, 4, 4, 2 (current)
            ids = [info.ledger_id for info in ml.ledgers()]
            assert len(ids) == 4
            await storage.flush()
            assert await ml.trim(Position(ids[0], 2)) == []  # the first ledger is not all <= up_to
            assert await ml.trim(p[5]) == [ids[0]]  # the second is not either
            assert [info.ledger_id for info in ml.ledgers()] == ids[1:]
            await storage.flush()  # the deletion reaches the index
            assert indexed_ledgers(tmp_path) == ids[1:]
            assert ml.entries_total == 10 and ml.first_position == p[4]
            assert ml.size_bytes == sum(info.size_bytes for info in ml.ledgers())
            # Never the current ledger, however far up_to reaches.
            assert await ml.trim(Position(ids[-1] + 5, 0)) == ids[1:3]
            assert [info.ledger_id for info in ml.ledgers()] == [ids[3]]
            assert [e.data for e in await ml.read_entries(Position(0, 0), 100)] == [payload(12), payload(13)]
            assert ml.count_entries(Position(0, 0), p[-1]) == 2
            assert ml.next_position(p[3]) == p[12]  # from a trimmed position to what is left
            assert storage.metrics()["velamq_storage_ledgers_trimmed_total"] == 3
            assert await ml.append(b"more") == Position(ids[3], 2)
        async with started(tmp_path, ledger_entries_max=4) as storage:
            got = await read_everything(storage, TOPIC)
            assert [d for _, d in got] == [payload(12), payload(13), b"more"]

    run(main())


def test_trim_of_ledgers_still_in_the_write_cache_does_not_bring_them_back(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=3, flush_interval_ms=NEVER_MS) as storage:
            ml = await storage.open_ledger(TOPIC)
            p = [await ml.append(payload(i)) for i in range(7)]
            assert storage.write_cache.active.entries == 7  # nothing flushed yet
            deleted = await ml.trim(p[5])
            assert deleted == [p[0].ledger_id, p[3].ledger_id]
            await storage.flush()
            assert indexed_ledgers(tmp_path) == [p[6].ledger_id]
            # The trimmed entries were never written: the log holds the survivor only.
            (log,) = (tmp_path / "logs").iterdir()
            assert log.stat().st_size == 32 + 28 + len(payload(6))
        async with started(tmp_path, ledger_entries_max=3) as storage:
            assert await read_everything(storage, TOPIC) == [(p[6], payload(6))]

    run(main())


def test_a_crash_after_trim_replays_nothing_of_the_trimmed_ledgers(tmp_path: Path) -> None:
    async def main() -> list[Position]:
        async with started(tmp_path / "data", ledger_entries_max=3, flush_interval_ms=NEVER_MS) as storage:
            ml = await storage.open_ledger(TOPIC)
            p = [await ml.append(payload(i)) for i in range(7)]
            await ml.trim(p[5])
            snapshot(tmp_path / "data", tmp_path / "crash")  # the journal still holds all seven
            return p

    p = run(main())

    async def check() -> None:
        async with started(tmp_path / "crash", ledger_entries_max=3) as storage:
            assert await read_everything(storage, TOPIC) == [(p[6], payload(6))]
            assert storage.recovery is not None and storage.recovery.records_orphaned == 6

    run(check())


def test_ledgers_know_when_they_were_created_and_closed_across_restarts(tmp_path: Path) -> None:
    clock = ManualClock()

    async def main() -> None:
        storage = Storage(config(tmp_path, ledger_entries_max=2), clock=clock)
        await storage.start()
        try:
            ml = await storage.open_ledger(TOPIC)
            first_created = clock.now_ms()
            for i in range(5):
                clock.advance(1)
                await ml.append(payload(i))
            infos = ml.ledgers()
            assert [(i.created_ms, i.closed_ms) for i in infos] == [
                (first_created, first_created + 3000),  # rolled by the third append
                (first_created + 3000, first_created + 5000),
                (first_created + 5000, None),
            ]
        finally:
            await storage.close()
        clock.advance(60)
        storage = Storage(config(tmp_path, ledger_entries_max=2), clock=clock)
        await storage.start()
        try:
            again = (await storage.open_ledger(TOPIC)).ledgers()
            assert again == infos  # from the index files and the current ledger's header
        finally:
            await storage.close()

    run(main())
