"""The offload of one Storage, assembled: the store (a pyarrow filesystem and the layout), the
reader that serves offloaded ledgers, the offloader, and their threads (one writer, two readers:
never storage's own I/O threads). Storage builds it only when offloading is configured, so pyarrow
is imported only then.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from velamq._clock import Clock
from velamq.storage._config import OffloadConfig
from velamq.storage._position import Position
from velamq.storage.ledger._managed_ledger import ManagedLedger
from velamq.storage.offload._codec import EntryRows
from velamq.storage.offload._offloader import Offloader, OffloadLedgers
from velamq.storage.offload._parquet import WriteLimits
from velamq.storage.offload._reads import OffloadedReader
from velamq.storage.offload._status import OffloadStatus, PolicySource
from velamq.storage.offload._store import OffloadStore, make_filesystem

read_threads = 2


class OffloadService:
    def __init__(self, config: OffloadConfig, data_dir: Path, clock: Clock, codec: EntryRows,
                 ledgers: OffloadLedgers, policies: PolicySource | None = None) -> None:
        fs, root = make_filesystem(config, data_dir)
        limits = WriteLimits(config.row_group_rows, config.row_group_bytes, config.compression)
        self.store = OffloadStore(fs, root, limits, codec)
        self._writes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="velamq-offload-write")
        self._reads = ThreadPoolExecutor(max_workers=read_threads, thread_name_prefix="velamq-offload-read")
        self.reader = OffloadedReader(self.store, self._reads, self._writes)
        self.offloader = Offloader(config, self.store, clock, self._writes, ledgers)
        self.offloader.policies = policies
        self.where = config.describe(data_dir)

    def start(self) -> None:
        self.offloader.start()

    async def close(self) -> None:
        await self.offloader.close()
        await self.reader.drain()
        self._writes.shutdown(wait=False)
        self._reads.shutdown(wait=False)

    def request(self, ml: ManagedLedger, up_to: Position) -> bool:
        return self.offloader.request(ml, up_to)

    def status(self, ml_name: str) -> OffloadStatus:
        return self.offloader.status(ml_name)

    def metrics(self) -> dict[str, float]:
        o = self.offloader
        return {
            "velamq_storage_offload_ledgers_total": o.ledgers_total,
            "velamq_storage_offload_bytes_total": o.bytes_total,
            "velamq_storage_offload_errors_total": o.errors_total,
            "velamq_storage_offload_running": o.running,
            "velamq_storage_offload_local_deleted_total": o.local_deleted_total,
            "velamq_storage_offload_row_groups_read_total": self.reader.row_groups_read_total,
            "velamq_storage_offload_deletes_failed_total": self.reader.deletes_failed_total,
        }
