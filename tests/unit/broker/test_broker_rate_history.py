"""The console's rate history on a ManualClock, over real topics on real storage: rates in and out,
rings only for topics with traffic, bounded in number and dropped when idle or unloaded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from broker_testing import consumer, producer, publish, settled, subscribe
from wait_helpers import until

from velamq._clock import ManualClock
from velamq._topic_name import TopicName
from velamq.broker.stats._rate_history import RateHistory
from velamq.broker.topic._topic import Topic
from velamq.storage import Storage, StorageConfig


@asynccontextmanager
async def topics_on_storage(data_dir: Path, clock: ManualClock, count: int) -> AsyncIterator[dict[str, Topic]]:
    """`count` loaded topics t0..t<count-1> on `clock` over one Storage (the broker's table of loaded
    topics, as far as the rate history sees it). Storage keeps its timers on a clock of its own, so
    `clock` has only the rate history's sleeper on it."""
    store = Storage(StorageConfig(data_dir=data_dir, sync_policy="none"), ManualClock())
    await store.start()
    table: dict[str, Topic] = {}
    for i in range(count):
        name = f"persistent://public/default/t{i}"
        table[name] = Topic(TopicName.parse(name), await store.open_ledger(name), clock)
    try:
        yield table
    finally:
        for topic in table.values():
            await topic.close()
        await store.close()


async def send(topic: Topic, count: int, clock: ManualClock) -> None:
    if "p" not in topic.producers:
        producer(topic)
    await publish(topic, [b"x"] * count, clock)


def test_rates_in_and_out_per_interval_for_the_broker_and_the_topic(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topics_on_storage(tmp_path, clock, 2) as table:
            history = RateHistory(clock, table.values, interval_s=5, points=10)
            t0 = table["persistent://public/default/t0"]
            sub = await subscribe(t0)
            history.sample()  # the baseline: no point yet
            assert history.broker_series().msg_in == () and history.broker_series().last_sample_ms == 0

            await send(t0, 20, clock)
            clock.advance(5)
            history.sample()
            _, channel = consumer(sub, permits=100)
            await until(lambda: len(channel.messages()) == 20)
            await send(t0, 10, clock)
            await until(lambda: len(channel.messages()) == 30)
            await settled(sub)
            clock.advance(10)  # a late sample: rates are over the time that really passed
            history.sample()

            broker = history.broker_series()
            assert broker.msg_in == (4.0, 1.0)  # 20 in 5 s, then 10 in 10 s
            assert broker.msg_out == (0.0, 3.0)  # 30 delivered in the second interval
            assert broker.interval_s == 5 and broker.last_sample_ms == clock.now_ms()
            assert history.topic_series(t0.full_name) == broker  # the only topic with traffic
            assert history.topic_series("persistent://public/default/t1") is None
            assert history.topics_tracked == 1
            assert history.busiest(5) == [(t0.full_name, 1.0, 3.0)]
            assert history.busiest(0) == []

    asyncio.run(main())


def test_rings_are_bounded_and_dropped_when_idle_or_unloaded(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topics_on_storage(tmp_path, clock, 4) as table:
            loaded = dict(table)
            history = RateHistory(clock, loaded.values, interval_s=1, points=3, topics_max=2)
            t = [table[f"persistent://public/default/t{i}"] for i in range(4)]
            history.sample()
            for topic in t[:3]:  # three topics with traffic, room for two rings
                await send(topic, 1, clock)
                clock.advance(1)
                history.sample()
            assert history.topics_tracked == 2
            assert history.topic_series(t[0].full_name) is None  # idle the longest: it made room
            assert history.topic_series(t[2].full_name) is not None
            assert history.topic_series(t[3].full_name) is None  # never any traffic: never a ring

            # The broker ring keeps `points` points, the newest last.
            assert history.broker_series().msg_in == (1.0, 1.0, 1.0)
            # Busiest: only topics with traffic at the newest sample.
            assert history.busiest(5) == [(t[2].full_name, 1.0, 0.0)]

            del loaded[t[2].full_name]  # unloaded: its ring goes at the next sample
            clock.advance(1)
            history.sample()
            assert history.topic_series(t[2].full_name) is None

            # t1 had traffic two samples ago; one more zero makes a whole window of zeros.
            series = history.topic_series(t[1].full_name)
            assert series is not None and series.msg_in == (1.0, 0.0, 0.0)
            clock.advance(1)
            history.sample()
            assert history.topic_series(t[1].full_name) is None
            assert history.topics_tracked == 0

    asyncio.run(main())


def test_a_reloaded_topic_counts_from_zero_again(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topics_on_storage(tmp_path, clock, 1) as table:
            name = "persistent://public/default/t0"
            history = RateHistory(clock, table.values, interval_s=1, points=5)
            history.sample()
            await send(table[name], 8, clock)
            clock.advance(1)
            history.sample()
            # The topic unloads and loads again: a new Topic whose counters start at zero.
            old = table[name]
            await old.close()
            table[name] = Topic(TopicName.parse(name), old.ledger, clock)
            await send(table[name], 3, clock)
            clock.advance(1)
            history.sample()
            assert history.broker_series().msg_in == (8.0, 3.0)

    asyncio.run(main())


def test_the_sampler_task_runs_on_the_injected_clock(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topics_on_storage(tmp_path, clock, 1) as table:
            history = RateHistory(clock, table.values, interval_s=2, points=5)
            history.start()
            try:
                await until(lambda: clock.sleepers == 1)
                await send(table["persistent://public/default/t0"], 6, clock)
                clock.advance(2)
                await until(lambda: history.samples_total == 1)
                assert history.broker_series().msg_in == (3.0,)
            finally:
                await history.close()

    asyncio.run(main())
