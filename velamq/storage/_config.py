"""Storage configuration, the storage's own named limits, and its counters."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from velamq import _limits

MIB = 1024 * 1024

# Recent entries each managed ledger keeps in memory, so a consumer at the tail reads without I/O.
# Keyed by position across ledgers, so a rollover does not empty it at once (BR-10). The later
# shared write cache (ME-1, ME-4) replaces this per-ledger bound with one broker-wide budget.
tail_cache_bytes_max = 4 * MIB
# Sealed ledgers whose offset index a managed ledger keeps loaded (8 bytes per entry each).
index_cache_ledgers_max = 4
# Threads for blocking work other than appends: reads on a cache miss, recovery, cursor files.
io_threads = 2
# Largest entry a ledger record can hold (its length field is a u32).
entry_bytes_max = (1 << 32) - 1


@dataclass(frozen=True, slots=True)
class StorageConfig:
    data_dir: Path
    # "fsync": an append resolves once fsynced (group commit). "none": written, never fsynced:
    # survives a process crash but not a power loss; for tests and benchmarks.
    sync_policy: Literal["fsync", "none"] = "fsync"
    ledger_entries_max: int = _limits.ledger_entries_max  # roll over after this many entries
    ledger_bytes_max: int = _limits.ledger_bytes_max  # ... or this many bytes (record headers included)
    cursor_persist_interval_s: float = 1.0  # a dirty cursor is written at most this often

    def __post_init__(self) -> None:
        if self.sync_policy not in ("fsync", "none"):
            raise ValueError(f"unknown sync_policy {self.sync_policy!r}")
        if self.ledger_entries_max < 1 or self.ledger_bytes_max < 1:
            raise ValueError("ledger_entries_max and ledger_bytes_max must be positive")
        if self.cursor_persist_interval_s < 0:
            raise ValueError("cursor_persist_interval_s must not be negative")

    @property
    def sync(self) -> bool:
        return self.sync_policy == "fsync"


@dataclass(slots=True)
class Counters:
    """Counters kept on the loop (the writer thread keeps its own)."""

    read_entries_cache_total: int = 0
    read_entries_disk_total: int = 0
    ledgers_rolled_total: int = 0
    cursor_persists_total: int = 0
    torn_tails_truncated_total: int = 0
