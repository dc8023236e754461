"""The policy tasks on a ManualClock, without sockets: TTL, retention, backlog quota, rates, and the
periodic checker itself (BR-3..BR-6)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_testing import RecordingChannel, T, consumer, producer, publish, subscribe, topic_on_storage
from wait_helpers import until

from velamq._clock import ManualClock
from velamq.broker.service._policy_tasks import PolicyTasks, check_topic
from velamq.broker.subscription._selector import SubType
from velamq.metadata import BacklogQuota, Policies


def test_ttl_expires_old_messages_but_not_a_delayed_one_still_ahead(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            await topic.apply_policies(Policies(message_ttl_s=60))
            await publish(topic, [b"old-1", b"old-2"], clock)
            await publish(topic, [b"delayed"], clock, deliver_at=clock.now_ms() + 600_000)
            clock.advance(30)
            await publish(topic, [b"young"], clock)
            clock.advance(31)  # the first three are 61 s old, the young one 31 s
            await check_topic(topic, clock)
            assert sub.backlog == 2  # the delayed one (not due) and the young one
            assert sub.expired.messages_total == 2
            clock.advance(30)
            await check_topic(topic, clock)
            assert sub.backlog == 1  # the young one expired too; the delayed one stays
            clock.advance(600)
            await check_topic(topic, clock)
            assert sub.backlog == 0

    asyncio.run(main())


def test_retention_deletes_whole_acknowledged_ledgers_once_old_enough(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock, ledger_entries_max=3) as topic:
            sub = await subscribe(topic)
            positions = await publish(topic, [b"%d" % i for i in range(9)], clock)
            ledgers_before = [info.ledger_id for info in topic.ledger.ledgers()]
            assert len(ledgers_before) >= 3
            sub.acknowledge_cumulative(positions[5], None)  # the first two ledgers are consumed
            await topic.apply_policies(Policies(retention_time_minutes=10, retention_size_mb=-1))
            clock.advance(9 * 60)
            await check_topic(topic, clock)
            assert [info.ledger_id for info in topic.ledger.ledgers()] == ledgers_before  # kept 10 minutes
            clock.advance(61)
            await check_topic(topic, clock)
            remaining = [info.ledger_id for info in topic.ledger.ledgers()]
            assert remaining == ledgers_before[2:]  # whole ledgers, the consumed ones only
            assert topic.ledger.first_position == positions[6]

    asyncio.run(main())


def test_retention_size_limit_and_infinite_retention(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock, ledger_entries_max=3) as topic:
            sub = await subscribe(topic)
            positions = await publish(topic, [b"%d" % i for i in range(9)], clock)
            sub.acknowledge_cumulative(positions[8], None)
            count = len(topic.ledger.ledgers())
            await topic.apply_policies(Policies(retention_time_minutes=-1, retention_size_mb=-1))
            clock.advance(365 * 86400)
            await check_topic(topic, clock)
            assert len(topic.ledger.ledgers()) == count  # -1/-1: kept forever
            await topic.apply_policies(Policies(retention_time_minutes=-1, retention_size_mb=0))
            await check_topic(topic, clock)
            assert len(topic.ledger.ledgers()) < count  # 0 MB: consumed closed ledgers go at once

    asyncio.run(main())


def test_backlog_quota_producer_exception_disconnects_and_refuses_producers(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            channel = RecordingChannel()
            p = producer(topic, channel)
            await publish(topic, [b"x" * 100] * 5, clock)
            quota = BacklogQuota(limit_bytes=200, policy="producer_exception")
            await topic.apply_policies(Policies(backlog_quota=quota))
            await check_topic(topic, clock)
            assert topic.backlog_quota_exceeded == "producer_exception"
            assert channel.of_type(T.CLOSE_PRODUCER) and p in channel.forgotten and topic.producers == {}
            sub.acknowledge_cumulative(topic.ledger.last_confirmed, None)  # type: ignore[arg-type]
            await check_topic(topic, clock)
            assert topic.backlog_quota_exceeded is None  # producers may come back

    asyncio.run(main())


def test_backlog_quota_by_age_of_the_oldest_unacknowledged_message(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            await subscribe(topic)
            await publish(topic, [b"x"], clock)
            await topic.apply_policies(Policies(backlog_quota=BacklogQuota(limit_time_s=60)))
            clock.advance(60)
            await check_topic(topic, clock)
            assert topic.backlog_quota_exceeded is None
            clock.advance(1)
            await check_topic(topic, clock)
            assert topic.backlog_quota_exceeded == "producer_request_hold"

    asyncio.run(main())


def test_backlog_quota_eviction_drops_the_oldest_backlog(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            positions = await publish(topic, [b"x" * 100] * 10, clock)
            entry_bytes = topic.ledger.size_bytes / topic.ledger.entries_total
            quota = BacklogQuota(limit_bytes=int(entry_bytes * 4), policy="consumer_backlog_eviction")
            await topic.apply_policies(Policies(backlog_quota=quota))
            await check_topic(topic, clock)
            assert sub.backlog == 4 and sub.cursor.mark_delete_position == positions[5]
            assert topic.backlog_quota_exceeded is None
            _, channel = consumer(sub, permits=10)
            await until(lambda: len(channel.messages()) == 4)
            assert [p for p, _, _ in channel.messages()] == positions[6:]

    asyncio.run(main())


def test_rates_are_sampled_on_the_clock(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            await check_topic(topic, clock)  # first sample: the baseline
            await publish(topic, [b"x"] * 10, clock)
            clock.advance(5)
            await check_topic(topic, clock)
            assert topic.rate_in.message_rate == 2.0  # 10 messages over 5 s of the clock

    asyncio.run(main())


def test_the_checker_runs_every_interval_of_the_clock(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            await topic.apply_policies(Policies(message_ttl_s=10))
            await publish(topic, [b"x"], clock)
            tasks = PolicyTasks(clock, 5.0, lambda: [topic])
            asleep = clock.sleepers  # storage's own timers (write cache age, cursor persistence)
            tasks.start()
            try:
                await until(lambda: clock.sleepers == asleep + 1)
                clock.advance(5)
                await until(lambda: tasks.checks_total == 1)
                assert sub.backlog == 1  # 5 s old: not expired
                clock.advance(5)
                await until(lambda: tasks.checks_total == 2)
                assert sub.backlog == 1  # exactly 10 s: not older than the TTL
                clock.advance(5)
                await until(lambda: tasks.checks_total == 3)
                assert sub.backlog == 0
            finally:
                await tasks.close()

    asyncio.run(main())


def test_backlog_quota_is_exact_at_publish_and_at_producer_creation(tmp_path: Path) -> None:
    """BR-3: no periodic check runs here. A publish that takes the backlog past the size limit
    disconnects the producers at once; once the backlog is back under the limit a producer is
    admitted again (the broker's producer command asks Topic.backlog_quota_exceeded)."""

    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            channel = RecordingChannel()
            p = producer(topic, channel)
            positions = await publish(topic, [b"x" * 100] * 4, clock)
            entry_bytes = topic.ledger.size_bytes / topic.ledger.entries_total
            quota = BacklogQuota(limit_bytes=int(entry_bytes * 5.5), policy="producer_exception")
            await topic.apply_policies(Policies(backlog_quota=quota))
            await publish(topic, [b"x" * 100], clock)  # 5 entries: under the limit
            assert topic.backlog_quota_exceeded is None and topic.producers
            await publish(topic, [b"x" * 100], clock)  # 6: over it, within one entry
            await until(lambda: not topic.producers)
            assert channel.of_type(T.CLOSE_PRODUCER) and p in channel.forgotten
            assert topic.backlog_quota_exceeded == "producer_exception"
            sub.acknowledge([(positions[0], None)])  # 5 left: under the limit, no check needed
            assert topic.backlog_quota_exceeded is None

    asyncio.run(main())
