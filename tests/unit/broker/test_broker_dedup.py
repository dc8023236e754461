"""Producer deduplication (CO-6): duplicates are acknowledged as (-1, -1) and not stored; the state
survives a reload of the topic; chunks of one message are never duplicates of each other."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_testing import entry, producer, topic_on_storage

from velamq._clock import ManualClock
from velamq.broker.topic._dedup import DUPLICATE_POSITION, Deduplication
from velamq.broker.topic._topic import Topic
from velamq.metadata import Policies


async def send(topic: Topic, seq: int, payload: bytes = b"x", highest: int | None = None, **fields: object) -> object:
    data = entry(payload, publish_time=1, sequence_id=seq, **fields)  # type: ignore[arg-type]
    p = topic.producers["p"]
    return await topic.publish(p, data, 1, seq, seq if highest is None else highest, dedup_checked=True)


def test_the_state_machine() -> None:
    dedup = Deduplication()
    assert not dedup.is_duplicate("p", 0, 0)
    assert dedup.is_duplicate("p", 0, 0)  # pushed, not yet durable: still a duplicate
    assert not dedup.is_duplicate("p", 5, 5)
    assert dedup.last_sequence_id("p") == -1
    dedup.persisted_up_to("p", 5)
    assert dedup.last_sequence_id("p") == 5
    assert not dedup.is_duplicate("p", 6, 8)  # a batch 6..8
    assert dedup.is_duplicate("p", 7, 7)
    dedup.failed("p")  # the append of 6..8 failed: a retry is accepted
    assert not dedup.is_duplicate("p", 6, 8)
    assert not dedup.is_duplicate("other", 0, 0)  # per producer name


def test_duplicates_are_not_stored_and_the_state_is_recovered(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            await topic.apply_policies(Policies(deduplication=True))
            producer(topic)
            first = await send(topic, 5)
            assert await send(topic, 5) == DUPLICATE_POSITION
            assert await send(topic, 3) == DUPLICATE_POSITION  # older than what was accepted
            assert await send(topic, 6) != DUPLICATE_POSITION
            assert first != DUPLICATE_POSITION and topic.ledger.entries_total == 2
            # What a reconnecting producer is told (PRODUCER_SUCCESS last_sequence_id):
            assert topic.dedup is not None and topic.dedup.last_sequence_id("p") == 6
            recovered = Deduplication()
            await recovered.recover(topic.ledger)  # a reload rebuilds it from the stored entries
            assert recovered.last_sequence_id("p") == 6 and recovered.is_duplicate("p", 6, 6)
            await topic.apply_policies(Policies(deduplication=False))
            assert await send(topic, 5) != DUPLICATE_POSITION  # off: everything is stored

    asyncio.run(main())


def test_chunks_of_one_message_are_not_duplicates_of_each_other(tmp_path: Path) -> None:
    async def main() -> None:
        async with topic_on_storage(tmp_path, ManualClock()) as topic:
            await topic.apply_policies(Policies(deduplication=True))
            p = producer(topic)
            positions = []
            for chunk_id in range(3):
                data = entry(b"c%d" % chunk_id, publish_time=1, sequence_id=9, uuid="u", chunk_id=chunk_id,
                             num_chunks_from_msg=3, total_chunk_msg_size=6)
                last = chunk_id == 2  # only the last chunk is checked and recorded (as SEND does)
                positions.append(await topic.publish(p, data, 1, 9, 9, dedup_checked=last))
            assert DUPLICATE_POSITION not in positions and topic.ledger.entries_total == 3
            assert await send(topic, 9) == DUPLICATE_POSITION  # the whole message was accepted
            recovered = Deduplication()
            await recovered.recover(topic.ledger)
            assert recovered.last_sequence_id("p") == 9

    asyncio.run(main())
