"""RangeSet against a plain set of positions as the model (BR-2)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from velamq.storage import Position, RangeSet
from velamq.storage._range_set import join_compact, split_compact

LEDGERS = st.integers(min_value=1, max_value=4)
ENTRIES = st.integers(min_value=-1, max_value=40)
positions = st.builds(Position, LEDGERS, ENTRIES)


class RangeSetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rs = RangeSet()
        self.model: set[Position] = set()

    @rule(pos=positions)
    def add(self, pos: Position) -> None:
        self.rs.add(pos)
        self.model.add(pos)

    @rule(ledger_id=LEDGERS, a=ENTRIES, b=ENTRIES)
    def add_range(self, ledger_id: int, a: int, b: int) -> None:
        lo, hi = min(a, b), max(a, b)
        self.rs.add_range(Position(ledger_id, lo), Position(ledger_id, hi))
        self.model.update(Position(ledger_id, e) for e in range(lo, hi + 1))

    @rule(pos=positions)
    def remove_up_to(self, pos: Position) -> None:
        self.rs.remove_up_to(pos)
        self.model = {p for p in self.model if p > pos}

    @rule(pos=positions)
    def contains(self, pos: Position) -> None:
        assert (pos in self.rs) == (pos in self.model)

    @invariant()
    def same_positions(self) -> None:
        assert len(self.rs) == len(self.model)
        assert set(self.rs) == self.model
        assert self.rs.first() == (min(self.model) if self.model else None)

    @invariant()
    def compact(self) -> None:
        ranges = self.rs.ranges()
        for first, last in ranges:
            assert first.ledger_id == last.ledger_id and first <= last
        for (_, prev_last), (next_first, _) in itertools.pairwise(ranges):
            # Sorted, disjoint, and never two touching ranges of one ledger (they would be one).
            assert prev_last < next_first
            if prev_last.ledger_id == next_first.ledger_id:
                assert next_first.entry_id > prev_last.entry_id + 1
        # As few ranges as the model allows: one per maximal run of consecutive entry ids.
        runs = sum(1 for p in self.model if Position(p.ledger_id, p.entry_id - 1) not in self.model)
        assert len(ranges) == runs

    @invariant()
    def json_round_trip(self) -> None:
        doc = json.loads(json.dumps(self.rs.to_json()))
        assert RangeSet.from_json(doc) == self.rs


TestRangeSetModel = RangeSetMachine.TestCase
TestRangeSetModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


@given(st.lists(positions, max_size=60))
@settings(max_examples=150, deadline=None)
def test_adding_in_any_order_gives_the_same_ranges(items: list[Position]) -> None:
    forward, backward = RangeSet(), RangeSet()
    for p in items:
        forward.add(p)
    for p in reversed(items):
        backward.add(p)
    assert forward == backward
    assert len(forward) == len(set(items))


def test_merges_adjacent_ranges_but_not_across_ledgers() -> None:
    rs = RangeSet()
    rs.add(Position(1, 5))
    rs.add(Position(1, 7))
    assert rs.ranges() == [(Position(1, 5), Position(1, 5)), (Position(1, 7), Position(1, 7))]
    rs.add(Position(1, 6))
    assert rs.ranges() == [(Position(1, 5), Position(1, 7))]
    rs.add(Position(2, 0))  # the next ledger's first entry: a separate range
    assert rs.ranges() == [(Position(1, 5), Position(1, 7)), (Position(2, 0), Position(2, 0))]
    assert len(rs) == 4
    assert rs.to_json() == [[1, 5, 7], [2, 0, 0]]


def test_remove_up_to_trims_a_straddling_range() -> None:
    rs = RangeSet()
    rs.add_range(Position(3, 0), Position(3, 9))
    rs.add_range(Position(4, 2), Position(4, 4))
    rs.remove_up_to(Position(3, 4))
    assert rs.ranges() == [(Position(3, 5), Position(3, 9)), (Position(4, 2), Position(4, 4))]
    assert len(rs) == 8
    rs.remove_up_to(Position(3, 100))
    assert rs.ranges() == [(Position(4, 2), Position(4, 4))]
    rs.remove_up_to(Position(9, 0))
    assert rs.ranges() == [] and len(rs) == 0 and rs.first() is None


def test_acks_in_order_stay_one_range() -> None:
    rs = RangeSet()
    for e in range(100_000):
        rs.add(Position(1, e))
    assert rs.range_count() == 1 and len(rs) == 100_000


def test_rejects_bad_ranges() -> None:
    rs = RangeSet()
    with pytest.raises(ValueError):
        rs.add_range(Position(1, 0), Position(2, 0))
    with pytest.raises(ValueError):
        rs.add_range(Position(1, 5), Position(1, 4))
    with pytest.raises(ValueError):
        RangeSet.from_json([[1, 2]])
    assert "x" not in rs


@given(st.lists(positions, max_size=300))
@settings(max_examples=200, deadline=None)
def test_compact_form_round_trips(items: list[Position]) -> None:
    rs = RangeSet()
    for p in items:
        rs.add(p)
    ranges, bitmaps = split_compact(rs.to_json())
    doc = json.loads(json.dumps([ranges, bitmaps]))
    assert RangeSet.from_json(join_compact(doc[0], doc[1])) == rs


def test_scattered_acks_take_a_few_hundred_bytes() -> None:
    """BR-2: thousands of scattered acks (every other entry of 4000) persist compactly."""
    rs = RangeSet()
    for e in range(0, 4000, 2):
        rs.add(Position(7, e))
    rs.add_range(Position(8, 0), Position(8, 999))  # a plain run stays a range
    ranges, bitmaps = split_compact(rs.to_json())
    assert ranges == [[8, 0, 999]] and len(bitmaps) == 1
    encoded = json.dumps([ranges, bitmaps], separators=(",", ":"))
    assert len(rs.to_json()) == 2001 and len(encoded) < 700
    assert RangeSet.from_json(join_compact(ranges, bitmaps)) == rs
    with pytest.raises(ValueError):
        join_compact([], [[7, 0]])
