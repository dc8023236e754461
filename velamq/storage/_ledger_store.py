"""LedgerStore: what the broker uses of storage, so that one Storage (one process) and a
ShardedStorage (a Storage per namespace bundle, several worker processes) serve it alike."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from velamq._errors import StorageError
from velamq.storage._config import MemoryBudget
from velamq.storage._position import Position
from velamq.storage.gc._collector import GcResult
from velamq.storage.ledger._managed_ledger import ManagedLedger
from velamq.storage.offload._status import OffloadStatus
from velamq.storage.write._publish_buffer import PublishBuffer


class LedgerStore(Protocol):
    """Managed ledgers by name, with the memory, health and figures of the storage behind them.
    `publish_buffer` and `memory_budget` cover all of it (a whole worker's budget)."""

    @property
    def publish_buffer(self) -> PublishBuffer: ...

    @property
    def memory_budget(self) -> MemoryBudget: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def open_ledger(self, name: str) -> ManagedLedger: ...

    async def open_ledger_if_exists(self, name: str) -> ManagedLedger | None: ...

    async def ledger_exists(self, name: str) -> bool: ...

    async def ledger_names(self, after: str = "", limit: int = 1000) -> list[str]: ...

    async def delete_ledger(self, name: str) -> None: ...

    @property
    def open_ledgers(self) -> dict[str, ManagedLedger]: ...

    @property
    def offload_enabled(self) -> bool: ...

    def request_offload(self, ml: ManagedLedger, up_to: Position) -> bool: ...

    def offload_status(self, name: str) -> OffloadStatus: ...

    async def check_offload(self) -> None: ...

    @property
    def writable(self) -> bool: ...

    @property
    def write_failure(self) -> StorageError | None: ...

    @property
    def ballast_bytes(self) -> int: ...

    @property
    def data_dir(self) -> Path: ...

    async def flush(self) -> None: ...

    async def collect_garbage(self, threshold: float | None = None) -> GcResult: ...

    def metrics(self) -> dict[str, float]: ...
