"""Delayed delivery at scale, without sockets (CO-4): the index seals and stores buckets, normal
messages are never held back, and a restart loads the stored index instead of reading the log
again; delivery stays in time order, never early, each message once. Time: a ManualClock."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from broker_testing import TOPIC, consumer, publish, settled, subscribe, topic_on_storage
from wait_helpers import until

from velamq._clock import ManualClock
from velamq.broker.delayed import _tracker as _delayed
from velamq.broker.delayed._store import delayed_index_name
from velamq.broker.subscription._selector import SubType
from velamq.storage import Position

DELAYED = 1_000


@pytest.fixture(autouse=True)
def small_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_delayed, "bucket_indexes", 100)
    monkeypatch.setattr(_delayed, "segment_indexes", 10)


def entries_read(metrics: dict[str, float]) -> float:
    return metrics["velamq_storage_read_entries_cache_total"] + metrics["velamq_storage_read_entries_disk_total"]


def test_restart_loads_the_stored_index_and_delivers_in_time_order(tmp_path: Path) -> None:
    rng = random.Random(7)
    clock = ManualClock()
    start_ms = clock.now_ms()
    delays_ms = [rng.randrange(1_000, 600_000) for _ in range(DELAYED)]

    async def before_restart() -> dict[Position, int]:
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            _, channel = consumer(sub, permits=100_000)
            due: dict[Position, int] = {}
            for i, delay in enumerate(delays_ms):
                [at] = await publish(topic, [b"d%d" % i], clock, deliver_at=start_ms + delay)
                due[at] = start_ms + delay
            normal = await publish(topic, [b"n%d" % i for i in range(50)], clock)
            await until(lambda: len(channel.messages()) == 50)  # not held back by the delayed ones
            sub.acknowledge([(p, None) for p in normal])
            await until(lambda: sub.delayed_messages == DELAYED)
            assert sub._delayed is not None and sub._delayed.buckets == DELAYED // 100
            return due

    due = asyncio.run(before_restart())

    async def after_restart() -> None:
        async with topic_on_storage(tmp_path, clock) as topic:
            assert topic.storage is not None
            assert await topic.storage.ledger_exists(delayed_index_name(TOPIC, "sub"))
            read_before = entries_read(topic.storage.metrics())
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            _, channel = consumer(sub, permits=100_000)
            await until(lambda: sub.delayed_messages == DELAYED)
            await settled(sub)
            assert channel.messages() == []  # nothing is due, nothing normal is left
            # The stored buckets were loaded: a few segment and header records, not the log.
            assert entries_read(topic.storage.metrics()) - read_before < DELAYED // 4
            sent_at: dict[Position, int] = {}
            for _ in range(0, 600_000, 7_000):
                clock.advance(7.0)
                now = clock.now_ms()

                def caught_up(now: int = now) -> bool:
                    for position, _, _ in channel.messages():
                        sent_at.setdefault(position, now)
                    return all(p in sent_at for p, t in due.items() if t <= now)

                await until(caught_up)
                await settled(sub)
            assert sorted(sent_at) == sorted(due)
            for position, when in sent_at.items():
                assert due[position] <= when < due[position] + 7_000  # never early, in its step
            order = [p for p, _, _ in channel.messages()]
            assert len(order) == len(set(order)) == DELAYED  # each once, none redelivered
            sub.acknowledge([(p, None) for p in order])
            assert sub.delayed_messages == 0
            await until(lambda: sub._delayed is not None and sub._delayed._persister is None)
            assert not await topic.storage.ledger_exists(delayed_index_name(TOPIC, "sub"))  # nothing left

    asyncio.run(after_restart())

