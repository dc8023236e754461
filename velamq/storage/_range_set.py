"""A compact set of Positions, kept as sorted, merged, closed ranges (BR-2).

A cursor stores the positions acknowledged individually after its mark-delete position. Consumers
acknowledge mostly in order with a few holes, so a set of ranges stays small where a set of
positions would grow with the backlog. Each range lies inside one ledger: entry ids of different
ledgers are not adjacent in id space, and whether (L, last) and (L', 0) touch depends on the
ledger list, which only the cursor knows (it joins ranges over ledger boundaries with
next_position when it advances mark-delete).

Representation: two parallel lists, `_starts` and `_ends`, sorted by start, with
`_starts[i] <= _ends[i] < _starts[i + 1]` and no two ranges of one ledger adjacent or overlapping.
Lookups are a bisect; inserts are a list insert, linear in the number of ranges (the ack holes),
which is the number that has to stay small anyway.

JSON form (what to_json returns and from_json reads): a list of [ledger_id, first_entry_id,
last_entry_id] triples, sorted, e.g. [[7, 0, 99], [7, 120, 120], [9, 0, 3]].

Compact form, for persisted cursor state (split_compact / join_compact): scattered acks make many short
ranges, about 20 bytes of JSON each. For a ledger where a bitmap is smaller, its ranges are written
as [ledger_id, first_entry_id, "<base64 bitmap>"] instead: bit i (byte i // 8, bit i % 8, least
significant first) set means entry first_entry_id + i is acknowledged. Two thousand acks scattered
over four thousand entries then take about 700 bytes instead of 40 kB.
"""

from __future__ import annotations

import base64
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence

from velamq.storage._position import Position


class RangeSet:
    __slots__ = ("_count", "_ends", "_starts")

    def __init__(self, ranges: Iterable[tuple[Position, Position]] = ()) -> None:
        self._starts: list[Position] = []
        self._ends: list[Position] = []
        self._count = 0  # number of positions, kept so len() (and so backlog) is O(1)
        for first, last in ranges:
            self.add_range(first, last)

    # -- changes -------------------------------------------------------------------------------

    def add(self, pos: Position) -> None:
        self.add_range(pos, pos)

    def add_range(self, first: Position, last: Position) -> None:
        """Add every position from first to last inclusive; both must be in the same ledger."""
        ledger_id, lo = first
        if last.ledger_id != ledger_id:
            raise ValueError(f"range {first}..{last} spans ledgers")
        hi = last.entry_id
        if hi < lo:
            raise ValueError(f"empty range {first}..{last}")
        starts, ends = self._starts, self._ends
        # Ranges to merge: those of this ledger that overlap [lo, hi] or touch it.
        i = bisect_left(starts, first)
        if i > 0:
            prev_end = ends[i - 1]
            if prev_end.ledger_id == ledger_id and prev_end.entry_id >= lo - 1:
                i -= 1
        j = i
        n = len(starts)
        while j < n:
            s = starts[j]
            if s.ledger_id != ledger_id or s.entry_id > hi + 1:
                break
            j += 1
        if i == j:
            starts.insert(i, Position(ledger_id, lo))
            ends.insert(i, Position(ledger_id, hi))
            self._count += hi - lo + 1
            return
        removed = 0
        for k in range(i, j):
            removed += ends[k].entry_id - starts[k].entry_id + 1
        lo = min(lo, starts[i].entry_id)
        hi = max(hi, ends[j - 1].entry_id)
        starts[i:j] = [Position(ledger_id, lo)]
        ends[i:j] = [Position(ledger_id, hi)]
        self._count += hi - lo + 1 - removed

    def remove_up_to(self, pos: Position) -> None:
        """Drop every position <= pos."""
        starts, ends = self._starts, self._ends
        i = bisect_right(starts, pos)  # ranges [0, i) start at or before pos
        if i == 0:
            return
        removed = 0
        for k in range(i - 1):
            removed += ends[k].entry_id - starts[k].entry_id + 1
        last_start, last_end = starts[i - 1], ends[i - 1]
        if last_end > pos:
            # Range i-1 straddles pos, so pos is inside its ledger: keep the part after pos.
            removed += pos.entry_id - last_start.entry_id + 1
            starts[i - 1] = Position(pos.ledger_id, pos.entry_id + 1)
            del starts[: i - 1]
            del ends[: i - 1]
        else:
            removed += last_end.entry_id - last_start.entry_id + 1
            del starts[:i]
            del ends[:i]
        self._count -= removed

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
        self._count = 0

    # -- queries -------------------------------------------------------------------------------

    def __contains__(self, pos: object) -> bool:
        if not isinstance(pos, tuple):
            return False
        i = bisect_right(self._starts, pos) - 1
        return i >= 0 and self._ends[i] >= pos

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[Position]:
        for first, last in zip(self._starts, self._ends, strict=True):
            for entry_id in range(first.entry_id, last.entry_id + 1):
                yield Position(first.ledger_id, entry_id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RangeSet):
            return NotImplemented
        return self._starts == other._starts and self._ends == other._ends

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{s}..{e.entry_id}" for s, e in zip(self._starts, self._ends, strict=True))
        return f"RangeSet([{inner}])"

    def ranges(self) -> list[tuple[Position, Position]]:
        return list(zip(self._starts, self._ends, strict=True))

    def range_count(self) -> int:
        return len(self._starts)

    def first(self) -> Position | None:
        return self._starts[0] if self._starts else None

    def first_range(self) -> tuple[Position, Position] | None:
        if not self._starts:
            return None
        return self._starts[0], self._ends[0]

    def copy(self) -> RangeSet:
        other = RangeSet()
        other._starts = list(self._starts)
        other._ends = list(self._ends)
        other._count = self._count
        return other

    # -- persistence ---------------------------------------------------------------------------

    def to_json(self) -> list[list[int]]:
        return [[s.ledger_id, s.entry_id, e.entry_id] for s, e in zip(self._starts, self._ends, strict=True)]

    @classmethod
    def from_json(cls, data: Sequence[Sequence[int]]) -> RangeSet:
        rs = cls()
        for item in data:
            if len(item) != 3 or not all(isinstance(x, int) and not isinstance(x, bool) for x in item):
                raise ValueError(f"bad range {item!r}: expected [ledger_id, first, last]")
            ledger_id, first, last = item
            rs.add_range(Position(ledger_id, first), Position(ledger_id, last))
        return rs


# JSON bytes one range costs as a triple, and the fixed cost of a bitmap item, roughly.
_range_json_bytes = 20
_bitmap_item_bytes = 30


def split_compact(ranges: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[list[int | str]]]:
    """Sorted [ledger_id, first, last] triples -> (triples kept, bitmaps for the ledgers they suit)."""
    kept: list[list[int]] = []
    bitmaps: list[list[int | str]] = []
    i = 0
    while i < len(ranges):
        ledger_id = ranges[i][0]
        j = i
        while j < len(ranges) and ranges[j][0] == ledger_id:
            j += 1
        group = ranges[i:j]
        first, last = group[0][1], group[-1][2]
        span = last - first + 1
        if len(group) > 2 and (span + 7) // 8 * 4 // 3 + _bitmap_item_bytes < _range_json_bytes * len(group):
            bits = bytearray((span + 7) // 8)
            for _, lo, hi in group:
                for e in range(lo - first, hi - first + 1):
                    bits[e >> 3] |= 1 << (e & 7)
            bitmaps.append([ledger_id, first, base64.b64encode(bytes(bits)).decode("ascii")])
        else:
            kept.extend([int(x) for x in r] for r in group)
        i = j
    return kept, bitmaps


def join_compact(ranges: Sequence[Sequence[int]], bitmaps: Sequence[Sequence[int | str]]) -> list[list[int]]:
    """The inverse of split_compact: every [ledger_id, first, last] triple, sorted."""
    out = [[int(x) for x in r] for r in ranges]
    for item in bitmaps:
        ledger_id, first, encoded = item if len(item) == 3 else (None, None, None)
        if not isinstance(ledger_id, int) or not isinstance(first, int) or not isinstance(encoded, str):
            raise ValueError(f"bad bitmap {item!r}: expected [ledger_id, first, base64]")
        bits = base64.b64decode(encoded, validate=True)
        run_start = -1
        for e in range(len(bits) * 8 + 1):
            on = e < len(bits) * 8 and bits[e >> 3] >> (e & 7) & 1
            if on and run_start < 0:
                run_start = e
            elif not on and run_start >= 0:
                out.append([ledger_id, first + run_start, first + e - 1])
                run_start = -1
    out.sort()
    return out
