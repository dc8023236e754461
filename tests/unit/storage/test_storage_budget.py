"""One memory budget and the publish buffer: backpressure instead of growth (ME-1, ME-2)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from _storage_testing import NEVER_MS, TOPIC, payload, run, started
from wait_helpers import until

from velamq.storage import MemoryBudget, PublishBuffer, StorageConfig

MIB = 1024 * 1024


def test_the_budget_is_split_by_the_memory_model_shares() -> None:
    budget = StorageConfig(Path("/x")).budget
    assert budget == MemoryBudget.split(1024 * MIB)
    assert budget.total_bytes == 1024 * MIB
    assert budget.publish_buffer_bytes == 512 * MIB  # 1/2
    assert budget.tail_cache_bytes == 1024 * MIB // 5  # 1/5
    assert budget.write_cache_bytes == 1024 * MIB * 3 // 20
    assert budget.read_cache_bytes == 1024 * MIB // 10
    assert budget.index_cache_bytes == 1024 * MIB // 20
    parts = budget.as_dict()
    assert sum(v for k, v in parts.items() if k != "total_bytes") <= budget.total_bytes
    # Each part can be overridden; the others keep their share of the total.
    small = StorageConfig(Path("/x"), memory_bytes=256 * MIB, tail_cache_bytes=10 * MIB).budget
    assert small.tail_cache_bytes == 10 * MIB and small.publish_buffer_bytes == 128 * MIB
    with pytest.raises(ValueError):
        StorageConfig(Path("/x"), read_cache_bytes=-1)
    with pytest.raises(ValueError):
        StorageConfig(Path("/x"), sync_policy="sometimes")  # type: ignore[arg-type]
    assert StorageConfig(Path("/x"), sync_policy="interval").sync


def test_publish_buffer_pauses_and_resumes_feeders() -> None:
    buffer = PublishBuffer(1000)
    resumed: list[str] = []
    buffer.acquire(600)
    assert not buffer.full
    buffer.on_room(lambda: resumed.append("now"))  # not full: called at once
    assert resumed == ["now"]
    buffer.acquire(600)
    assert buffer.full and buffer.size_bytes == 1200

    def a() -> None:
        resumed.append("a")

    def b() -> None:
        resumed.append("b")

    buffer.on_room(a)
    buffer.on_room(a)  # once per feeder
    buffer.on_room(b)
    buffer.cancel(b)  # its connection closed
    assert buffer.paused == 1 and buffer.pauses_total == 2
    buffer.release(600)
    assert resumed == ["now"]  # 600 left: above the resume mark (half the bound)
    buffer.release(100)
    assert resumed == ["now", "a"] and buffer.paused == 0
    assert buffer.bytes_peak == 1200
    assert buffer.metrics()["velamq_storage_publish_buffer_pauses_total"] == 2


def test_wait_for_room() -> None:
    async def main() -> None:
        buffer = PublishBuffer(100)
        await buffer.wait_for_room()  # not full
        buffer.acquire(150)
        waiter = asyncio.ensure_future(buffer.wait_for_room())
        await asyncio.sleep(0)
        assert not waiter.done()
        buffer.release(150)
        await asyncio.wait_for(waiter, 1)
        assert buffer.paused == 0

    run(main())


def test_appends_count_in_the_publish_buffer_until_durable(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, publish_buffer_bytes=10_000) as storage:
            ml = await storage.open_ledger(TOPIC)
            pending = [asyncio.ensure_future(ml.append(payload(i, 1000))) for i in range(15)]
            await asyncio.sleep(0)
            assert storage.publish_buffer.size_bytes == 15_000
            assert storage.publish_buffer.full
            await asyncio.gather(*pending)
            assert storage.publish_buffer.size_bytes == 0 and not storage.publish_buffer.full
            assert storage.memory_budget.publish_buffer_bytes == 10_000

    run(main())


def test_a_slow_flush_parks_groups_and_holds_their_receipts(tmp_path: Path) -> None:
    """The write cache never grows past its halves: while the disk lags, appends wait, unresolved."""

    async def main() -> None:
        async with started(tmp_path, write_cache_bytes=100_000, flush_interval_ms=NEVER_MS) as storage:
            ml = await storage.open_ledger(TOPIC)
            flusher = storage._threads.flusher
            assert flusher is not None
            release = threading.Event()
            flusher.step_hook = lambda step: release.wait(10) if step == "logs-written" else None
            tasks = []
            for i in range(60):  # 60 x 5 kB = 300 kB: three times the whole write cache
                tasks.append(asyncio.ensure_future(ml.append(payload(i, 5000))))
                if i % 10 == 9:
                    await asyncio.sleep(0)  # let the journal take them in several groups

            def settled() -> bool:  # every append is journaled, and either resolved or parked
                resolved = sum(t.done() for t in tasks) * 5000
                return resolved + storage.metrics()["velamq_storage_write_cache_parked_bytes"] == 300_000

            await until(settled, "every append is resolved or parked")
            m = storage.metrics()
            assert m["velamq_storage_write_cache_parked_groups_total"] > 0
            assert m["velamq_storage_write_cache_bytes"] <= 100_000 + 2 * 5200  # each half may overshoot by a group
            done = sum(t.done() for t in tasks)
            assert 0 < done < 60  # the first ones resolved, the rest wait for the disk
            assert storage.publish_buffer.size_bytes == (60 - done) * 5000
            release.set()
            positions = await asyncio.gather(*tasks)
            flusher.step_hook = None
            assert [p.entry_id for p in positions] == list(range(60))
            got = await ml.read_entries(positions[0], 100)
            assert [e.data for e in got] == [payload(i, 5000) for i in range(60)]
            assert storage.publish_buffer.size_bytes == 0

    run(main())
