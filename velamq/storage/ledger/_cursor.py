"""A durable cursor: mark-delete position, individually acked ranges and batch ack sets (BR-2).

Everything at or before `mark_delete_position` is acknowledged. Positions acknowledged one by one
after it live in a RangeSet; the gaps between its ranges are the "ack holes". When the first range
starts right after mark-delete (by the ledger's next_position, so across ledger boundaries too),
mark-delete jumps to its end. A batch entry that is only partly acknowledged keeps Pulsar's ack
set (a BitSet as long[], set bit = not yet acknowledged) until it is fully acknowledged.

The cursor lives on the loop and is changed only by its topic's code. A change marks it dirty with
its ledger, which writes dirty cursors at a bounded rate and on close; a crash therefore loses at
most the last interval of acknowledgements, which means redeliveries, never a lost message.

Cursor file `cursors/<encoded name>.json` (UTF-8 JSON, replaced atomically):

    {"format": 2,
     "name": "<cursor name>",
     "mark_delete": [ledger_id, entry_id],
     "individually_acked": [[ledger_id, first_entry_id, last_entry_id], ...],   # RangeSet.to_json
     "individually_acked_bitmaps": [[ledger_id, first_entry_id, "<base64>"], ...],
     "batch_ack_sets": [[ledger_id, entry_id, [long, ...]], ...]}

Ledgers whose acks are scattered go to "individually_acked_bitmaps" (see _range_set's compact
form), the rest stay ranges. Format 1 (no bitmaps) is still read.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from velamq._errors import StorageError
from velamq.storage._position import Position
from velamq.storage._range_set import RangeSet, join_compact, split_compact

CURSOR_FORMAT = 2
_READABLE_FORMATS = (1, 2)


class CursorOwner(Protocol):
    """What a cursor needs from its managed ledger.

    ManagedLedger is one; the broker builds non-durable cursors (readers) as
    ManagedCursor(name, owner, mark_delete) with an owner whose cursor_changed does nothing.
    """

    @property
    def last_confirmed(self) -> Position | None: ...

    def next_position(self, pos: Position) -> Position: ...

    def count_entries(self, after: Position, up_to: Position) -> int: ...

    def entry_exists(self, pos: Position) -> bool: ...

    def cursor_changed(self, cursor: ManagedCursor) -> None: ...


@dataclass(frozen=True, slots=True)
class CursorState:
    """A cursor's persisted state; a snapshot, so it can be serialized off the loop."""

    name: str
    mark_delete: Position
    individually_acked: list[list[int]]
    batch_ack_sets: list[tuple[Position, list[int]]]

    def to_json_bytes(self) -> bytes:
        ranges, bitmaps = split_compact(self.individually_acked)
        doc = {
            "format": CURSOR_FORMAT,
            "name": self.name,
            "mark_delete": list(self.mark_delete),
            "individually_acked": ranges,
            "individually_acked_bitmaps": bitmaps,
            "batch_ack_sets": [[p.ledger_id, p.entry_id, bits] for p, bits in self.batch_ack_sets],
        }
        return json.dumps(doc, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_json_bytes(cls, raw: bytes, where: str) -> CursorState:
        try:
            doc: Any = json.loads(raw)
            if doc.get("format") not in _READABLE_FORMATS:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            name = doc["name"]
            ledger_id, entry_id = doc["mark_delete"]
            acked = RangeSet.from_json(
                join_compact(doc["individually_acked"], doc.get("individually_acked_bitmaps", []))
            ).to_json()  # validated now rather than when the cursor is built
            batch = [(Position(int(x[0]), int(x[1])), [int(w) for w in x[2]]) for x in doc["batch_ack_sets"]]
            if not isinstance(name, str):
                raise ValueError("name is not a string")
            return cls(name, Position(int(ledger_id), int(entry_id)), acked, batch)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, binascii.Error) as exc:
            raise StorageError(f"cursor state {where} is not valid: {exc}") from exc


# Shared by every cursor with nothing individually acknowledged (most of them): a cursor makes its
# own on its first individual ack. Never changed.
_NO_ACKS = RangeSet()
_NO_BATCHES: dict[Position, list[int]] = {}


class ManagedCursor:
    """A subscription's position in a managed ledger: everything up to `mark_delete_position` is
    acknowledged, plus the positions acknowledged one by one after it (a RangeSet) and the ack sets
    of partly acknowledged batches. Changed only on the loop by its topic's code; every change tells
    the owner (`cursor_changed`), which persists it at a bounded rate. The broker also builds
    non-durable cursors (readers) on an owner that persists nothing."""

    __slots__ = ("_acked", "_batch_ack_sets", "_ledger", "_mark_delete", "name")

    def __init__(self, name: str, ledger: CursorOwner, mark_delete: Position) -> None:
        self.name = name
        self._ledger = ledger
        self._mark_delete = mark_delete
        self._acked = _NO_ACKS
        self._batch_ack_sets = _NO_BATCHES

    @classmethod
    def from_state(cls, state: CursorState, ledger: CursorOwner) -> ManagedCursor:
        cursor = cls(state.name, ledger, state.mark_delete)
        if state.individually_acked:
            cursor._acked = RangeSet.from_json(state.individually_acked)
            cursor._acked.remove_up_to(state.mark_delete)
        batches = {p: bits for p, bits in state.batch_ack_sets if p > state.mark_delete}
        if batches:
            cursor._batch_ack_sets = batches
        return cursor

    def state(self) -> CursorState:
        return CursorState(
            self.name,
            self._mark_delete,
            self._acked.to_json(),
            [(p, list(bits)) for p, bits in sorted(self._batch_ack_sets.items())],
        )

    def __repr__(self) -> str:
        return f"ManagedCursor({self.name!r}, mark_delete={self._mark_delete}, acked={self._acked!r})"

    # -- queries -------------------------------------------------------------------------------

    @property
    def mark_delete_position(self) -> Position:
        return self._mark_delete

    @property
    def individually_acked(self) -> RangeSet:
        """The live set, not a copy: read it, do not change it (changes would not be persisted)."""
        return self._acked

    def is_acked(self, pos: Position) -> bool:
        return pos <= self._mark_delete or pos in self._acked

    def batch_ack_set(self, pos: Position) -> list[int] | None:
        bits = self._batch_ack_sets.get(pos)
        return None if bits is None else list(bits)

    @property
    def batch_ack_sets(self) -> dict[Position, list[int]]:
        return {p: list(bits) for p, bits in self._batch_ack_sets.items()}

    @property
    def backlog(self) -> int:
        """Entries after mark-delete up to last_confirmed that are not individually acked."""
        last = self._ledger.last_confirmed
        if last is None or self._mark_delete >= last:
            return 0
        # Every individually acked position exists and lies in (mark-delete, last_confirmed].
        return self._ledger.count_entries(self._mark_delete, last) - len(self._acked)

    # -- changes -------------------------------------------------------------------------------

    def ack(self, positions: Iterable[Position]) -> None:
        """Acknowledge positions one by one; positions not in the log, or already acked, are ignored."""
        mark_delete = self._mark_delete
        acked = self._acked
        exists = self._ledger.entry_exists
        changed = False
        for pos in positions:
            if pos <= mark_delete or not exists(pos):
                continue
            pos = Position(*pos)
            if acked is _NO_ACKS:
                acked = self._acked = RangeSet()
            acked.add(pos)
            self._batch_ack_sets.pop(pos, None)
            changed = True
        if changed:
            self._advance()
            self._ledger.cursor_changed(self)

    def ack_cumulative(self, pos: Position) -> None:
        if pos <= self._mark_delete:
            return
        self._mark_delete = Position(*pos)
        if self._acked:
            self._acked.remove_up_to(pos)
        self._advance()
        self._ledger.cursor_changed(self)

    def reset(self, mark_delete: Position) -> None:
        """Seek: everything <= mark_delete counts as acknowledged, nothing after it does."""
        self._mark_delete = Position(*mark_delete)
        self._acked = _NO_ACKS
        self._batch_ack_sets = _NO_BATCHES
        self._ledger.cursor_changed(self)

    def set_batch_ack_set(self, pos: Position, ack_set: list[int] | None) -> None:
        if ack_set is None:
            if self._batch_ack_sets.pop(pos, None) is not None:
                self._ledger.cursor_changed(self)
            return
        if self.is_acked(pos):
            return  # the whole entry is acknowledged already: nothing partial to remember
        if self._batch_ack_sets is _NO_BATCHES:
            self._batch_ack_sets = {}
        self._batch_ack_sets[Position(*pos)] = list(ack_set)
        self._ledger.cursor_changed(self)

    def clip_to(self, last: Position) -> None:
        """Forget state beyond `last`, the end of the log as recovered.

        Only a log that lost acknowledged entries (sync_policy "none" and a power loss) can end
        before its cursors; left alone they would count the entries appended next as acknowledged.
        """
        if self._mark_delete > last:
            self._mark_delete = last
        if self._acked and self._acked.ranges()[-1][1] > last:
            kept = RangeSet()
            for first, end in self._acked.ranges():
                if first > last:
                    break
                kept.add_range(first, min(end, last))  # a straddling range is in last's ledger
            self._acked = kept
        for pos in [p for p in self._batch_ack_sets if p > last]:
            del self._batch_ack_sets[pos]

    def _advance(self) -> None:
        """Move mark-delete over the acked ranges that continue it, then forget what it covers."""
        acked = self._acked
        next_position = self._ledger.next_position
        while True:
            first = acked.first_range()
            if first is None or first[0] != next_position(self._mark_delete):
                break
            self._mark_delete = first[1]
            acked.remove_up_to(first[1])
        if self._batch_ack_sets:
            mark_delete = self._mark_delete
            for pos in [p for p in self._batch_ack_sets if p <= mark_delete]:
                del self._batch_ack_sets[pos]
