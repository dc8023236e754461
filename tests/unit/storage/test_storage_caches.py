"""Tail cache, write cache and read-ahead cache: who serves which read (ME-3, ME-4, ME-5, ME-7, BR-10)."""

from __future__ import annotations

from pathlib import Path

from _storage_testing import NEVER_MS, TOPIC, payload, run, started
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from velamq.storage import Position
from velamq.storage._caches import ByteLRU


class ByteLRUMachine(RuleBasedStateMachine):
    """ByteLRU against a list kept in recency order."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: ByteLRU[int, bytes] = ByteLRU("t", 1000, len)
        self.model: list[tuple[int, bytes]] = []  # least recently used first

    def _model_evict(self) -> None:
        while sum(len(v) for _, v in self.model) > 1000:
            self.model.pop(0)

    @rule(key=st.integers(0, 30), size=st.integers(1, 1200))
    def put(self, key: int, size: int) -> None:
        value = bytes([key % 256]) * size
        self.cache.put(key, value)
        if size > 1000:
            return  # larger than the budget: not cached (the old value stays)
        self.model = [(k, v) for k, v in self.model if k != key] + [(key, value)]
        self._model_evict()

    @rule(key=st.integers(0, 30))
    def get(self, key: int) -> None:
        found = [v for k, v in self.model if k == key]
        assert self.cache.get(key) == (found[0] if found else None)
        if found:
            self.model = [(k, v) for k, v in self.model if k != key] + [(key, found[0])]

    @rule(key=st.integers(0, 30))
    def pop(self, key: int) -> None:
        found = [v for k, v in self.model if k == key]
        assert self.cache.pop(key) == (found[0] if found else None)
        self.model = [(k, v) for k, v in self.model if k != key]

    @invariant()
    def same_content_within_budget(self) -> None:
        assert self.cache.size_bytes == sum(len(v) for _, v in self.model) <= 1000
        assert len(self.cache) == len(self.model)
        for k, v in self.model:
            assert self.cache.peek(k) == v


TestByteLRU = ByteLRUMachine.TestCase
TestByteLRU.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)


@given(st.lists(st.integers(1, 100), min_size=1, max_size=200))
def test_eviction_is_one_item_at_a_time_never_a_segment(sizes: list[int]) -> None:
    """BR-10: an insert evicts only as many of the oldest items as it needs room for."""
    cache: ByteLRU[int, bytes] = ByteLRU("t", 500, len)
    for i, size in enumerate(sizes):
        before = len(cache)
        evictions = cache.stats.evictions_total
        cache.put(i, b"x" * size)
        evicted = cache.stats.evictions_total - evictions
        assert len(cache) == before + 1 - evicted
        assert cache.size_bytes <= 500
        assert cache.size_bytes + 100 > 500 or evicted == 0  # no eviction while there was room
        assert evicted <= size  # at most one item per byte needed (items are >= 1 byte)


def test_tail_reads_of_a_consumer_that_keeps_up_never_touch_the_files(tmp_path: Path) -> None:
    """ME-7, scenario 1: with an active cursor every entry is served from the tail cache."""

    async def main() -> None:
        async with started(tmp_path, write_cache_bytes=200_000) as storage:
            ml = await storage.open_ledger(TOPIC)
            await ml.open_cursor("sub", "latest")
            read_from = ml.next_position(ml.last_confirmed or Position(ml.current_ledger_id, -1))
            got = []
            for i in range(2000):
                await ml.append(payload(i, 200))
                if i % 10 == 9:  # the consumer keeps up: it reads what is new every few appends
                    entries = await ml.read_entries(read_from, 100)
                    got += [e.data for e in entries]
                    read_from = ml.next_position(entries[-1].position)
            assert got == [payload(i, 200) for i in range(2000)]
            m = storage.metrics()
            assert m["velamq_storage_flushes_total"] >= 2  # the write cache rolled over meanwhile
            assert m["velamq_storage_read_entries_disk_total"] == 0
            assert m["velamq_storage_ledger_file_reads_total"] == 0
            assert m["velamq_storage_tail_cache_hits_total"] == 2000
            assert m["velamq_storage_write_cache_hits_total"] == 0
            assert m["velamq_storage_tail_cache_skipped_inactive_total"] == 0

    run(main())


def test_catch_up_reads_are_served_by_read_ahead(tmp_path: Path) -> None:
    """ME-7, scenario 2: a consumer far behind misses, reads ahead, then hits the read cache."""

    async def main() -> None:
        async with started(tmp_path, write_cache_bytes=200_000, read_ahead_bytes=64 * 1024) as storage:
            ml = await storage.open_ledger(TOPIC)
            positions = [await ml.append(payload(i, 500)) for i in range(3000)]
            await storage.flush()
            # Nobody read: after active_cursor_lag_entries (1000) entries the tail cache was skipped.
            m = storage.metrics()
            assert m["velamq_storage_tail_cache_skipped_inactive_total"] == 3000
            got = []
            pos = positions[0]
            while len(got) < 3000:
                entries = await ml.read_entries(pos, 50)
                got += [e.data for e in entries]
                pos = ml.next_position(entries[-1].position)
            assert got == [payload(i, 500) for i in range(3000)]
            m = storage.metrics()
            file_reads = m["velamq_storage_ledger_file_reads_total"]
            hits = m["velamq_storage_read_cache_hits_total"]
            assert 0 < file_reads <= 3000 * (28 + 500) // (64 * 1024) + 5  # 28: a record header
            assert hits / (hits + m["velamq_storage_read_entries_disk_total"]) > 0.8
            assert m["velamq_storage_read_cache_read_ahead_entries_total"] >= hits

    run(main())


def test_topics_without_an_active_cursor_stay_out_of_the_tail_cache(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, flush_interval_ms=NEVER_MS) as storage:
            quiet = await storage.open_ledger(TOPIC + "-quiet")  # no cursor, no reads
            for i in range(10):
                await quiet.append(payload(i))
            assert storage.metrics()["velamq_storage_tail_cache_inserts_total"] == 0
            busy = await storage.open_ledger(TOPIC + "-busy")
            cursor = await busy.open_cursor("sub", "latest")
            for i in range(1000):
                await busy.append(payload(i))
            assert storage.metrics()["velamq_storage_tail_cache_inserts_total"] == 1000
            # Nobody reads: the cursor falls more than 1000 entries behind and caching stops.
            for i in range(100):
                await busy.append(payload(i))
            assert storage.metrics()["velamq_storage_tail_cache_inserts_total"] == 1000
            # It catches up (reads to the end): new entries are cached again.
            pos = busy.next_position(cursor.mark_delete_position)
            while entries := await busy.read_entries(pos, 500):
                pos = busy.next_position(entries[-1].position)
            await busy.append(b"new")
            assert storage.metrics()["velamq_storage_tail_cache_inserts_total"] == 1001

    run(main())


def test_reads_before_the_flush_come_from_the_write_cache(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, flush_interval_ms=NEVER_MS) as storage:
            ml = await storage.open_ledger(TOPIC)
            positions = [await ml.append(payload(i)) for i in range(30)]
            entries = await ml.read_entries(positions[0], 100)
            assert [e.data for e in entries] == [payload(i) for i in range(30)]
            m = storage.metrics()
            assert m["velamq_storage_write_cache_hits_total"] == 30
            assert m["velamq_storage_write_cache_entries"] == 30
            await storage.flush()
            assert storage.metrics()["velamq_storage_write_cache_entries"] == 0
            # Now from the file, and the tail of it by read-ahead.
            assert [e.data for e in await ml.read_entries(positions[0], 10)] == [payload(i) for i in range(10)]
            assert [e.data for e in await ml.read_entries(positions[10], 10)] == [payload(i) for i in range(10, 20)]
            m = storage.metrics()
            assert m["velamq_storage_read_entries_disk_total"] == 10
            assert m["velamq_storage_read_cache_hits_total"] == 10

    run(main())


def test_a_read_ahead_never_crosses_into_entries_still_in_the_write_cache(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, flush_interval_ms=NEVER_MS) as storage:
            ml = await storage.open_ledger(TOPIC)
            first = [await ml.append(payload(i)) for i in range(10)]
            await storage.flush()
            for i in range(10, 20):
                await ml.append(payload(i))
            entries = await ml.read_entries(first[0], 100)
            assert [e.data for e in entries] == [payload(i) for i in range(20)]
            m = storage.metrics()
            assert m["velamq_storage_read_entries_disk_total"] == 10
            assert m["velamq_storage_write_cache_hits_total"] == 10
            assert m["velamq_storage_read_cache_read_ahead_entries_total"] == 0

    run(main())
