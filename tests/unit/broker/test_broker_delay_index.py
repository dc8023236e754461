"""The delayed-delivery index's parts (sans-IO): the position bitmap against a plain set, and the
buckets' seal and release invariants (hypothesis)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from velamq.broker.delayed._bitmap import PositionBitmap
from velamq.broker.delayed._buckets import MutableBucket, SealedBucket, Segment, seal
from velamq.storage import Position

# Entry ids around the 2^16 group boundary and a dense run that turns a group into a bitmap.
entry_ids = st.one_of(st.integers(0, 200), st.integers(65_400, 65_700), st.integers(0, 3 * 65_536))
positions = st.builds(Position, st.integers(1, 3), entry_ids)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["add", "discard", "dense"]), positions), max_size=60),
    st.lists(positions, max_size=20),
)
def test_position_bitmap_behaves_as_a_set(ops: list[tuple[str, Position]], probes: list[Position]) -> None:
    bitmap, model = PositionBitmap(), set[Position]()
    for op, pos in ops:
        if op == "add":
            assert bitmap.add(pos) == (pos not in model)
            model.add(pos)
        elif op == "discard":
            assert bitmap.discard(pos) == (pos in model)
            model.discard(pos)
        else:  # a run of 5000 from pos: the group becomes a bitmap
            run = [Position(pos.ledger_id, pos.entry_id + i) for i in range(5000)]
            bitmap.update(run)
            model.update(run)
        assert len(bitmap) == len(model)
    for pos in probes + [p for _, p in ops]:
        assert (pos in bitmap) == (pos in model)
        absent = bitmap.next_absent(pos)
        assert Position(pos.ledger_id, absent) not in model
        assert all(Position(pos.ledger_id, e) in model for e in range(pos.entry_id, absent))
    assert bitmap.last() == (max(model) if model else None)
    low, high = (min(probes), max(probes)) if probes else (Position(1, 0), Position(3, 1 << 20))
    runs = list(bitmap.runs_between(low, high))
    flat = [Position(a.ledger_id, e) for a, b in runs for e in range(a.entry_id, b.entry_id + 1)]
    assert flat == sorted(p for p in model if low <= p <= high)
    assert all(b.ledger_id == a.ledger_id for a, b in runs)
    assert all(Position(a.ledger_id, a.entry_id + 1) != c for (_, a), (c, _) in itertools.pairwise(runs))
    built = PositionBitmap.of(model)
    assert len(built) == len(model) and all(p in built for p in model)
    restored = PositionBitmap.from_bytes(bitmap.to_bytes())
    assert len(restored) == len(model) and all(p in restored for p in model)
    merged = PositionBitmap()
    merged.update(probes)
    merged.merge(bitmap)
    assert len(merged) == len(model | set(probes))
    assert all(p in merged for p in model | set(probes))


times = st.integers(0, 1_000)
delayed = st.lists(st.tuples(times, positions), max_size=300, unique_by=lambda x: x[1])


@settings(max_examples=100, deadline=None)
@given(delayed, st.integers(1, 40))
def test_a_sealed_bucket_is_sorted_by_time_and_cut_into_disjoint_segments(
    entries: list[tuple[int, Position]], segment_size: int
) -> None:
    bucket = MutableBucket()
    for t, pos in entries:
        bucket.add(t, pos)
    segments = bucket.seal(segment_size)
    flat = [(t, p) for s in segments for t, p in zip(s.times, s.positions(), strict=True)]
    assert flat == sorted(entries)
    assert all(0 < len(s) <= segment_size for s in segments)
    for before, after in itertools.pairwise(segments):
        assert before.info.max_time <= after.info.min_time  # a bucket releases in time order
    for segment in segments:
        again = Segment.from_bytes(segment.to_bytes())
        assert list(again.positions()) == list(segment.positions()) and list(again.times) == list(segment.times)


@settings(max_examples=100, deadline=None)
@given(delayed, st.lists(times, min_size=1, max_size=6), st.integers(1, 40))
def test_buckets_release_each_entry_once_when_due_and_never_early(
    entries: list[tuple[int, Position]], nows: list[int], segment_size: int
) -> None:
    half = len(entries) // 2
    mutable, to_seal = MutableBucket(), MutableBucket()
    for t, pos in entries[:half]:
        to_seal.add(t, pos)
    for t, pos in entries[half:]:
        mutable.add(t, pos)
    sealed: SealedBucket | None = None
    segments: list[Segment] = []
    if len(to_seal):
        sealed, segments = seal(to_seal, segment_size)
    released: list[tuple[int, Position]] = []
    for now in [*sorted(nows), 10000]:
        step = mutable.pop_due(now)
        while sealed is not None:
            step += sealed.pop_due(now)
            if not sealed.needs_load or sealed.infos[sealed.released].min_time > now:
                break
            sealed.loaded = segments[sealed.released]  # what the store reads back
        assert all(t <= now for t, _ in step)
        released += step
        remaining = (sealed.pending if sealed is not None else 0) + len(mutable)
        assert remaining == len(entries) - len(released)
        if mutable.min_time is not None:
            assert mutable.min_time > now
        if sealed is not None and sealed.next_time() is not None:
            assert sealed.next_time() > now  # type: ignore[operator]
    assert sorted(released) == sorted(entries)

