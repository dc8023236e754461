"""TTL by position (BR-5, BR-6) on a ManualClock: one check moves the mark-delete past every old
entry at once, across ledgers, and spares only delayed messages not yet due, whether dispatch has
indexed them (consumers attached) or not (an abandoned subscription: the log is scanned)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_testing import consumer, publish, settled, subscribe, topic_on_storage
from wait_helpers import until

from velamq._clock import ManualClock
from velamq.broker.service import _policy_tasks
from velamq.broker.service._policy_tasks import check_topic
from velamq.broker.subscription._selector import SubType
from velamq.metadata import Policies
from velamq.storage import Position

OLD = 3_000


async def old_backlog_with_delayed(topic, clock: ManualClock) -> tuple[list[Position], list[Position]]:  # type: ignore[no-untyped-def]
    """OLD normal entries with 30 delayed ones (due in 10 minutes) among them, then a young entry."""
    normal: list[Position] = []
    delayed: list[Position] = []
    for block in range(30):
        normal += await publish(topic, [b"n%d-%d" % (block, i) for i in range(OLD // 30)], clock)
        delayed += await publish(topic, [b"d%d" % block], clock, deliver_at=clock.now_ms() + 600_000)
    clock.advance(61)
    return normal, delayed


def test_one_check_expires_an_abandoned_backlog_across_ledgers_but_not_the_delayed(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock, ledger_entries_max=500) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            await topic.apply_policies(Policies(message_ttl_s=60))
            normal, delayed = await old_backlog_with_delayed(topic, clock)
            [young] = await publish(topic, [b"young"], clock)
            assert len(topic.ledger.ledgers()) >= 6
            await check_topic(topic, clock)
            assert sub.backlog == len(delayed) + 1  # the delayed ones (not due) and the young one
            assert sub.expired.messages_total == len(normal)
            assert sub.cursor.mark_delete_position < delayed[0]
            assert all(not sub.cursor.is_acked(p) for p in delayed) and not sub.cursor.is_acked(young)
            # A consumer that comes gets the young one now and the delayed ones when due.
            _, channel = consumer(sub, permits=1000)
            await until(lambda: channel.payloads() == [b"young"])
            clock.advance(600)
            await until(lambda: len(channel.payloads()) == 1 + len(delayed))

    asyncio.run(main())


def test_ttl_uses_the_delayed_index_where_dispatch_has_read(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            _, channel = consumer(sub, permits=100_000)
            await topic.apply_policies(Policies(message_ttl_s=60))
            normal, delayed = await old_backlog_with_delayed(topic, clock)
            await until(lambda: len(channel.messages()) == len(normal))  # out, never acknowledged
            await settled(sub)
            assert sub.delayed_messages == len(delayed)
            # Dispatch has read everything: TTL reads nothing but the binary search's probes.
            scans = []
            real_scan = _policy_tasks._delayed_not_due

            async def counting(*args):  # type: ignore[no-untyped-def]
                scans.append(args)
                return await real_scan(*args)

            _policy_tasks._delayed_not_due = counting  # type: ignore[assignment]
            try:
                await check_topic(topic, clock)
            finally:
                _policy_tasks._delayed_not_due = real_scan  # type: ignore[assignment]
            assert scans == []
            assert sub.backlog == len(delayed)
            assert sub.delayed_messages == len(delayed)  # still pending, delivered when due
            clock.advance(600)
            await until(lambda: len(channel.messages()) == len(normal) + len(delayed))

    asyncio.run(main())


def test_a_scan_cut_short_expires_what_it_covered_and_the_next_check_the_rest(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            await topic.apply_policies(Policies(message_ttl_s=60))
            normal, delayed = await old_backlog_with_delayed(topic, clock)
            old_max = _policy_tasks.expire_scan_entries_max
            _policy_tasks.expire_scan_entries_max = 1000
            try:
                await check_topic(topic, clock)
                assert 0 < sub.expired.messages_total < len(normal)
                while sub.backlog > len(delayed):
                    await check_topic(topic, clock)
            finally:
                _policy_tasks.expire_scan_entries_max = old_max
            assert sub.expired.messages_total == len(normal)
            assert all(not sub.cursor.is_acked(p) for p in delayed)

    asyncio.run(main())
