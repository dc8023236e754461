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
from typing import TYPE_CHECKING

from velamq.storage._position import LedgerInfo, Position

if TYPE_CHECKING:
    from velamq.storage.index._storage_db import LedgerRow


@dataclass(slots=True)
class LedgerState:
    ledger_id: int
    entries: int  # durable (and in the write cache or the entry logs)
    size_bytes: int  # durable record bytes, record headers included
    assigned: int  # entries with a position, durable or still in flight
    created_ms: int = 0
    closed_ms: int | None = None
    first_ordinal: int = 0  # the managed ledger's running count of entries before this ledger's first
    offloaded_ms: int | None = None  # its offloaded copy is complete (velamq/storage/offload)
    local: bool = True  # False once its local copy is deleted: reads go to the offloaded copy


def _key(state: LedgerState) -> int:
    return state.ledger_id


class LedgerList:
    """The ledgers of one managed ledger, in log order, with running totals of durable entries.

    One list of states in id order (no dict: a topic usually has one or two ledgers, and a bisect
    finds any of them)."""

    __slots__ = ("current_id", "entries_total", "size_bytes", "states")

    def __init__(self) -> None:
        self.states: list[LedgerState] = []
        self.current_id = -1  # the ledger appends go to
        self.entries_total = 0  # durable entries in the ledgers still there
        self.size_bytes = 0

    def restore(self, rows: list[LedgerRow]) -> Position | None:
        """Fill the empty list with the ledgers as the storage database has them; returns the last
        durable position. A ledger left unsealed before its successor (damage) counts as sealed by
        that successor's creation."""
        last: Position | None = None
        for k, row in enumerate(rows):
            closed_ms = row.closed_ms
            if closed_ms is None and k < len(rows) - 1:
                closed_ms = rows[k + 1].created_ms
            state = LedgerState(row.ledger_id, row.entries, row.size_bytes, row.entries, row.created_ms, closed_ms)
            state.offloaded_ms = row.offloaded_ms
            state.local = row.local_deleted_ms is None
            state.first_ordinal = self.entries_total
            self.add(state)
            if row.entries:
                last = Position(row.ledger_id, row.entries - 1)
        return last

    @property
    def ids(self) -> list[int]:
        return [s.ledger_id for s in self.states]

    def add(self, state: LedgerState) -> None:
        """Add the newest ledger (ids only grow)."""
        self.states.append(state)
        self.entries_total += state.entries
        self.size_bytes += state.size_bytes

    def get(self, ledger_id: int) -> LedgerState | None:
        states = self.states
        if states and states[-1].ledger_id == ledger_id:  # the current ledger, nearly always
            return states[-1]
        i = bisect_left(states, ledger_id, key=_key)
        return states[i] if i < len(states) and states[i].ledger_id == ledger_id else None

    def note_durable(self, state: LedgerState, entries: int, size_bytes: int) -> None:
        state.entries += entries
        state.size_bytes += size_bytes
        self.entries_total += entries
        self.size_bytes += size_bytes

    def remove_first(self, count: int) -> list[LedgerState]:
        """Take the `count` oldest ledgers off the list (a trim)."""
        removed = self.states[:count]
        del self.states[:count]
        for state in removed:
            self.entries_total -= state.entries
            self.size_bytes -= state.size_bytes
        return removed

    def put_back_first(self, states: list[LedgerState]) -> None:
        """Undo remove_first (the trim's deletion could not be journaled)."""
        self.states[:0] = states
        for state in states:
            self.entries_total += state.entries
            self.size_bytes += state.size_bytes

    def infos(self) -> list[LedgerInfo]:
        return [
            LedgerInfo(s.ledger_id, s.entries, s.size_bytes, s.created_ms, s.closed_ms, s.offloaded_ms, s.local)
            for s in self.states
        ]

    # -- positions -----------------------------------------------------------------------------

    def initial_mark_delete(self, initial: str, last_confirmed: Position | None) -> Position:
        """A new cursor's mark-delete position: before the first entry ("earliest"), or at the last
        durable one ("latest")."""
        if initial == "earliest":
            first = self.first_position
            return Position(first.ledger_id, -1) if first else Position(self.current_id, -1)
        if initial == "latest":
            return last_confirmed or Position(self.current_id, -1)
        raise ValueError(f"initial must be 'earliest' or 'latest', not {initial!r}")

    @property
    def first_position(self) -> Position | None:
        for state in self.states:
            if state.entries:
                return Position(state.ledger_id, 0)
        return None

    def entry_exists(self, pos: Position) -> bool:
        """Whether pos names a durable entry of this log."""
        state = self.get(pos[0])
        return state is not None and 0 <= pos[1] < state.entries

    def next_position(self, pos: Position) -> Position:
        """The position after pos; after a ledger's last entry that is the next ledger's first."""
        ledger_id, entry_id = pos
        state = self.get(ledger_id)
        # `assigned`, not `entries`: a sealed ledger may still have appends in flight.
        if ledger_id == self.current_id or (state is not None and entry_id + 1 < state.assigned):
            return Position(ledger_id, entry_id + 1)
        states = self.states
        for i in range(bisect_right(states, ledger_id, key=_key), len(states)):
            candidate = states[i]
            if candidate.ledger_id == self.current_id or candidate.assigned:
                return Position(candidate.ledger_id, 0)
        return Position(ledger_id, entry_id + 1)  # beyond the log: nothing better to say

    def count_entries(self, after: Position, up_to: Position) -> int:
        """Durable entries in (after, up_to]."""
        if up_to <= after:
            return 0
        states = self.states
        total = 0
        for i in range(bisect_left(states, after.ledger_id, key=_key), len(states)):
            state = states[i]
            ledger_id = state.ledger_id
            if ledger_id > up_to.ledger_id:
                break
            entries = state.entries
            lo = after.entry_id + 1 if ledger_id == after.ledger_id else 0
            hi = up_to.entry_id if ledger_id == up_to.ledger_id else entries - 1
            hi = min(hi, entries - 1)
            if hi >= lo:
                total += hi - max(lo, 0) + 1
        return total

    def first_at_or_after(self, pos: Position) -> Position | None:
        """The first durable entry at or after pos, if any."""
        ledger_id, entry_id = pos
        states = self.states
        for i in range(bisect_left(states, ledger_id, key=_key), len(states)):
            state = states[i]
            first = max(entry_id, 0) if state.ledger_id == ledger_id else 0
            if first < state.entries:
                return Position(state.ledger_id, first)
            if first < state.assigned:
                return None  # not durable yet (and nothing after it is)
        return None

    def durable_spans(self) -> list[tuple[int, int]]:
        """(ledger id, durable entries) of every ledger that has some, in log order."""
        return [(s.ledger_id, s.entries) for s in self.states if s.entries]
