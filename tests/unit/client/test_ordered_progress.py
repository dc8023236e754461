"""The ordered consumer's pure rules (OC-1, OC-2): which worker runs a key, and which contiguous
prefix of a partition may be acknowledged whatever order the workers finish in."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from velamq.client import MessageId, boost_hash, java_string_hash, murmur3_32_hash, sign_safe_mod
from velamq.client.ordered._progress import PartitionWindow, key_hash, routing_key, worker_of


def ids(n: int, batch: int = 0) -> list[MessageId]:
    """n ids of one partition in order; with batch > 0, entries of `batch` messages each."""
    if batch:
        return [MessageId(7, i // batch, 0, i % batch, batch) for i in range(n)]
    return [MessageId(7, i, 0) for i in range(n)]


@given(st.data(), st.integers(min_value=1, max_value=60), st.sampled_from([0, 1, 5]))
def test_only_the_contiguous_completed_prefix_is_acknowledged(data: st.DataObject, n: int, batch: int) -> None:
    all_ids = ids(n, batch)
    window = PartitionWindow(capacity_messages=n)
    tickets = [window.add(mid) for mid in all_ids]
    order = data.draw(st.permutations(tickets))
    completed: set[int] = set()
    acknowledged: list[MessageId] = []
    for ticket in order:
        completed.add(ticket)
        prefix = window.complete(ticket)
        acknowledged.extend(prefix)
        # Everything acknowledged so far is exactly the longest completed prefix.
        expected = 0
        while expected in completed:
            expected += 1
        assert acknowledged == all_ids[:expected]
        assert window.acked == (all_ids[expected - 1] if expected else None)
        assert len(window) == n - expected
        assert window.completed_behind_head == len(completed) - expected
    assert acknowledged == all_ids and len(window) == 0


@given(st.data(), st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=80))
def test_interleaved_adds_and_completions_never_exceed_capacity(data: st.DataObject, capacity: int,
                                                                total: int) -> None:
    all_ids = ids(total)
    window = PartitionWindow(capacity)
    in_flight: list[int] = []
    acknowledged: list[MessageId] = []
    next_index = 0
    while len(acknowledged) < total:
        can_add = next_index < total and not window.full
        if can_add and (not in_flight or data.draw(st.booleans())):
            in_flight.append(window.add(all_ids[next_index]))
            next_index += 1
        else:
            ticket = in_flight.pop(data.draw(st.integers(0, len(in_flight) - 1)))
            acknowledged.extend(window.complete(ticket))
        assert len(window) <= capacity
    assert acknowledged == all_ids


def test_window_refuses_what_the_fetch_loop_must_not_do() -> None:
    window = PartitionWindow(2)
    a, b, c = ids(3)
    t = window.add(a)
    with pytest.raises(ValueError):
        window.add(a)  # not after the highest id: a redelivery
    window.add(b)
    assert window.full
    with pytest.raises(ValueError):
        window.add(c)
    window.complete(t)
    with pytest.raises(ValueError):
        window.complete(t)
    with pytest.raises(ValueError):
        PartitionWindow(0)


def test_redeliveries_are_recognised_by_id() -> None:
    window = PartitionWindow(10)
    a, b, c, d = ids(4, batch=2)
    assert not window.is_redelivery(a)
    ta, tb = window.add(a), window.add(b)
    window.add(c)
    assert window.is_redelivery(a) and window.is_redelivery(c) and not window.is_redelivery(d)
    window.complete(tb)
    assert not window.is_acknowledged(a)
    window.complete(ta)
    assert window.is_acknowledged(a) and window.is_acknowledged(b) and not window.is_acknowledged(c)


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
