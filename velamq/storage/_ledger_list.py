"""A managed ledger's list of ledgers and the questions about the log's shape it answers.

The list is ordered by ledger id (ids increase across a Storage, so id order is log order). Every
ledger but the current one (the newest) is sealed. Each LedgerState knows its durable entries and
its assigned ones (durable or still in flight); the questions below are answered from those counts
alone, with no I/O: where the first entry is, what follows a position, how many entries lie between
two positions, which ledgers a trim may delete. Lives on the event loop, owned by one ManagedLedger.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from velamq.storage._position import LedgerInfo, Position


@dataclass(slots=True)
class LedgerState:
    ledger_id: int
    entries: int  # durable (and in the write cache or the entry logs)
    size_bytes: int  # durable record bytes, record headers included
    assigned: int  # entries with a position, durable or still in flight
    created_ms: int = 0
    closed_ms: int | None = None
    first_ordinal: int = 0  # the managed ledger's running count of entries before this ledger's first


class LedgerList:
    """The ledgers of one managed ledger, in log order, with running totals of durable entries."""

    __slots__ = ("current_id", "entries_total", "ids", "size_bytes", "states")

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.states: dict[int, LedgerState] = {}
        self.current_id = -1  # the ledger appends go to
        self.entries_total = 0  # durable entries in the ledgers still there
        self.size_bytes = 0

    def add(self, state: LedgerState) -> None:
        self.ids.append(state.ledger_id)
        self.states[state.ledger_id] = state
        self.entries_total += state.entries
        self.size_bytes += state.size_bytes

    def get(self, ledger_id: int) -> LedgerState | None:
        return self.states.get(ledger_id)

    def note_durable(self, state: LedgerState, entries: int, size_bytes: int) -> None:
        state.entries += entries
        state.size_bytes += size_bytes
        self.entries_total += entries
        self.size_bytes += size_bytes

    def remove_first(self, count: int) -> list[LedgerState]:
        """Take the `count` oldest ledgers off the list (a trim)."""
        removed = [self.states.pop(i) for i in self.ids[:count]]
        del self.ids[:count]
        for state in removed:
            self.entries_total -= state.entries
            self.size_bytes -= state.size_bytes
        return removed

    def infos(self) -> list[LedgerInfo]:
        out = []
        for i in self.ids:
            s = self.states[i]
            out.append(LedgerInfo(i, s.entries, s.size_bytes, s.created_ms, s.closed_ms))
        return out

    # -- positions -----------------------------------------------------------------------------

    @property
    def first_position(self) -> Position | None:
        for ledger_id in self.ids:
            if self.states[ledger_id].entries:
                return Position(ledger_id, 0)
        return None

    def entry_exists(self, pos: Position) -> bool:
        """Whether pos names a durable entry of this log."""
        state = self.states.get(pos[0])
        return state is not None and 0 <= pos[1] < state.entries

    def next_position(self, pos: Position) -> Position:
        """The position after pos; after a ledger's last entry that is the next ledger's first."""
        ledger_id, entry_id = pos
        state = self.states.get(ledger_id)
        # `assigned`, not `entries`: a sealed ledger may still have appends in flight.
        if ledger_id == self.current_id or (state is not None and entry_id + 1 < state.assigned):
            return Position(ledger_id, entry_id + 1)
        ids = self.ids
        i = bisect_right(ids, ledger_id)
        while i < len(ids):
            candidate = ids[i]
            if candidate == self.current_id or self.states[candidate].assigned:
                return Position(candidate, 0)
            i += 1
        return Position(ledger_id, entry_id + 1)  # beyond the log: nothing better to say

    def count_entries(self, after: Position, up_to: Position) -> int:
        """Durable entries in (after, up_to]."""
        if up_to <= after:
            return 0
        ids = self.ids
        total = 0
        for i in range(bisect_left(ids, after.ledger_id), len(ids)):
            ledger_id = ids[i]
            if ledger_id > up_to.ledger_id:
                break
            entries = self.states[ledger_id].entries
            lo = after.entry_id + 1 if ledger_id == after.ledger_id else 0
            hi = up_to.entry_id if ledger_id == up_to.ledger_id else entries - 1
            hi = min(hi, entries - 1)
            if hi >= lo:
                total += hi - max(lo, 0) + 1
        return total

    def first_at_or_after(self, pos: Position) -> Position | None:
        """The first durable entry at or after pos, if any."""
        ledger_id, entry_id = pos
        ids = self.ids
        for i in range(bisect_left(ids, ledger_id), len(ids)):
            candidate = ids[i]
            first = max(entry_id, 0) if candidate == ledger_id else 0
            state = self.states[candidate]
            if first < state.entries:
                return Position(candidate, first)
            if first < state.assigned:
                return None  # not durable yet (and nothing after it is)
        return None

    def durable_spans(self) -> list[tuple[int, int]]:
        """(ledger id, durable entries) of every ledger that has some, in log order."""
        return [(i, self.states[i].entries) for i in self.ids if self.states[i].entries]
