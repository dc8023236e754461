"""Where a cursor goes: the mark-delete position for a seek, a reset or a non-durable start, and the
last message id of a topic (CO-5, WC-3).

A mark-delete position is the last position acknowledged: delivery starts at the entry after it,
so "start at entry e" is the mark-delete position (ledger, e - 1). Message ids as clients send
them mean "earliest" when the ledger id is negative and "latest" when it is 2^63 - 1.
"""

from __future__ import annotations

from velamq.broker.log._compaction import CompactedView
from velamq.broker.log._entry_info import entry_info, last_batch_index
from velamq.protocol import I64_MAX, parse_entry_metadata
from velamq.storage import Entry, ManagedLedger, Position


def before(position: Position) -> Position:
    """The mark-delete position that makes delivery start at `position`."""
    return Position(position.ledger_id, position.entry_id - 1)


def start_of_log(ledger: ManagedLedger) -> Position:
    """The mark-delete position before the first entry still stored."""
    first = ledger.first_position
    return before(first) if first is not None else Position(ledger.current_ledger_id, -1)


def end_of_log(ledger: ManagedLedger) -> Position:
    """The mark-delete position after the last entry: only new entries are delivered."""
    last = ledger.last_confirmed
    return last if last is not None else Position(ledger.current_ledger_id, -1)


def mark_delete_for_message_id(ledger: ManagedLedger, ledger_id: int, entry_id: int) -> Position:
    """Delivery from the message id on (inclusive), with the clients' earliest and latest ids."""
    if ledger_id < 0:
        return start_of_log(ledger)
    if ledger_id == I64_MAX:
        return end_of_log(ledger)
    return Position(ledger_id, entry_id - 1)


async def mark_delete_for_publish_time(ledger: ManagedLedger, timestamp_ms: int) -> Position:
    """Delivery from the first entry published at or after `timestamp_ms`; the end if there is none."""
    found = await ledger.find_first(lambda data: parse_entry_metadata(data).publish_time >= timestamp_ms)
    return end_of_log(ledger) if found is None else before(found)


async def last_message(ledger: ManagedLedger, compacted: CompactedView | None = None) -> tuple[Position, int]:
    """The position of the newest message and its batch index (-1 when its entry is no batch).

    With a compacted view whose horizon covers the whole log, the newest message a compacted
    reader can still get; (current ledger, -1) when there is none."""
    last = ledger.last_confirmed
    empty = (Position(ledger.current_ledger_id, -1), -1)
    if compacted is not None and last is not None and last <= compacted.horizon:
        newest = await compacted.last_message()
        return newest if newest is not None else empty
    if last is None:
        return empty
    return await _last_dispatchable(ledger, last)


# How far back the newest message is looked for behind trailing markers (a few at most: a snapshot
# round writes three).
markers_skipped_max = 32


async def _last_dispatchable(ledger: ManagedLedger, last: Position) -> tuple[Position, int]:
    """The newest entry that is not a marker (markers are never delivered, so a reader asking
    whether a message is available must not count them, as Pulsar's getLastDispatchablePosition);
    looked for in the current ledger, behind at most markers_skipped_max markers."""
    first = Position(last.ledger_id, max(-1, last.entry_id - markers_skipped_max))
    position = last
    while True:
        entries = await ledger.read_entries(position, 1)
        if not entries:
            return last, -1
        if not entry_info(entries[0].data).marker_type:
            return position, last_batch_index(entries[0].data)
        if position.entry_id - 1 <= first.entry_id:
            return Position(position.ledger_id, position.entry_id - 1), -1
        position = Position(position.ledger_id, position.entry_id - 1)


async def read_at(ledger: ManagedLedger, positions: list[Position]) -> list[Entry]:
    """The entries at sorted positions (those still stored), one storage read per contiguous run."""
    out: list[Entry] = []
    i = 0
    while i < len(positions):
        j = i + 1
        while j < len(positions) and positions[j] == ledger.next_position(positions[j - 1]):
            j += 1
        out.extend(await ledger.read_entries(positions[i], j - i))
        i = j
    return out
