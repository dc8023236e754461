"""Value types of the managed ledger: where an entry is, the entry itself, and a ledger's summary.

A Position is (ledger_id, entry_id). Ledger ids are unique and increasing across one Storage, entry
ids are dense from 0 within a ledger, so plain tuple ordering is log order. entry_id -1 names the
spot just before a ledger's first entry; cursors use it as "nothing acknowledged in this ledger yet".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Position(NamedTuple):
    ledger_id: int
    entry_id: int  # -1 means "before the first entry of that ledger"

    def __str__(self) -> str:
        # Pulsar's own spelling of a position, as the admin API and stats show it.
        return f"{self.ledger_id}:{self.entry_id}"


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    data: bytes


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int  # durable entries in this ledger
    size_bytes: int  # durable bytes of its records (record headers included, the file header not)
    created_ms: int = 0  # epoch ms when the ledger was created (time-based retention, BR-5)
    closed_ms: int | None = None  # epoch ms when it was sealed (rolled over); None while it is current
    offloaded_ms: int | None = None  # epoch ms when its offloaded copy was complete; None: not offloaded
    local: bool = True  # False once its local copy is deleted: reads come from the offloaded copy
