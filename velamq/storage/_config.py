"""Storage configuration, the one memory budget and how it is split (ME-1), and named limits.

The memory budget (`memory_bytes`, default 1 GiB) is split into

    publish buffer   1/2    bytes appended but not yet durable; above it the broker stops reading
                            producer connections (ME-2, see _publish_buffer)
    tail cache       1/5    newest entries of topics with an active cursor (ME-3, BR-10)
    write cache      3/20   both halves of the double-buffered write cache together (ME-4)
    read cache       1/10   entries loaded by read-ahead on a catch-up read (ME-5)
    index cache      1/20   runs of the entry index (where a ledger's entries are in the entry logs)

Each part can be set on its own (`*_bytes` fields); a part left unset keeps its share of
`memory_bytes`, so overriding one part does not resize the others. Every cache counts an entry as
its data plus a fixed per-entry overhead (the Python objects around it), so the budget holds for
small entries too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from velamq import _limits

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

SyncPolicy = Literal["fsync", "interval", "none"]
SYNC_POLICIES: tuple[str, ...] = ("fsync", "interval", "none")

# Threads for blocking work other than journal, flush and garbage collection: reads on a cache
# miss, opening a managed ledger (a few lookups in the storage database).
io_threads = 2
# Largest entry: a record's length field is a u32, and a run's record ends are u32 offsets.
entry_bytes_max = (1 << 30) - 64
# What one cached entry costs beyond its data: the bytes object header, the key tuple, the dict slot.
cache_entry_overhead_bytes = 160
# What one entry costs in the write cache beyond its data (list slot, CRC, bytes object header).
write_cache_entry_overhead_bytes = 64
# A cursor is active while its reads are within this many entries of the log's end (Pulsar's
# managedLedgerCursorBackloggedThreshold); only topics with an active cursor fill the tail cache.
active_cursor_lag_entries = 1000
# A write cache half is handed to the flusher when it holds this many bytes, or when it is this
# old, whichever comes first; a smaller budget makes for smaller, more frequent flushes.
flush_interval_ms_default = 1000
# Journal segments roll over at this size; trimming deletes whole segments.
journal_segment_bytes_default = 64 * MIB
# A catch-up read that misses every cache reads this much more of the entry log, at most.
read_ahead_bytes_default = 1 * MIB
read_ahead_entries_max = 1000
# Entry logs roll over at this size (BookKeeper's logSizeLimit is 1 GiB; smaller logs make
# compaction cheaper per log). The number of files is about the bytes stored divided by this.
entry_log_bytes_max_default = 256 * MIB

_shares = {
    "publish_buffer": (1, 2),
    "tail_cache": (1, 5),
    "write_cache": (3, 20),
    "read_cache": (1, 10),
    "index_cache": (1, 20),
}


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """How the memory budget is split. All figures in bytes."""

    total_bytes: int
    publish_buffer_bytes: int
    tail_cache_bytes: int
    write_cache_bytes: int  # both halves together
    read_cache_bytes: int
    index_cache_bytes: int

    @classmethod
    def split(
        cls,
        total_bytes: int,
        *,
        publish_buffer_bytes: int | None = None,
        tail_cache_bytes: int | None = None,
        write_cache_bytes: int | None = None,
        read_cache_bytes: int | None = None,
        index_cache_bytes: int | None = None,
    ) -> MemoryBudget:
        given = {
            "publish_buffer": publish_buffer_bytes,
            "tail_cache": tail_cache_bytes,
            "write_cache": write_cache_bytes,
            "read_cache": read_cache_bytes,
            "index_cache": index_cache_bytes,
        }
        parts: dict[str, int] = {}
        for name, (num, den) in _shares.items():
            value = given[name]
            parts[name] = total_bytes * num // den if value is None else value
            if parts[name] < 0:
                raise ValueError(f"{name}_bytes must not be negative")
        return cls(
            total_bytes,
            parts["publish_buffer"],
            parts["tail_cache"],
            parts["write_cache"],
            parts["read_cache"],
            parts["index_cache"],
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "total_bytes": self.total_bytes,
            "publish_buffer_bytes": self.publish_buffer_bytes,
            "tail_cache_bytes": self.tail_cache_bytes,
            "write_cache_bytes": self.write_cache_bytes,
            "read_cache_bytes": self.read_cache_bytes,
            "index_cache_bytes": self.index_cache_bytes,
        }


# -- tiered storage (velamq/storage/offload, docs/offload.md) ----------------------------------
# Where and when sealed ledgers are offloaded; the broker fills it from Pulsar's keys
# (managedLedgerOffloadDriver, fileSystemURI, s3ManagedLedgerOffloadBucket / ServiceEndpoint /
# Region, managedLedgerOffloadThresholdInBytes, managedLedgerOffloadDeletionLagMs). S3 credentials
# come from the environment as the AWS SDK finds them. Nothing here imports pyarrow.

DRIVERS = ("filesystem", "aws-s3", "s3")
deletion_lag_ms_default = 4 * 3600 * 1000
OFFLOADED_DIR = "offloaded"  # the filesystem driver's root under the data directory, by default


@dataclass(frozen=True, slots=True)
class OffloadConfig:
    driver: str = "filesystem"
    uri: str = ""  # fileSystemURI; "" means <data_dir>/offloaded
    bucket: str = ""
    endpoint: str = ""
    region: str = ""
    threshold_bytes: int = -1
    threshold_s: int = -1  # managedLedgerOffloadThresholdInSeconds: offload ledgers sealed longer ago
    deletion_lag_ms: int = deletion_lag_ms_default
    check_interval_s: float = 60.0  # how often topics are checked against the thresholds and the lag
    row_group_rows: int = 65536  # a row group is the unit a read fetches and caches
    row_group_bytes: int = 16 << 20
    compression: str = "zstd"  # the Parquet files' codec

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS:
            raise ValueError(f"managedLedgerOffloadDriver must be one of {', '.join(DRIVERS)}, not {self.driver!r}")
        if self.is_s3 and not self.bucket:
            raise ValueError("the aws-s3 offload driver needs s3ManagedLedgerOffloadBucket")
        if self.deletion_lag_ms < 0:
            raise ValueError("managedLedgerOffloadDeletionLagMs must not be negative")
        if self.check_interval_s <= 0:
            raise ValueError("the offload check interval must be positive")
        if self.row_group_rows < 1 or self.row_group_bytes < 1:
            raise ValueError("row groups must hold at least one row and one byte")

    @property
    def is_s3(self) -> bool:
        return self.driver in ("aws-s3", "s3")

    def root_dir(self, data_dir: Path) -> str:
        """The filesystem driver's root directory, absolute."""
        uri = self.uri
        if uri.startswith("file://"):
            uri = uri[len("file://") :]
        return str((Path(uri) if uri else Path(data_dir) / OFFLOADED_DIR).absolute())

    def describe(self, data_dir: Path) -> str:
        """Where offloaded ledgers go, for logs and errors."""
        if self.is_s3:
            return f"s3://{self.bucket}" + (f" at {self.endpoint}" if self.endpoint else "")
        return self.root_dir(data_dir)


@dataclass(frozen=True, slots=True)
class StorageConfig:
    data_dir: Path
    # "fsync": an append resolves once the journal is fsynced (group commit); nothing acknowledged
    # is ever lost. "interval": it resolves once written to the journal, which is fsynced every
    # sync_interval_ms; a power loss or OS crash loses up to that much. "none": never fsynced;
    # survives a process crash (kill -9), not a power loss. For tests and benchmarks.
    sync_policy: SyncPolicy = "fsync"
    sync_interval_ms: int = 100
    ledger_entries_max: int = _limits.ledger_entries_max  # roll over after this many entries
    ledger_bytes_max: int = _limits.ledger_bytes_max  # ... or this many bytes (record headers included)
    cursor_persist_interval_s: float = 1.0  # a dirty cursor is written at most this often
    memory_bytes: int = 1 * GIB
    publish_buffer_bytes: int | None = None  # None: memory_bytes / 2
    tail_cache_bytes: int | None = None  # None: memory_bytes / 5
    write_cache_bytes: int | None = None  # None: memory_bytes * 3 / 20, both halves
    read_cache_bytes: int | None = None  # None: memory_bytes / 10
    index_cache_bytes: int | None = None  # None: memory_bytes / 20
    flush_interval_ms: int = flush_interval_ms_default
    journal_segment_bytes: int = journal_segment_bytes_default
    read_ahead_bytes: int = read_ahead_bytes_default
    entry_log_bytes_max: int = entry_log_bytes_max_default
    # Garbage collection (_gc), BookKeeper's defaults: every gc_interval_s a pass deletes entry logs
    # with nothing live left; at most every gc_minor_interval_s it also compacts logs whose live
    # share is under gc_minor_threshold, and every gc_major_interval_s those under
    # gc_major_threshold. Copying is limited to gc_bytes_per_s (0: unlimited).
    gc_interval_s: float = 60.0
    gc_minor_threshold: float = 0.2
    gc_minor_interval_s: float = 3600.0
    gc_major_threshold: float = 0.8
    gc_major_interval_s: float = 86400.0
    gc_bytes_per_s: int = 64 * MIB
    # The emergency ballast (_ballast): space kept in <data_dir>/BALLAST and given back when a start
    # finds the disk too full to recover (journal replay writes entry logs and the index). None:
    # the write cache's size, at most 64 MiB and 1/64 of the filesystem (the broker's setting,
    # velamq/server.py); 0, the library's default: no ballast (tests and tools make many stores).
    ballast_bytes: int | None = 0
    # Tiered storage (velamq/storage/offload, docs/offload.md): None, no offloading.
    offload: OffloadConfig | None = None
    # How long `start` waits for another process to release the directory's lock (0: fail at
    # once). ShardedStorage waits while a bundle's previous owner closes it.
    lock_wait_s: float = 0.0

    def __post_init__(self) -> None:
        if self.sync_policy not in SYNC_POLICIES:
            raise ValueError(f"unknown sync_policy {self.sync_policy!r}, expected one of {SYNC_POLICIES}")
        if self.ledger_entries_max < 1 or self.ledger_bytes_max < 1:
            raise ValueError("ledger_entries_max and ledger_bytes_max must be positive")
        if self.cursor_persist_interval_s < 0:
            raise ValueError("cursor_persist_interval_s must not be negative")
        if self.sync_interval_ms < 1 or self.flush_interval_ms < 1:
            raise ValueError("sync_interval_ms and flush_interval_ms must be positive")
        if self.memory_bytes < 1:
            raise ValueError("memory_bytes must be positive")
        if self.journal_segment_bytes < 64 * KIB:
            raise ValueError("journal_segment_bytes must be at least 64 KiB")
        if self.read_ahead_bytes < 0:
            raise ValueError("read_ahead_bytes must not be negative")
        if self.entry_log_bytes_max < 64 * KIB or self.entry_log_bytes_max > 2 * GIB:
            raise ValueError("entry_log_bytes_max must be between 64 KiB and 2 GiB")
        if not 0 <= self.gc_minor_threshold < self.gc_major_threshold <= 1:
            raise ValueError("gc thresholds must satisfy 0 <= gc_minor_threshold < gc_major_threshold <= 1")
        if not 0 < self.gc_interval_s <= self.gc_minor_interval_s <= self.gc_major_interval_s:
            raise ValueError(
                "gc intervals must satisfy 0 < gc_interval_s <= gc_minor_interval_s <= gc_major_interval_s"
            )
        if self.gc_bytes_per_s < 0:
            raise ValueError("gc_bytes_per_s must not be negative")
        if self.ballast_bytes is not None and self.ballast_bytes < 0:
            raise ValueError("ballast_bytes must not be negative")
        if self.lock_wait_s < 0:
            raise ValueError("lock_wait_s must not be negative")
        self.budget  # validates the overrides  # noqa: B018

    @property
    def sync(self) -> bool:
        """Whether entry logs, the storage database and directories are fsynced."""
        return self.sync_policy != "none"

    @property
    def budget(self) -> MemoryBudget:
        return MemoryBudget.split(
            self.memory_bytes,
            publish_buffer_bytes=self.publish_buffer_bytes,
            tail_cache_bytes=self.tail_cache_bytes,
            write_cache_bytes=self.write_cache_bytes,
            read_cache_bytes=self.read_cache_bytes,
            index_cache_bytes=self.index_cache_bytes,
        )


@dataclass(slots=True)
class Counters:
    """Counters kept on the loop (the journal and flusher threads keep their own)."""

    read_entries_cache_total: int = 0
    read_entries_disk_total: int = 0
    ledger_file_reads_total: int = 0  # preads of entry logs (the name is kept from format 1)
    read_ahead_entries_total: int = 0
    ledgers_rolled_total: int = 0
    ledgers_trimmed_total: int = 0
    cursor_persists_total: int = 0
    torn_tails_truncated_total: int = 0
    tail_cache_skipped_inactive_total: int = 0
    pending_appends: int = 0  # appends handed to the journal, not yet resolved (a gauge)
