"""The storage checker's interface: what `velamq admin storage check` (velamq/cli/_storage_check.py)
may use of storage's internals, and nothing else.

    check(data_dir, is_live, broker_running=...) -> StorageCheck   findings in storage.db, logs, journal
    repair(data_dir, findings) -> errors                         remove what the findings allow
    lock_data_dir / unlock_data_dir / lock_is_held                the data directory's lock (one user)

`is_live(topic_name)` tells whether the metadata store knows a topic (None: no metadata store, so
nothing counts as orphaned). docs/storage.md lists the findings and what --delete does with each.
"""

from velamq.storage._check import Finding, StorageCheck, check, repair
from velamq.storage._layout import lock_data_dir, lock_is_held, unlock_data_dir

__all__ = ["Finding", "StorageCheck", "check", "lock_data_dir", "lock_is_held", "repair", "unlock_data_dir"]
