"""Key_Shared without sockets: AUTO_SPLIT and STICKY hash ranges, and the ordering rule for a
consumer that joins while entries are out (CO-1)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from broker_testing import consumer, payload_of, publish, settled, subscribe, topic_on_storage
from wait_helpers import until

from velamq._clock import ManualClock
from velamq._hashing import key_shared_slot
from velamq.broker.subscription._key_shared import HashRangeOverlapError
from velamq.broker.subscription._selector import SubType


def keys_in(low: int, high: int, n: int) -> list[str]:
    """n keys whose hash slot lies in [low, high]."""
    found = (f"k{i}" for i in itertools.count())
    return list(itertools.islice((k for k in found if low <= key_shared_slot(k.encode()) <= high), n))


def test_auto_split_halves_the_largest_range_and_merges_back(tmp_path: Path) -> None:
    async def main() -> None:
        async with topic_on_storage(tmp_path, ManualClock()) as topic:
            sub = await subscribe(topic, sub_type=SubType.KEY_SHARED)
            a, _ = consumer(sub, 1)
            assert a.hash_ranges == [(0, 65535)]
            b, _ = consumer(sub, 2)
            assert (a.hash_ranges, b.hash_ranges) == ([(0, 32767)], [(32768, 65535)])
            c, _ = consumer(sub, 3)
            assert (a.hash_ranges, c.hash_ranges) == ([(0, 16383)], [(16384, 32767)])
            sub.remove_consumer(c)  # its range goes to its lower neighbour
            assert a.hash_ranges == [(0, 32767)]
            sub.remove_consumer(a)  # the first one's goes up
            assert b.hash_ranges == [(0, 65535)]

    asyncio.run(main())


def test_each_key_goes_to_the_consumer_owning_its_slot(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.KEY_SHARED)
            _, low = consumer(sub, 1, permits=100)
            _, high = consumer(sub, 2, permits=100)
            low_keys, high_keys = keys_in(0, 32767, 3), keys_in(32768, 65535, 3)
            for key in low_keys + high_keys:
                await publish(topic, [key.encode()], clock, key=key)
            await until(lambda: len(low.messages()) + len(high.messages()) == 6)
            assert sorted(low.payloads()) == sorted(k.encode() for k in low_keys)
            assert sorted(high.payloads()) == sorted(k.encode() for k in high_keys)

    asyncio.run(main())


def test_sticky_ranges_must_not_overlap_and_unowned_keys_wait(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.KEY_SHARED)
            a, ch_a = consumer(sub, 1, permits=100, sticky=[(0, 99), (200, 299)])
            with pytest.raises(HashRangeOverlapError):
                consumer(sub, 2, sticky=[(250, 400)])
            with pytest.raises(HashRangeOverlapError):
                consumer(sub, 3, sticky=[(70000, 70001)])
            assert sub.consumers == [a]  # the refused ones were not attached
            owned, unowned = keys_in(0, 99, 1)[0], keys_in(1000, 65535, 1)[0]
            await publish(topic, [b"owned"], clock, key=owned)
            await publish(topic, [b"unowned"], clock, key=unowned)
            await settled(sub)
            assert ch_a.payloads() == [b"owned"]
            _, ch_b = consumer(sub, 4, permits=100, sticky=[(1000, 65535)])
            await until(lambda: ch_b.payloads() == [b"unowned"])

    asyncio.run(main())


def test_a_joining_consumer_gets_nothing_past_its_join_until_earlier_entries_are_acked(tmp_path: Path) -> None:
    """A key moving to a new consumer must not overtake its entries still unacked at the old one."""
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.KEY_SHARED)
            _, ch_a = consumer(sub, 1, permits=100)
            key = keys_in(32768, 65535, 1)[0]  # the upper half: it moves to the second consumer
            first = await publish(topic, [b"k-1", b"k-2"], clock, key=key)
            await until(lambda: len(ch_a.messages()) == 2)
            _, ch_b = consumer(sub, 2, permits=100)
            await publish(topic, [b"k-3"], clock, key=key)
            other = keys_in(0, 32767, 1)[0]
            await publish(topic, [b"other"], clock, key=other)  # still a's key: not held back
            await until(lambda: b"other" in ch_a.payloads())
            await settled(sub)
            assert ch_b.messages() == []  # k-3 waits: k-1 and k-2 are still out at a
            sub.acknowledge([(first[0], None)])
            await settled(sub)
            assert ch_b.messages() == []
            sub.acknowledge([(first[1], None)])  # everything before the join point is acked now
            await until(lambda: [payload_of(e) for _, _, e in ch_b.messages()] == [b"k-3"])

    asyncio.run(main())


def test_a_key_waiting_for_permits_blocks_its_newer_entries(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            sub = await subscribe(topic, sub_type=SubType.KEY_SHARED)
            c, channel = consumer(sub, 1, permits=1)
            key = keys_in(0, 65535, 1)[0]
            await publish(topic, [b"1", b"2", b"3"], clock, key=key)
            await until(lambda: channel.payloads() == [b"1"])
            sub.flow(c, 10)
            await until(lambda: channel.payloads() == [b"1", b"2", b"3"])  # in order, none skipped

    asyncio.run(main())
