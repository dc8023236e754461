"""Subscription dispatch without sockets: permits, the consumer each type picks, acks (CO-1, CO-2)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_testing import T, consumer, entry, producer, publish, settled, subscribe, topic_on_storage
from wait_helpers import until

from velamq._clock import ManualClock
from velamq.broker.subscription._selector import SubType
from velamq.storage import Position


def test_nothing_is_sent_without_permits_and_exactly_the_permits_then(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            c, channel = consumer(sub)
            await publish(topic, [b"a", b"b", b"c"], clock)
            await settled(sub)
            assert channel.messages() == []
            sub.flow(c, 2)
            await settled(sub)
            assert channel.payloads() == [b"a", b"b"] and c.permits == 0
            sub.flow(c, 5)
            await settled(sub)
            assert channel.payloads() == [b"a", b"b", b"c"] and c.permits == 4
            assert c.unacked_messages == 3 and sub.unacked_messages == 3

    asyncio.run(main())


def test_a_batch_takes_as_many_permits_as_it_has_messages(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            c, channel = consumer(sub, permits=1)
            p = producer(topic)
            await topic.publish(p, entry(b"batch", publish_time=clock.now_ms(), num_messages=3), 3, 0, 0, True)
            await until(lambda: len(channel.messages()) == 1)
            assert c.permits == -2 and c.unacked_messages == 3
            await publish(topic, [b"next"], clock)
            await settled(sub)
            assert len(channel.messages()) == 1  # no permits left: -2 + nothing granted
            sub.flow(c, 3)
            await until(lambda: len(channel.messages()) == 2)

    asyncio.run(main())


def test_shared_round_robin_over_consumers_with_permits(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            _a, ch_a = consumer(sub, 1, permits=10)
            _b, ch_b = consumer(sub, 2, permits=1)
            await publish(topic, [b"%d" % i for i in range(6)], clock)
            await until(lambda: len(ch_a.messages()) + len(ch_b.messages()) == 6)
            assert len(ch_b.messages()) == 1  # b had one permit; a took the rest
            assert sorted(ch_a.payloads() + ch_b.payloads()) == [b"%d" % i for i in range(6)]

    asyncio.run(main())


def test_failover_picks_by_priority_then_name_and_hands_over_unacked(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.FAILOVER)
            b, ch_b = consumer(sub, 2, name="b", permits=10)
            a, ch_a = consumer(sub, 1, name="a", permits=10)
            await publish(topic, [b"x", b"y"], clock)
            await until(lambda: len(ch_a.messages()) == 2)
            assert ch_b.messages() == [] and sub.is_active(a) and not sub.is_active(b)
            changes = [c.active_consumer_change.is_active for c in ch_b.of_type(T.ACTIVE_CONSUMER_CHANGE)]
            assert changes[-1] is False  # b was told it is now a standby
            sub.remove_consumer(a)  # a goes with two unacked entries: b gets them, not counted as redelivered
            await until(lambda: len(ch_b.messages()) == 2)
            assert [count for _, count, _ in ch_b.messages()] == [0, 0]
            assert ch_b.of_type(T.ACTIVE_CONSUMER_CHANGE)[-1].active_consumer_change.is_active is True

    asyncio.run(main())


def test_individual_and_cumulative_acks_move_the_cursor(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            c, channel = consumer(sub, permits=10)
            positions = await publish(topic, [b"0", b"1", b"2", b"3"], clock)
            await until(lambda: len(channel.messages()) == 4)
            sub.acknowledge([(positions[1], None)])
            assert sub.cursor.mark_delete_position < positions[0] and sub.backlog == 3
            sub.acknowledge([(positions[0], None)])
            assert sub.cursor.mark_delete_position == positions[1]
            sub.acknowledge_cumulative(positions[3], None)
            assert sub.backlog == 0 and c.unacked_messages == 0

    asyncio.run(main())


def test_batch_index_acks_complete_a_batch_only_when_every_message_is_acked(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            _, channel = consumer(sub, permits=10)
            p = producer(topic)
            position = await topic.publish(p, entry(b"b", publish_time=1, num_messages=3), 3, 0, 0, True)
            await until(lambda: len(channel.messages()) == 1)
            # ack_set bits mark the messages still unacknowledged: 0b110 = message 0 acked.
            sub.acknowledge([(position, [0b110])])
            assert sub.backlog == 1 and sub.cursor.batch_ack_set(position) == [0b110]
            sub.acknowledge([(position, [0b011])])  # message 2 acked: 0b110 & 0b011 = 0b010 left
            assert sub.cursor.batch_ack_set(position) == [0b010]
            sub.acknowledge([(position, [0b101])])
            assert sub.backlog == 0 and sub.cursor.mark_delete_position == position

    asyncio.run(main())


def test_seek_disconnects_consumers_and_delivers_again_from_the_target(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            c, channel = consumer(sub, permits=10)
            positions = await publish(topic, [b"0", b"1", b"2"], clock)
            await until(lambda: len(channel.messages()) == 3)
            sub.acknowledge_cumulative(positions[2], None)
            target = await sub.seek_target((positions[1].ledger_id, positions[1].entry_id), None)
            assert target == Position(positions[1].ledger_id, positions[1].entry_id - 1)
            sub.seek(target)
            assert channel.of_type(T.CLOSE_CONSUMER) and c in channel.forgotten and not sub.consumers
            assert sub.backlog == 2
            _again, channel2 = consumer(sub, 2, permits=10)  # the client subscribes again
            await until(lambda: len(channel2.messages()) == 2)
            assert channel2.payloads() == [b"1", b"2"]
            assert await sub.seek_target((-1, -1), None) == Position(positions[0].ledger_id, positions[0].entry_id - 1)
            assert await sub.seek_target((2**63 - 1, 2**63 - 1), None) == positions[2]
            assert await sub.seek_target(None, clock.now_ms() + 1) == positions[2]  # nothing that late: the end
            assert await sub.seek_target(None, 0) == Position(positions[0].ledger_id, positions[0].entry_id - 1)

    asyncio.run(main())


def test_last_message_id_gives_the_batch_index_of_a_batch(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            empty, batch_index = await sub.last_message_id()
            assert empty.entry_id == -1 and batch_index == -1
            position = await topic.publish(producer(topic), entry(b"b", publish_time=1, num_messages=4), 4, 0, 0, True)
            assert await sub.last_message_id() == (position, 3)

    asyncio.run(main())


def test_no_dispatch_task_while_there_is_nothing_to_send_then_the_first_entry_goes_out(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic)
            c, channel = consumer(sub)
            sub.flow(c, 10)  # permits, but an empty topic: a round would do nothing
            assert sub._task is None and sub.dispatch_idle
            await publish(topic, [b"first"], clock)
            await until(lambda: channel.payloads() == [b"first"])
            await settled(sub)
            assert c.permits == 9
            await publish(topic, [b"second"], clock)  # the task now waits for wake-ups
            await until(lambda: channel.payloads() == [b"first", b"second"])
            sub.remove_consumer(c)
            await until(lambda: sub._task is None)  # no consumers: the task ends

    asyncio.run(main())
