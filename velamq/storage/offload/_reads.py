"""Reads of offloaded ledgers, and deleting offloaded copies: the managed ledgers' side of the
offload (ledger/_context.OffloadedCopies).

A read fetches the row group holding the first entry asked for, rebuilds its entries exactly
(_rows) and returns them from that entry to the end of the group; the read path keeps what is past
the request in the storage's read cache, so a reader going on is served from memory, within the
memory budget (ME-1, ME-5). Manifests are small and kept in a bounded map. Every blocking call runs
in the offload's own read threads, never in storage's I/O threads: an object store that is slow or
down delays reads of offloaded ledgers only, never local reads or appends.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa  # type: ignore[import-untyped]

from velamq._errors import StorageError
from velamq.storage.offload._store import Manifest, OffloadStore

log = logging.getLogger("velamq.storage.offload")

manifests_cached_max = 4096


class OffloadedReader:
    """Reads of offloaded ledgers and deletions of offloaded copies, on the event loop."""

    def __init__(self, store: OffloadStore, reads: ThreadPoolExecutor, writes: ThreadPoolExecutor) -> None:
        self._store = store
        self._reads = reads
        self._writes = writes
        self._manifests: OrderedDict[tuple[str, int], Manifest] = OrderedDict()
        self.row_groups_read_total = 0
        self.deletes_failed_total = 0
        self._deleting: set[asyncio.Task[None]] = set()

    async def manifest(self, ml_name: str, ledger_id: int) -> Manifest:
        key = (ml_name, ledger_id)
        cached = self._manifests.get(key)
        if cached is not None:
            self._manifests.move_to_end(key)
            return cached
        try:
            manifest = await asyncio.get_running_loop().run_in_executor(
                self._reads, self._store.manifest, ml_name, ledger_id
            )
        except (OSError, pa.ArrowException, ValueError, KeyError) as exc:
            raise StorageError(f"the manifest of offloaded ledger {ledger_id} of {ml_name}: {exc}") from exc
        self._manifests[key] = manifest
        while len(self._manifests) > manifests_cached_max:
            self._manifests.popitem(last=False)
        return manifest

    async def read(self, ml_name: str, ledger_id: int, first: int, last: int) -> list[bytes]:
        manifest = await self.manifest(ml_name, ledger_id)
        index = manifest.row_group_of(first)
        try:
            entries = await asyncio.get_running_loop().run_in_executor(
                self._reads, self._store.read_group, manifest, index
            )
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"reading the offloaded copy of ledger {ledger_id} of {ml_name}: {exc}") from exc
        self.row_groups_read_total += 1
        out = [data for entry_id, data in entries if entry_id >= first]
        if not out or entries[-1][0] - entries[0][0] + 1 != len(entries):
            raise StorageError(f"the offloaded copy of ledger {ledger_id} of {ml_name} lacks entries at {first}")
        return out

    def forget(self, ml_name: str, ledger_ids: list[int]) -> None:
        for ledger_id in ledger_ids:
            self._manifests.pop((ml_name, ledger_id), None)

    def ledgers_deleted(self, ml_name: str, ledger_ids: list[int]) -> None:
        """Retention deleted the ledgers: delete their offloaded copies in the background. A copy
        that cannot be deleted now (the store is down) is left for the storage checker."""
        self.forget(ml_name, ledger_ids)
        task = asyncio.get_running_loop().create_task(self._delete(ml_name, ledger_ids))
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)

    async def _delete(self, ml_name: str, ledger_ids: list[int]) -> None:
        loop = asyncio.get_running_loop()
        for ledger_id in ledger_ids:
            try:
                await loop.run_in_executor(self._writes, self._store.delete, ml_name, ledger_id)
            except (OSError, pa.ArrowException) as exc:
                self.deletes_failed_total += 1
                log.warning("could not delete the offloaded copy of ledger %d of %s: %s", ledger_id, ml_name, exc)

    def topic_deleted(self, ml_name: str) -> None:
        """The topic's log is deleted: delete its directory of offloaded copies, in the background."""
        self._manifests = OrderedDict((k, v) for k, v in self._manifests.items() if k[0] != ml_name)
        task = asyncio.get_running_loop().create_task(self._delete_topic(ml_name))
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)

    async def _delete_topic(self, ml_name: str) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._writes, self._store.delete_topic, ml_name)
        except (OSError, pa.ArrowException) as exc:
            self.deletes_failed_total += 1
            log.warning("could not delete the offloaded copies of %s: %s", ml_name, exc)

    async def drain(self) -> None:
        """Wait for deletions in flight (close)."""
        if self._deleting:
            await asyncio.gather(*self._deleting, return_exceptions=True)
