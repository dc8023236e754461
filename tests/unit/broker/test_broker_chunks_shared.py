"""CH-7 without sockets: on Shared and Key_Shared subscriptions every chunk of a chunked message
goes to the consumer that got its first chunk, with two producers interleaving chunks, normal
messages between them, and a consumer that leaves with chunks out."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from pathlib import Path

import pytest
from broker_testing import (
    RecordingChannel,
    consumer,
    entry,
    producer,
    settled,
    subscribe,
    topic_on_storage,
    until,
)

from velamq._clock import ManualClock
from velamq.broker.subscription._selector import SubType
from velamq.protocol import split_entry

CHUNKS = 4


def chunk_metadata(data: bytes) -> tuple[str, int] | None:
    metadata = split_entry(data)[0]
    return (metadata.uuid, metadata.chunk_id) if metadata.HasField("chunk_id") else None


async def publish_interleaved(topic, clock: ManualClock, messages: int, rng: random.Random) -> int:  # type: ignore[no-untyped-def]
    """Two producers' chunked messages, chunk by chunk in random interleaving, normal messages
    between; returns how many entries were published."""
    p = producer(topic)
    streams = [[(f"p{s}-{m}", c) for m in range(messages) for c in range(CHUNKS)] for s in range(2)]
    futures = []
    seq = 0
    while any(streams):
        stream = rng.choice([s for s in streams if s])
        uuid, chunk = stream.pop(0)
        data = entry(b"x" * 10, publish_time=clock.now_ms(), key=uuid.split("-")[0], uuid=uuid, chunk_id=chunk,
                     num_chunks_from_msg=CHUNKS, total_chunk_msg_size=40)
        futures.append(topic.publish(p, data, 1, seq, seq, dedup_checked=True))
        seq += 1
        if rng.random() < 0.3:
            futures.append(topic.publish(p, entry(b"normal", publish_time=clock.now_ms()), 1, seq, seq,
                                         dedup_checked=True))
            seq += 1
    await asyncio.gather(*futures)
    return seq


def chunks_by_consumer(channels: list[RecordingChannel]) -> dict[str, list[tuple[int, int]]]:
    """uuid -> [(consumer index, chunk id)] in the order each consumer got them."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for index, channel in enumerate(channels):
        for _, _, data in channel.messages():
            found = chunk_metadata(data)
            if found is not None:
                out[found[0]].append((index, found[1]))
    return out


@pytest.mark.parametrize("sub_type", [SubType.SHARED, SubType.KEY_SHARED])
def test_every_chunk_of_a_message_goes_to_one_consumer(tmp_path: Path, sub_type: SubType) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=sub_type)
            channels = [consumer(sub, i + 1, permits=7)[1] for i in range(3)]
            for c in sub.consumers:
                sub.flow(c, 10_000)
            total = await publish_interleaved(topic, clock, 20, random.Random(3))
            await until(lambda: sum(len(ch.messages()) for ch in channels) == total)
            chunks = chunks_by_consumer(channels)
            assert len(chunks) == 40
            for uuid, got in chunks.items():
                assert len({index for index, _ in got}) == 1, uuid  # one consumer
                assert [chunk for _, chunk in got] == list(range(CHUNKS)), uuid  # in order, once
            if sub_type == SubType.SHARED:
                assert len({got[0][0] for got in chunks.values()}) > 1  # spread over consumers

    asyncio.run(main())


def test_a_consumer_leaving_mid_message_hands_its_chunks_to_one_other(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.SHARED)
            consumers = [consumer(sub, i + 1, permits=5) for i in range(3)]
            total = await publish_interleaved(topic, clock, 10, random.Random(5))
            await until(lambda: sum(len(ch.messages()) for _, ch in consumers) >= 10)
            await settled(sub)  # permits used up, or later chunks wait for their owner's
            leaving, leaving_channel = consumers[0]
            owned = {chunk_metadata(d)[0] for _, _, d in leaving_channel.messages() if chunk_metadata(d)}
            assert owned
            sub.remove_consumer(leaving)
            for c, _ in consumers[1:]:
                sub.flow(c, 10_000)
            stay = [ch for _, ch in consumers[1:]]
            # Everything: what the leaving consumer had is sent again (it acknowledged nothing).
            await until(lambda: sum(len(ch.messages()) for ch in stay) == total)
            assert owned <= set(chunks_by_consumer(stay))
            for uuid, got in chunks_by_consumer(stay).items():
                assert len({index for index, _ in got}) == 1, uuid
                assert [chunk for _, chunk in got] == list(range(CHUNKS)), uuid

    asyncio.run(main())
