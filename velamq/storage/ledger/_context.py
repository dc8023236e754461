"""What the managed ledgers of one Storage share, and what their helpers see of a managed ledger.

StorageContext is built once by Storage and handed to every ManagedLedger and its helpers
(_rollover, _read_path, _cursor_persistence, _trim). The protocols are the managed ledger as those
helpers use it, so that none of them imports _managed_ledger (which imports them all).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from velamq._clock import Clock
from velamq.storage._caches import ByteLRU
from velamq.storage._config import Counters, StorageConfig
from velamq.storage._position import Position
from velamq.storage.formats._entry_log import Run
from velamq.storage.index._storage_db import ThreadDbs
from velamq.storage.journal._journal import Journal, LedgerOwner
from velamq.storage.ledger._list import LedgerState
from velamq.storage.write._publish_buffer import PublishBuffer
from velamq.storage.write._write_cache import WriteCache
from velamq.storage.write._write_path import WritePath

_T = TypeVar("_T")


class ClosedLog(Protocol):
    """A managed ledger that closed, as its directory sees it."""

    @property
    def name(self) -> str: ...


class RollingLog(LedgerOwner, Protocol):
    """A managed ledger as its current ledger (_rollover) sees it: the journal's owner of its
    ledgers, with the ids its metadata operations carry."""

    @property
    def name(self) -> str: ...

    @property
    def ml_id(self) -> int: ...


class ReadableLog(Protocol):
    """A managed ledger as its read path (_read_path) sees it: the shape of its log, and blocking
    work run in the storage's I/O threads."""

    @property
    def name(self) -> str: ...

    def ledger_state(self, ledger_id: int) -> LedgerState | None: ...

    def first_at_or_after(self, pos: Position) -> Position | None: ...

    def check_readable(self) -> None: ...

    async def run(self, fn: Callable[..., _T], *args: object) -> _T: ...


class OffloadedCopies(Protocol):
    """The offload's side, as managed ledgers see it: reads of a ledger whose local copy is gone,
    and the deletion of offloaded copies when retention deletes their ledgers."""

    async def read(self, ml_name: str, ledger_id: int, first: int, last: int) -> list[bytes]:
        """Entries first.. of the ledger, at least up to `last` or the end of the row group that
        holds `first` (whichever comes first), exactly as they were stored."""
        ...

    def ledgers_deleted(self, ml_name: str, ledger_ids: list[int]) -> None:
        """The ledgers are deleted (durably): delete their offloaded copies, in the background."""
        ...


@dataclass(frozen=True, slots=True)
class StorageContext:
    """What every managed ledger of one Storage shares."""

    config: StorageConfig
    clock: Clock
    journal: Journal
    write_path: WritePath
    write_cache: WriteCache
    tail_cache: ByteLRU[Position, bytes]
    read_cache: ByteLRU[Position, bytes]
    index_cache: ByteLRU[tuple[int, int], Run]
    publish_buffer: PublishBuffer
    io: Executor
    dbs: ThreadDbs
    logs_dir: Path
    allocate_ledger_id: Callable[[], int]
    counters: Counters
    on_closed: Callable[[ClosedLog], None]  # LedgerDirectory.on_closed: the name opens anew
    offloaded: OffloadedCopies | None = None  # reads of ledgers whose local copy is gone (offload)
