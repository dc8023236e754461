"""ShardedStorage: a whole Storage per shard (namespace bundle) behind one LedgerStore.

Routing of many ledgers to their shards and back after a restart, one opening for concurrent
first uses, close_shard (its lock released, its data and cursors persisted), the lock waited for,
the memory shared under one budget, the figures combined. Cross-process waits and kill -9 are in
tests/integration/test_storage_sharded_crash.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _sharded_testing import shard_of, started_sharded
from _storage_testing import config, payload, run, started
from hypothesis import given, settings
from hypothesis import strategies as st
from wait_helpers import until

from velamq._errors import StorageError
from velamq.storage import Position, ShardedStorage, Storage
from velamq.storage._layout import LOCK_FILE
from velamq.storage._shard_layout import BUNDLES_DIR, SHARD_ID_FILE, ledger_id_bits, shard_dirs
from velamq.storage._sharded_metrics import combine_metrics

MIB = 1024 * 1024


def names(n: int) -> list[str]:
    return [f"persistent://tenant/ns/topic-{i}" for i in range(n)]


async def read_all(storage: Storage | object, name: str) -> list[bytes]:
    ml = await storage.open_ledger(name)  # type: ignore[attr-defined]
    return [e.data for e in await ml.read_entries(Position(0, 0), 1_000_000)]


def test_ledgers_route_to_their_shards_and_are_all_there_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    topics = names(40)
    route = shard_of(4)

    async def write() -> dict[str, list[int]]:
        async with started_sharded(data, 4) as storage:
            ledger_ids: dict[str, list[int]] = {}
            for k, name in enumerate(topics):
                ml = await storage.open_ledger(name)
                positions = [await ml.append(payload(k * 100 + i)) for i in range(1 + k % 5)]
                ledger_ids[name] = [p.ledger_id for p in positions]
            assert storage.open_shards() == sorted({route(n) for n in topics})
            assert set(storage.open_ledgers) == set(topics)
            return ledger_ids

    ledger_ids = run(write())
    # Each shard is a data directory of its own, numbered; its ledger ids start at its number << 40.
    found = shard_dirs(data)
    assert [key for key, _ in found] == sorted({route(n) for n in topics})
    numbers = {key: int((path / SHARD_ID_FILE).read_text()) for key, path in found}
    assert len(set(numbers.values())) == len(numbers)
    for name, ids in ledger_ids.items():
        assert {i >> ledger_id_bits for i in ids} == {numbers[route(name)]}

    async def check() -> None:
        async with started_sharded(data, 4) as storage:
            assert storage.open_shards() == []  # nothing opens before its first use
            for k, name in enumerate(topics):
                assert await read_all(storage, name) == [payload(k * 100 + i) for i in range(1 + k % 5)]
            assert await storage.ledger_names(limit=1000) == sorted(topics)
            assert await storage.ledger_names(topics[3], 5) == sorted(topics)[sorted(topics).index(topics[3]) + 1 :][:5]
        # Each shard's directory holds exactly its own ledgers, as a plain Storage sees it.
        for key, path in found:
            async with started(path) as plain:
                assert await plain.ledger_names(limit=1000) == sorted(n for n in topics if route(n) == key)

    run(check())


def test_concurrent_first_uses_of_a_shard_share_one_opening(tmp_path: Path) -> None:
    async def main() -> None:
        async with started_sharded(tmp_path / "data", 1) as storage:
            mls = await asyncio.gather(*(storage.open_ledger(n) for n in names(30)))
            assert storage.open_shards() == ["tenant/ns/0x00000000"]
            assert len({id(ml) for ml in mls}) == 30
            assert storage.metrics()["velamq_storage_shards_open"] == 1
            assert all(await asyncio.gather(*(storage.ledger_exists(n) for n in names(30))))

    run(main())


def test_close_shard_persists_it_and_releases_its_lock(tmp_path: Path) -> None:
    data = tmp_path / "data"
    route = shard_of(2)
    topics = names(12)
    closing = route(topics[0])
    other = next(n for n in topics if route(n) != closing)

    async def main() -> None:
        async with started_sharded(data, 2) as storage:
            for name in topics:
                ml = await storage.open_ledger(name)
                for i in range(3):
                    ml.append_nowait(payload(i))  # not awaited: close_shard completes them
                cursor = await ml.open_cursor("sub", "earliest")
            ml = await storage.open_ledger(topics[0])
            await ml.appends_settled()
            first = (await ml.read_entries(Position(0, 0), 1))[0].position
            cursor = ml.cursors["sub"]
            cursor.ack_cumulative(first)
            await storage.close_shard(closing)
            assert storage.open_shards() == [route(other)]
            assert ml.closing_or_closed is not None
            # Another Storage can open the shard's directory now; everything is there.
            async with started(storage.shard_dir(closing)) as plain:
                for name in (n for n in topics if route(n) == closing):
                    assert await read_all(plain, name) == [payload(i) for i in range(3)]
                reopened = await plain.open_ledger(topics[0])
                assert reopened.cursors["sub"].mark_delete_position == first
            # The other shard stayed open all along; a later use opens the closed one again.
            assert await read_all(storage, other) == [payload(i) for i in range(3)]
            assert await read_all(storage, topics[0]) == [payload(i) for i in range(3)]
            assert storage.open_shards() == sorted({closing, route(other)})

    run(main())


def test_opening_a_shard_someone_holds_waits_for_it_then_fails_clearly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    key = shard_of(1)("x")

    async def main() -> None:
        async with started_sharded(data, 1, lock_wait_s=0.2) as storage:
            async with started(storage.shard_dir(key)):  # the previous owner has not closed it
                with pytest.raises(StorageError, match=r"in use by another Storage after waiting 0\.2 s"):
                    await storage.open_ledger("persistent://tenant/ns/t")
                assert storage.open_shards() == []
            # Released: the next use opens it.
            await storage.open_ledger("persistent://tenant/ns/t")
            assert storage.open_shards() == [key]

    run(main())


def _descriptors_of(path: Path) -> int:
    """How many open descriptors of this process point at `path`."""
    fds = Path("/proc/self/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += fd.readlink() == path
        except OSError:  # closed meanwhile
            continue
    return count


def test_a_shard_released_while_it_is_waited_for_opens(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def main() -> None:
        async with started_sharded(data, 1) as storage:
            holder = Storage(config(storage.shard_dir(shard_of(1)("x"))))
            await holder.start()
            ml = await holder.open_ledger("persistent://tenant/ns/t")
            await ml.append(b"by the previous owner")
            lock = storage.shard_dir(shard_of(1)("x")) / LOCK_FILE
            opening = asyncio.ensure_future(storage.open_ledger("persistent://tenant/ns/t"))
            # It cannot open while the holder runs: once it is trying the lock (a second descriptor of
            # the lock file in this process), it is still waiting; the holder closes, and then it opens.
            await until(lambda: _descriptors_of(lock) >= 2, "the opening trying the shard's lock")
            assert not opening.done()
            await holder.close()
            opened = await opening
            assert [e.data for e in await opened.read_entries(Position(0, 0), 10)] == [b"by the previous owner"]

    run(main())


def test_shards_share_one_budget(tmp_path: Path) -> None:
    async def main() -> None:
        async with started_sharded(tmp_path / "data", 8, memory_bytes=64 * MIB) as storage:
            budget = storage.memory_budget
            assert budget.total_bytes == 64 * MIB
            topics = names(40)
            for name in topics:
                ml = await storage.open_ledger(name)
                await ml.open_cursor("sub", "earliest")  # an active cursor: entries go to the tail cache
                await ml.append(payload(0, 1000))
            shards = [await storage.open_shard(k) for k in storage.open_shards()]
            assert len(shards) == 8
            # One publish buffer and one tail, read and index cache for all shards.
            assert all(s.publish_buffer is storage.publish_buffer for s in shards)
            assert len({id(s.tail_cache) for s in shards}) == 1
            assert len({id(s.read_cache) for s in shards}) == 1
            # The write caches share the write cache budget.
            assert sum(s.write_cache.bytes_max for s in shards) <= budget.write_cache_bytes
            assert all(s.write_cache.bytes_max == budget.write_cache_bytes // 8 for s in shards)
            tail = shards[0].tail_cache
            assert len(tail) == 40
            # A closed shard's entries leave the shared caches; the others' write caches grow back.
            closed = storage.open_shards()[0]
            in_closed = [n for n in topics if shard_of(8)(n) == closed]
            await storage.close_shard(closed)
            assert len(tail) == 40 - len(in_closed)
            assert all(s.write_cache.bytes_max == budget.write_cache_bytes // 7 for s in shards[1:])

    run(main())


def test_figures_add_up_over_the_shards(tmp_path: Path) -> None:
    async def main() -> None:
        async with started_sharded(tmp_path / "data", 3) as storage:
            empty = storage.metrics()
            assert empty["velamq_storage_shards_open"] == 0 and empty["velamq_storage_writable"] == 1
            topics = names(20)
            for name in topics:
                ml = await storage.open_ledger(name)
                for i in range(5):
                    await ml.append(payload(i))
            await storage.flush()
            figures = storage.metrics()
            assert figures["velamq_storage_shards_open"] == 3
            assert figures["velamq_storage_journal_appends_total"] == 100
            assert figures["velamq_storage_appends_total"] == 100
            assert figures["velamq_storage_open_ledgers"] == 20
            assert figures["velamq_storage_flush_entries_total"] == 100
            assert figures["velamq_storage_writable"] == 1
            assert figures["velamq_storage_memory_budget_bytes"] == storage.memory_budget.total_bytes
            fsyncs = figures["velamq_storage_journal_fsyncs_total"]
            assert figures["velamq_storage_journal_entries_per_fsync"] == (100 / fsyncs if fsyncs else 0)
            assert storage.writable and storage.write_failure is None
            gc = await storage.collect_garbage()
            assert len(gc.logs) == 3  # one entry log a shard

    run(main())


def test_bad_shard_keys_are_refused_clearly(tmp_path: Path) -> None:
    async def main() -> None:
        for key in ("", "/abs", "a/../b", "a//b", "LOCK", "./x"):
            storage = ShardedStorage(config(tmp_path / "data"), shard_of=lambda name, key=key: key)
            await storage.start()
            try:
                with pytest.raises(StorageError, match="shard key"):
                    await storage.open_ledger("persistent://tenant/ns/t")
            finally:
                await storage.close()
        assert not (tmp_path / "data" / BUNDLES_DIR / "LOCK").is_dir()

    run(main())


@settings(max_examples=8, deadline=None)
@given(
    shards=st.integers(1, 5),
    plan=st.lists(st.tuples(st.integers(0, 15), st.integers(1, 4), st.booleans()), min_size=1, max_size=25),
)
def test_any_history_of_appends_and_shard_closes_keeps_every_entry(
    tmp_path_factory: pytest.TempPathFactory, shards: int, plan: list[tuple[int, int, bool]]
) -> None:
    """Appends to random topics, with the shard of each step closed or not after it; then a
    restart: every topic reads back exactly what was appended, in order."""
    data = tmp_path_factory.mktemp("sharded") / "data"
    route = shard_of(shards)
    expected: dict[str, list[bytes]] = {}

    async def main() -> None:
        async with started_sharded(data, shards) as storage:
            for step, (topic, count, close_after) in enumerate(plan):
                name = f"persistent://tenant/ns/h-{topic}"
                ml = await storage.open_ledger(name)
                for i in range(count):
                    entry = payload(step * 10 + i)
                    await ml.append(entry)
                    expected.setdefault(name, []).append(entry)
                if close_after:
                    await storage.close_shard(route(name))
        async with started_sharded(data, shards) as storage:
            for name, entries in expected.items():
                assert await read_all(storage, name) == entries

    run(main())


def test_a_failed_opening_gives_its_share_back_and_the_next_use_tries_again(tmp_path: Path) -> None:
    async def main() -> None:
        async with started_sharded(tmp_path / "data", 2) as storage:
            route = shard_of(2)
            name = "persistent://tenant/ns/a"
            other = next(n for n in names(20) if route(n) != route(name))
            await storage.open_ledger(other)
            broken = storage.shard_dir(route(name)) / "storage.db"
            broken.mkdir(parents=True)  # a directory where the database should be: the start fails
            with pytest.raises(StorageError):
                await storage.open_ledger(name)
            assert storage.open_shards() == [route(other)]
            budget = storage.memory_budget.write_cache_bytes
            assert (await storage.open_shard(route(other))).write_cache.bytes_max == budget
            broken.rmdir()
            await (await storage.open_ledger(name)).append(b"x")
            assert storage.open_shards() == sorted({route(name), route(other)})
            assert (await storage.open_shard(route(other))).write_cache.bytes_max == budget // 2

    run(main())


def test_figures_combine_as_documented() -> None:
    p = "velamq_storage_"
    shard_a = {p + "journal_appends_total": 10.0, p + "journal_fsyncs_total": 2.0,
               p + "journal_fsync_seconds_total": 0.2,
               p + "journal_fsync_seconds_max": 0.15, p + "journal_fsync_seconds_avg": 0.1, p + "writable": 1.0,
               p + "journal_entries_per_fsync": 5.0, p + "write_cache_bytes_max": 100.0, p + "failed": 0.0,
               p + "tail_cache_bytes": 7.0}
    shard_b = {p + "journal_appends_total": 30.0, p + "journal_fsyncs_total": 2.0,
               p + "journal_fsync_seconds_total": 0.6,
               p + "journal_fsync_seconds_max": 0.4, p + "journal_fsync_seconds_avg": 0.3, p + "writable": 0.0,
               p + "journal_entries_per_fsync": 15.0, p + "write_cache_bytes_max": 100.0, p + "failed": 1.0,
               p + "tail_cache_bytes": 7.0}
    out = combine_metrics([shard_a, shard_b], {p + "tail_cache_bytes": 7.0})
    assert out[p + "journal_appends_total"] == 40 and out[p + "write_cache_bytes_max"] == 200  # sums
    assert out[p + "journal_fsync_seconds_max"] == 0.4 and out[p + "failed"] == 1  # the worst shard
    assert out[p + "writable"] == 0  # any shard not writable
    assert out[p + "journal_fsync_seconds_avg"] == pytest.approx(0.2)  # computed again: 0.8 s / 4
    assert out[p + "journal_entries_per_fsync"] == 10  # 40 / 4
    assert out[p + "tail_cache_bytes"] == 7  # shared: once
    assert out[p + "shards_open"] == 2
