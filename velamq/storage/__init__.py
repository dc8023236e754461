"""velamq's storage: per-topic durable logs ("managed ledgers") of opaque entries, and cursors.

Knows nothing of the network or the Pulsar protocol. One Storage per broker, used from one asyncio
loop; blocking work runs in the storage's own threads: the journal (group commit for every topic,
_journal), the flusher (write cache halves into shared entry logs and the SQLite index, checkpoint,
journal trim; _flusher, _log_writer), the garbage collector (_gc) and a few I/O threads (reads,
opening a managed ledger). The number of files depends on the bytes stored, never on the number of
topics. docs/storage.md tells the whole story. Byte layouts: _layout (directories), _journal_file
(journal records), _meta_ops (metadata records), _entry_log (entry logs and runs), _storage_db
(storage.db's tables). Storage (_storage) starts and stops through _storage_startup (lock,
recovery, the threads) and hands out managed ledgers through _ledger_directory (by name, deletion).
A managed ledger (_managed_ledger) delegates to _ledger_list (its ledgers), _ledger_rollover (the
current ledger), _read_path (reads), _cursor_persistence (cursors) and _trim (retention). Sealed
ledgers may be offloaded as Parquet to a filesystem or S3 (offload/, docs/offload.md); the rows are
made by an EntryRows the caller gives Storage, so storage still never reads the entry format. Every
timed behaviour goes through the injected velamq._clock.Clock, so tests can drive time with a
ManualClock. With several worker processes, ShardedStorage (_sharded) keeps a whole Storage per
namespace bundle (a shard: its own directory and lock, opened on first use, closed when the bundle
moves) behind the same surface, LedgerStore (_ledger_store), which the broker is typed against.
"""

from velamq.storage._config import MemoryBudget, OffloadConfig, StorageConfig
from velamq.storage._ledger_store import LedgerStore
from velamq.storage._position import Entry, LedgerInfo, Position
from velamq.storage._range_set import RangeSet
from velamq.storage._sharded import ShardedStorage
from velamq.storage._storage import Storage
from velamq.storage.ledger._cursor import CursorOwner, ManagedCursor
from velamq.storage.ledger._managed_ledger import ManagedLedger
from velamq.storage.offload._codec import EntryRows, RowColumns
from velamq.storage.offload._status import OffloadPolicy, OffloadStatus, PolicySource
from velamq.storage.write._publish_buffer import PublishBuffer

__all__ = [
    "CursorOwner",
    "Entry",
    "EntryRows",
    "LedgerInfo",
    "LedgerStore",
    "ManagedCursor",
    "ManagedLedger",
    "MemoryBudget",
    "OffloadConfig",
    "OffloadPolicy",
    "OffloadStatus",
    "PolicySource",
    "Position",
    "PublishBuffer",
    "RangeSet",
    "RowColumns",
    "ShardedStorage",
    "Storage",
    "StorageConfig",
]
