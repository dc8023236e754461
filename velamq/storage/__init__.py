"""velamq's storage: per-topic durable logs ("managed ledgers") of opaque entries, and cursors.

Knows nothing of the network or the Pulsar protocol. One Storage per broker, used from one asyncio
loop; blocking file work runs in the storage's own threads (one writer doing group commit, a few
for reads and cursor files). Byte layouts: _layout (directories), _ledger_file (records, index),
_cursor (cursor files).
"""

from velamq.storage._config import StorageConfig
from velamq.storage._cursor import CursorOwner, ManagedCursor
from velamq.storage._managed_ledger import ManagedLedger
from velamq.storage._position import Entry, LedgerInfo, Position
from velamq.storage._range_set import RangeSet
from velamq.storage._storage import Storage

__all__ = [
    "CursorOwner",
    "Entry",
    "LedgerInfo",
    "ManagedCursor",
    "ManagedLedger",
    "Position",
    "RangeSet",
    "Storage",
    "StorageConfig",
]
