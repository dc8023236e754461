"""Redelivery without sockets: nacks, consumers that leave, ack holes (BR-4) and delayed delivery
(CO-4), with time driven by a ManualClock."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_testing import consumer, publish, settled, subscribe, topic_on_storage
from wait_helpers import until

from velamq._clock import ManualClock
from velamq.broker.subscription._selector import SubType
from velamq.metadata import Policies


def test_redeliver_all_resends_in_order_with_a_count(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            c, channel = consumer(sub, permits=10)
            positions = await publish(topic, [b"a", b"b", b"c"], clock)
            await until(lambda: len(channel.messages()) == 3)
            sub.acknowledge([(positions[1], None)])
            sub.redeliver(c, None)
            await until(lambda: len(channel.messages()) == 5)
            again = channel.messages()[3:]
            assert [(p, count) for p, count, _ in again] == [(positions[0], 1), (positions[2], 1)]

    asyncio.run(main())


def test_redeliver_listed_positions_only(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            c, channel = consumer(sub, permits=10)
            positions = await publish(topic, [b"a", b"b", b"c"], clock)
            await until(lambda: len(channel.messages()) == 3)
            sub.redeliver(c, [positions[1]])
            await until(lambda: len(channel.messages()) == 4)
            assert channel.messages()[3][:2] == (positions[1], 1)
            assert sub.redelivered.messages_total == 1

    asyncio.run(main())


def test_entries_of_a_consumer_that_leaves_go_to_another_uncounted(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            leaving, ch_leaving = consumer(sub, 1, permits=10)
            await publish(topic, [b"a", b"b"], clock)
            await until(lambda: len(ch_leaving.messages()) == 2)
            _, ch_staying = consumer(sub, 2, permits=10)
            sub.remove_consumer(leaving)
            await until(lambda: len(ch_staying.messages()) == 2)
            assert [count for _, count, _ in ch_staying.messages()] == [0, 0]
            assert ch_staying.payloads() == [b"a", b"b"]

    asyncio.run(main())


def test_an_ack_hole_is_redelivered_after_the_threshold(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            _, channel = consumer(sub, permits=10)
            positions = await publish(topic, [b"hole", b"acked"], clock)
            await until(lambda: len(channel.messages()) == 2)
            sub.acknowledge([(positions[1], None)])
            clock.advance(0.9)
            assert sub.redeliver_stuck_holes(1.0) == 0  # not stuck long enough yet
            clock.advance(0.2)
            assert sub.redeliver_stuck_holes(1.0) == 1
            await until(lambda: len(channel.messages()) == 3)
            assert channel.messages()[2][:2] == (positions[0], 1)
            sub.acknowledge([(positions[0], None)])
            assert sub.cursor.mark_delete_position == positions[1]

    asyncio.run(main())


def test_delayed_messages_wait_for_their_time(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            _, channel = consumer(sub, permits=10)
            await publish(topic, [b"later"], clock, deliver_at=clock.now_ms() + 10_000)
            await publish(topic, [b"now"], clock)
            await until(lambda: channel.payloads() == [b"now"])
            await settled(sub)
            assert sub.delayed_messages == 1
            clock.advance(9.9)
            await settled(sub)
            assert channel.payloads() == [b"now"]
            clock.advance(0.1)
            await until(lambda: channel.payloads() == [b"now", b"later"])
            assert sub.delayed_messages == 0
            assert channel.messages()[1][1] == 0  # a delayed message is no redelivery

    asyncio.run(main())


def test_delayed_delivery_off_or_exclusive_delivers_at_once(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            await topic.apply_policies(Policies(delayed_delivery=False))
            shared = await subscribe(topic, "shared", sub_type=SubType.SHARED)
            exclusive = await subscribe(topic, "exclusive", sub_type=SubType.EXCLUSIVE)
            _, ch_shared = consumer(shared, 1, permits=10)
            _, ch_exclusive = consumer(exclusive, 2, permits=10)
            await publish(topic, [b"later"], clock, deliver_at=clock.now_ms() + 60_000)
            await until(lambda: ch_shared.payloads() == [b"later"] and ch_exclusive.payloads() == [b"later"])

    asyncio.run(main())
