"""Which ledgers of a topic are due, under its offload policy: to be offloaded (past the size or the
age threshold) and to lose their local copy (offloaded longer ago than the deletion lag).

Pure functions over a topic's ledgers, oldest first, as the managed ledger has them (LedgerInfo),
and over the storage database's summary of a topic nobody has open (StoredOffloadSummary: what may
be due, summed up by SQLite), so the check opens only a log that has something due; the open log
then decides exactly, with the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from velamq.storage._position import LedgerInfo
from velamq.storage.index._storage_db import StoredOffloadSummary
from velamq.storage.offload._status import OffloadPolicy


@dataclass(frozen=True, slots=True)
class Ledger:
    """What the choice needs of one ledger."""

    ledger_id: int
    entries: int
    size_bytes: int
    closed_ms: int | None  # None: the current ledger (never offloaded)
    offloaded_ms: int | None
    local: bool

    @classmethod
    def of_info(cls, info: LedgerInfo) -> Ledger:
        return cls(info.ledger_id, info.entries, info.size_bytes, info.closed_ms, info.offloaded_ms, info.local)


def to_offload(ledgers: Sequence[Ledger], policy: OffloadPolicy, now_ms: int) -> list[int]:
    """The ledgers to offload, oldest first: while the ledgers not offloaded hold more than the size
    threshold, the oldest sealed ones; and every sealed one sealed longer ago than the age threshold."""
    if not policy.automatic:
        return []
    local = sum(ledger.size_bytes for ledger in ledgers if ledger.offloaded_ms is None)
    chosen: list[int] = []
    for ledger in ledgers:
        if ledger.offloaded_ms is not None or ledger.closed_ms is None or not ledger.local or ledger.entries == 0:
            continue
        by_size = 0 <= policy.threshold_bytes < local
        by_age = policy.threshold_s >= 0 and now_ms - ledger.closed_ms > policy.threshold_s * 1000
        if by_size or by_age:
            chosen.append(ledger.ledger_id)
            local -= ledger.size_bytes
    return chosen


def local_copies_due(ledgers: Iterable[Ledger], policy: OffloadPolicy, now_ms: int) -> list[int]:
    """Offloaded ledgers whose local copy is kept no longer (a negative lag keeps them all)."""
    if policy.deletion_lag_ms < 0:
        return []
    return [
        ledger.ledger_id for ledger in ledgers
        if ledger.local and ledger.offloaded_ms is not None and now_ms - ledger.offloaded_ms >= policy.deletion_lag_ms
    ]


def may_be_due(summary: StoredOffloadSummary) -> bool:
    """Whether some policy could find something due: a sealed local ledger not offloaded, or an
    offloaded one still local. A topic with neither needs no policy looked up."""
    return summary.sealed_local > 0 or summary.oldest_offloaded_ms is not None


def stored_due(summary: StoredOffloadSummary, policy: OffloadPolicy, now_ms: int) -> bool:
    """Whether a stored topic has something due under the policy (the same rules as to_offload and
    local_copies_due, over the database's summary)."""
    if summary.sealed_local > 0:
        if 0 <= policy.threshold_bytes < summary.local_bytes:
            return True
        oldest = summary.oldest_sealed_ms
        if policy.threshold_s >= 0 and oldest is not None and now_ms - oldest > policy.threshold_s * 1000:
            return True
    offloaded = summary.oldest_offloaded_ms
    return policy.deletion_lag_ms >= 0 and offloaded is not None and now_ms - offloaded >= policy.deletion_lag_ms
