"""The ordered consumer's pure rules (OC-1, OC-2): which worker runs a key, and which contiguous
prefix of a partition may be acknowledged whatever order the workers finish in."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from velamq.client import boost_hash, java_string_hash, murmur3_32_hash, sign_safe_mod
from velamq.client._message import ReceivedBatch
from velamq.client.ordered._progress import KeyHashes, PartitionWindow, key_hash, position, routing_key, worker_of
from velamq.protocol import MessageColumns


def entries(n: int, batch: int = 0) -> list[tuple[ReceivedBatch, int]]:
    """n messages of one partition in order, as (received batch, index); with batch > 0, entries of
    `batch` messages each, else one unbatched message per entry."""
    size = batch or 1
    batches = []
    for e in range((n + size - 1) // size):
        k = min(size, n - e * size)
        columns = MessageColumns(b"x" * k, list(range(k)), list(range(1, k + 1)), batch)
        batches.append(ReceivedBatch(columns, "t-partition-0", 0, 7, e, None, 0, None, 0))
    return [(b, j) for b in batches for j in range(len(b))]


def add_all(window: PartitionWindow, messages: list[tuple[ReceivedBatch, int]]) -> list[int]:
    """Add whole entries as the fetch loop does; the tickets of every message."""
    tickets: list[int] = []
    i = 0
    while i < len(messages):
        batch = messages[i][0]
        end = i
        while end < len(messages) and messages[end][0] is batch:
            end += 1
        first = window.add(batch, messages[i][1], messages[end - 1][1] + 1)
        tickets += range(first, first + end - i)
        i = end
    return tickets


def flatten(ranges: list[tuple[ReceivedBatch, int, int]]) -> list[tuple[int, int, int]]:
    return [position(b, j) for b, first, end in ranges for j in range(first, end)]


@given(st.data(), st.integers(min_value=1, max_value=60), st.sampled_from([0, 1, 5]))
def test_only_the_contiguous_completed_prefix_is_acknowledged(data: st.DataObject, n: int, batch: int) -> None:
    messages = entries(n, batch)
    everything = [position(b, j) for b, j in messages]
    window = PartitionWindow(capacity_messages=n)
    tickets = add_all(window, messages)
    order = data.draw(st.permutations(tickets))
    completed: set[int] = set()
    acknowledged: list[tuple[int, int, int]] = []
    for ticket in order:
        completed.add(ticket)
        window.complete(ticket)
        if data.draw(st.booleans()):  # prefix() is called when acks are flushed, not every time
            acknowledged.extend(flatten(window.prefix()))
        # The prefix is exactly the longest completed run from the start.
        expected = 0
        while expected in completed:
            expected += 1
        assert window.prefix_count == expected
        assert len(window) == n - expected
        assert window.completed_behind_head == len(completed) - expected
        assert acknowledged == everything[:len(acknowledged)]
    acknowledged.extend(flatten(window.prefix()))
    assert acknowledged == everything and len(window) == 0 and window.acked == everything[-1]


@given(st.data(), st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=80))
def test_interleaved_adds_and_completions_never_exceed_capacity(data: st.DataObject, capacity: int,
                                                                total: int) -> None:
    messages = entries(total)
    window = PartitionWindow(capacity)
    in_flight: list[int] = []
    acknowledged: list[tuple[int, int, int]] = []
    next_index = 0
    while len(acknowledged) < total:
        can_add = next_index < total and not window.full
        if can_add and (not in_flight or data.draw(st.booleans())):
            batch, j = messages[next_index]
            in_flight.append(window.add(batch, j, j + 1))
            next_index += 1
        else:
            ticket = in_flight.pop(data.draw(st.integers(0, len(in_flight) - 1)))
            window.complete(ticket)
            acknowledged.extend(flatten(window.prefix()))
        assert len(window) <= capacity and window.room == capacity - len(window)
    assert acknowledged == [position(b, j) for b, j in messages]


def test_window_refuses_what_the_fetch_loop_must_not_do() -> None:
    window = PartitionWindow(2)
    (a, _), (b, _), (c, _) = entries(3)
    t = window.add(a, 0, 1)
    with pytest.raises(ValueError):
        window.add(a, 0, 1)  # not after the highest position: a redelivery
    window.add(b, 0, 1)
    assert window.full
    with pytest.raises(ValueError):
        window.add(c, 0, 1)
    window.complete(t)
    with pytest.raises(ValueError):
        window.complete(t)
    with pytest.raises(ValueError):
        window.complete(7)  # never given
    with pytest.raises(ValueError):
        PartitionWindow(0)


def test_redeliveries_are_recognised_by_position() -> None:
    window = PartitionWindow(10)
    messages = entries(4, batch=2)  # two entries of two messages
    first, second = messages[0][0], messages[2][0]
    assert window.new_from(first, 0, 2) == 0
    ta = window.add(first, 0, 2)
    window.add(second, 0, 1)
    # A redelivered entry: only what follows the highest position taken is new.
    assert window.new_from(first, 0, 2) == 2 and window.new_from(second, 0, 2) == 1
    assert window.is_redelivery(position(first, 1)) and not window.is_redelivery(position(second, 1))
    window.complete(ta + 1)
    window.prefix()
    assert not window.is_acknowledged(position(first, 0))
    window.complete(ta)
    window.prefix()
    assert window.is_acknowledged(position(first, 1)) and not window.is_acknowledged(position(second, 0))


def test_key_hashes_cache_is_bounded_and_exact() -> None:
    hashes = KeyHashes(max_keys=4)
    for i in range(20):
        assert hashes(f"k{i % 6}") == key_hash(f"k{i % 6}")
        assert len(hashes._cache) <= 4


@dataclass
class _Msg:
    key: str | None = None
    ordering_key: bytes | None = None


def test_routing_key_prefers_the_ordering_key() -> None:
    assert routing_key(_Msg("k", b"o")) == b"o"
    assert routing_key(_Msg("k")) == "k"
    assert routing_key(_Msg("")) is None
    assert routing_key(_Msg()) is None


def test_worker_hash_is_stable_and_in_range() -> None:
    expected = int.from_bytes(hashlib.blake2b(b"order-42", digest_size=8, person=b"velamq-oc").digest(), "little")
    assert key_hash("order-42") == expected == key_hash(b"order-42")
    assert worker_of("order-42", 1) == 0
    for n in (2, 3, 8, 16):
        assert worker_of("order-42", n) == expected % n
        assert {worker_of(f"k{i}", n) for i in range(500)} == set(range(n))


@pytest.mark.parametrize("producer_hash", [boost_hash, java_string_hash, murmur3_32_hash])
def test_keys_of_one_partition_spread_over_every_worker(producer_hash: object) -> None:
    # The pitfall the independent hash avoids: if workers used the producer's hash, the keys of
    # partition p (hash % 8 == p) could only reach 2 of 16 workers.
    assert callable(producer_hash)
    keys = [f"user-{i}" for i in range(4000)]
    for partition in range(8):
        mine = [k for k in keys if sign_safe_mod(producer_hash(k), 8) == partition]
        workers = Counter(worker_of(k, 16) for k in mine)
        assert set(workers) == set(range(16))
        # Roughly even: no worker gets more than twice its fair share of ~500 keys.
        assert max(workers.values()) < 2 * len(mine) / 16
