"""The storage checker's interface: what `velamq admin storage check` (velamq/cli/_storage_check.py)
may use of storage's internals, and nothing else.

    check(data_dir, is_live, broker_running=...) -> StorageCheck   findings in storage.db, logs, journal
    repair(data_dir, findings) -> errors                         remove what the findings allow
    lock_data_dir / unlock_data_dir / lock_is_held                the data directory's lock (one user)
    shard_dirs(data_dir) -> [(key, path)]                         ShardedStorage's shards, each a data
                                                                  directory with a lock of its own
    check_offloaded / remove_offloaded                            offloaded files no ledger owns, or
                                                                  missing (velamq/storage/offload/_check)

`is_live(topic_name)` tells whether the metadata store knows a topic (None: no metadata store, so
nothing counts as orphaned). docs/storage.md lists the findings and what --delete does with each.
"""

from __future__ import annotations

from pathlib import Path

from velamq.storage._check import Finding, StorageCheck, check, repair
from velamq.storage._config import OFFLOADED_DIR, OffloadConfig
from velamq.storage._layout import lock_data_dir, lock_is_held, unlock_data_dir
from velamq.storage._shard_layout import shard_dirs
from velamq.storage.offload._status import OffloadFinding


def check_offloaded(config: OffloadConfig, data_dir: Path, *, broker_running: bool) -> list[OffloadFinding]:
    """Offloaded files no ledger owns, temp files, and offloaded copies that are missing. Needs
    pyarrow (imported here, not before: the rest of the checker does without it)."""
    from velamq.storage.offload._check import check_offloaded as check_files

    return check_files(config, data_dir, broker_running=broker_running)


def remove_offloaded(config: OffloadConfig, data_dir: Path, findings: list[OffloadFinding]) -> list[str]:
    """Delete the deletable offload findings; returns errors."""
    from velamq.storage.offload._check import remove_offloaded as remove_files

    return remove_files(config, data_dir, findings)

__all__ = [
    "OFFLOADED_DIR", "Finding", "OffloadFinding", "StorageCheck", "check", "check_offloaded", "lock_data_dir",
    "lock_is_held", "remove_offloaded", "repair", "shard_dirs", "unlock_data_dir",
]
