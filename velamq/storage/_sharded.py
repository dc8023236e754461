"""ShardedStorage: a whole Storage per shard (a namespace bundle, to the broker), behind one object
that serves the broker as one Storage does (LedgerStore).

A shard is a directory `<data_dir>/bundles/<key>/` holding a complete Storage: journal, entry logs,
storage.db, its own lock (_shard_layout). The caller's `shard_of(ledger name) -> key` says which
shard a managed ledger lives in; storage never parses the name. A shard is opened at the first
use of one of its ledgers and stays open until `close_shard(key)` or `close()`: so the process that
owns a bundle holds the lock of its directory, and a bundle moves between processes by one closing
the shard (appends complete, cursors written, flushed, unlocked) and the other opening it, which
waits for the lock (`lock_wait_s`) and recovers as any start does. Nothing is copied; a killed
owner's lock goes with its process and the next owner replays the shard's journal.

Memory: the worker's one budget (config.memory_bytes) is split as for one Storage (_config), and
- the publish buffer, the tail cache, the read cache and the index cache are one each for all the
  shards (SharedCaches): hot topics use the worker's caches wherever they live; the shards' ledger
  ids never overlap (_shard_layout), so positions stay unique keys, and a closed shard's entries
  are dropped from them;
- the write cache (a flusher per shard) is divided equally among the shards open, resized as they
  open and close, so the sum stays within write_cache_bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path

from velamq._clock import Clock, system_clock
from velamq._errors import StorageError
from velamq.storage._config import MemoryBudget, StorageConfig
from velamq.storage._ledger_store import LedgerStore
from velamq.storage._position import Position
from velamq.storage._shard_layout import (
    ledger_id_base,
    ledger_id_bits,
    shard_dir,
    shard_id,
    shards_root,
)
from velamq.storage._sharded_metrics import combine_metrics, shared_metrics
from velamq.storage._storage import SharedCaches, Storage
from velamq.storage.gc._collector import GcResult
from velamq.storage.ledger._managed_ledger import ManagedLedger
from velamq.storage.offload._codec import EntryRows
from velamq.storage.offload._status import OffloadStatus, PolicySource
from velamq.storage.write._publish_buffer import PublishBuffer

log = logging.getLogger("velamq.storage")

# How long opening a shard waits for its previous owner (another process) to close it.
lock_wait_s_default = 30.0


class ShardedStorage:
    """Managed ledgers spread over shards, each a Storage of its own directory, opened on first use
    (`shard_of` maps a ledger name to its shard's key, a relative path)."""

    def __init__(
        self,
        config: StorageConfig,
        clock: Clock = system_clock,
        entry_rows: EntryRows | None = None,
        *,
        shard_of: Callable[[str], str],
        lock_wait_s: float = lock_wait_s_default,
    ) -> None:
        if lock_wait_s < 0:
            raise ValueError("lock_wait_s must not be negative")
        self.config = config
        self.clock = clock
        self._entry_rows = entry_rows
        self._shard_of = shard_of
        self._offload_policies: PolicySource | None = None
        self._lock_wait_s = lock_wait_s
        self._data_dir = Path(config.data_dir)
        self.memory_budget: MemoryBudget = config.budget
        self._shared = SharedCaches.for_budget(self.memory_budget)
        self._shards: dict[str, Storage] = {}
        self._opening: dict[str, asyncio.Task[Storage]] = {}
        self._closing: dict[str, asyncio.Task[None]] = {}
        self._state = "new"

    @property
    def publish_buffer(self) -> PublishBuffer:
        return self._shared.publish_buffer

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    async def start(self) -> None:
        """Nothing is opened here: each shard opens at its first use."""
        if self._state != "new":
            raise StorageError(f"sharded storage in {self._data_dir} is {self._state}, cannot start")
        await asyncio.to_thread(shards_root(self._data_dir).mkdir, parents=True, exist_ok=True)
        self._state = "started"

    async def close(self) -> None:
        """Close every shard (appends complete, cursors written, flushed, unlocked)."""
        if self._state != "started":
            return
        self._state = "closing"
        pending = [*self._opening.values(), *self._closing.values()]
        await asyncio.gather(*(asyncio.shield(t) for t in pending), return_exceptions=True)
        keys = list(self._shards)
        results = await asyncio.gather(*(self.close_shard(k) for k in keys), return_exceptions=True)
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, BaseException):
                log.error("closing storage shard %s: %s", key, result)
        self._state = "closed"

    # -- shards ----------------------------------------------------------------------------------

    def open_shards(self) -> list[str]:
        """The keys of the shards open now, in order."""
        return sorted(self._shards)

    def shard_dir(self, key: str) -> Path:
        return shard_dir(self._data_dir, key)

    async def open_shard(self, key: str) -> Storage:
        """Shard `key`, opened now if it is not open (waiting for another process to release its
        lock, up to lock_wait_s); concurrent first uses share one opening."""
        while True:
            shard = self._shards.get(key)
            if shard is not None:
                return shard
            if self._state != "started":
                raise StorageError(f"sharded storage in {self._data_dir} is {self._state}")
            closing = self._closing.get(key)
            if closing is not None:  # its previous opening is still closing: then open it again
                await asyncio.shield(closing)
                continue
            opening = self._opening.get(key)
            if opening is None:
                opening = self._opening[key] = asyncio.ensure_future(self._start_shard(key))
                opening.add_done_callback(partial(self._opened, key))
            return await asyncio.shield(opening)

    def _opened(self, key: str, task: asyncio.Task[Storage]) -> None:
        if self._opening.get(key) is task:
            del self._opening[key]
            self._resize_write_caches()  # a failed opening gives its share back
        if not task.cancelled():
            task.exception()  # whoever waited has it; nobody may have been left to

    async def _start_shard(self, key: str) -> Storage:
        directory = shard_dir(self._data_dir, key)
        number = await asyncio.to_thread(partial(shard_id, self._data_dir, key, sync=self.config.sync))
        config = dataclasses.replace(
            self.config,
            data_dir=directory,
            write_cache_bytes=self._write_cache_share(),
            lock_wait_s=self._lock_wait_s,
        )
        base = ledger_id_base(number)
        storage = Storage(config, self.clock, self._entry_rows, shared=self._shared, ledger_id_base=base)
        if self._offload_policies is not None:
            storage.set_offload_policies(self._offload_policies)
        await storage.start()
        if self._state != "started":  # closed while this shard was opening
            await storage.close()
            raise StorageError(f"sharded storage in {self._data_dir} closed while shard {key} opened")
        self._shards[key] = storage
        self._resize_write_caches()
        log.info("storage shard %s opened (number %d)", key, number)
        return storage

    async def close_shard(self, key: str) -> None:
        """Close shard `key` if open: its managed ledgers (appends complete, cursors written), a
        flush, its threads, its lock, so another process can open it. Its entries leave the
        shared caches. Uses of its ledgers after this open it again."""
        opening = self._opening.get(key)
        if opening is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(opening)
        closing = self._closing.get(key)
        if closing is None:
            shard = self._shards.pop(key, None)
            if shard is None:
                return
            closing = self._closing[key] = asyncio.ensure_future(self._stop_shard(key, shard))
        await asyncio.shield(closing)

    async def _stop_shard(self, key: str, shard: Storage) -> None:
        try:
            await shard.close()
        finally:
            del self._closing[key]
            self._forget_cached(shard)
            self._resize_write_caches()
        log.info("storage shard %s closed", key)

    def _forget_cached(self, shard: Storage) -> None:
        """Drop a closed shard's entries and runs from the shared caches: the next owner may be
        another process, and they would only take room."""
        lowest = shard.ledger_id_base
        highest = lowest + (1 << ledger_id_bits)

        def of_shard(key: tuple[int, int]) -> bool:
            return lowest <= key[0] < highest

        self._shared.tail_cache.discard_if(of_shard)
        self._shared.read_cache.discard_if(of_shard)
        self._shared.index_cache.discard_if(of_shard)

    def _write_cache_share(self) -> int:
        """Each shard's part of the write cache: the shards open and opening share it equally."""
        opening = sum(1 for key in self._opening if key not in self._shards)
        return self.memory_budget.write_cache_bytes // max(1, len(self._shards) + opening)

    def _resize_write_caches(self) -> None:
        share = self._write_cache_share()
        for shard in self._shards.values():
            shard.write_cache.resize(share)

    async def _shard_of_ledger(self, name: str) -> Storage:
        return await self.open_shard(self._shard_of(name))

    # -- managed ledgers ---------------------------------------------------------------------------

    async def open_ledger(self, name: str) -> ManagedLedger:
        return await (await self._shard_of_ledger(name)).open_ledger(name)

    async def open_ledger_if_exists(self, name: str) -> ManagedLedger | None:
        return await (await self._shard_of_ledger(name)).open_ledger_if_exists(name)

    async def ledger_exists(self, name: str) -> bool:
        return await (await self._shard_of_ledger(name)).ledger_exists(name)

    async def delete_ledger(self, name: str) -> None:
        await (await self._shard_of_ledger(name)).delete_ledger(name)

    async def ledger_names(self, after: str = "", limit: int = 1000) -> list[str]:
        """Names of the managed ledgers of the shards open now (the others belong to other
        processes or to nobody yet), in name order, the first `limit` after `after`."""
        pages = await asyncio.gather(*(s.ledger_names(after, limit) for s in list(self._shards.values())))
        return sorted({name for page in pages for name in page})[:limit]

    @property
    def open_ledgers(self) -> dict[str, ManagedLedger]:
        out: dict[str, ManagedLedger] = {}
        for shard in self._shards.values():
            out |= shard.open_ledgers
        return out

    # -- tiered storage ----------------------------------------------------------------------------

    def set_offload_policies(self, policies: PolicySource) -> None:
        """Where each topic's offload policy comes from: every shard, open now or later."""
        self._offload_policies = policies
        for shard in self._shards.values():
            shard.set_offload_policies(policies)

    @property
    def offload_enabled(self) -> bool:
        return self.config.offload is not None

    def request_offload(self, ml: ManagedLedger, up_to: Position) -> bool:
        shard = self._shards.get(self._shard_of(ml.name))
        if shard is None:
            raise StorageError(f"the shard of {ml.name} is not open")
        return shard.request_offload(ml, up_to)

    def offload_status(self, name: str) -> OffloadStatus:
        shard = self._shards.get(self._shard_of(name))
        return shard.offload_status(name) if shard is not None else OffloadStatus()

    async def check_offload(self) -> None:
        await asyncio.gather(*(s.check_offload() for s in list(self._shards.values())))

    # -- health, flush, garbage collection, figures ---------------------------------------------

    @property
    def writable(self) -> bool:
        """False while any open shard is not writable (the disk guard turns the worker read-only)."""
        return self._state == "started" and all(s.writable for s in self._shards.values())

    @property
    def write_failure(self) -> StorageError | None:
        for shard in self._shards.values():
            if shard.write_failure is not None:
                return shard.write_failure
        return None

    @property
    def ballast_bytes(self) -> int:
        return sum(s.ballast_bytes for s in self._shards.values())

    async def flush(self) -> None:
        await asyncio.gather(*(s.flush() for s in list(self._shards.values())))

    async def collect_garbage(self, threshold: float | None = None) -> GcResult:
        """A garbage collection pass in every open shard (at once); their results added up."""
        if self._state != "started":
            raise StorageError(f"sharded storage in {self._data_dir} is {self._state}")
        results = await asyncio.gather(*(s.collect_garbage(threshold) for s in list(self._shards.values())))
        return GcResult(
            logs_deleted=sum(r.logs_deleted for r in results),
            logs_compacted=sum(r.logs_compacted for r in results),
            logs_written=sum(r.logs_written for r in results),
            bytes_reclaimed=sum(r.bytes_reclaimed for r in results),
            bytes_copied=sum(r.bytes_copied for r in results),
            seconds=max((r.seconds for r in results), default=0.0),
            logs=[row for r in results for row in r.logs],
        )

    def metrics(self) -> dict[str, float]:
        """Every open shard's figures as one storage's (_sharded_metrics says how they combine)."""
        shared = shared_metrics(self._shared, self.memory_budget)
        return combine_metrics((s.metrics() for s in self._shards.values()), shared)


def _as_ledger_store(storage: ShardedStorage | Storage) -> LedgerStore:
    """Never called: mypy checks here that both serve as the broker's LedgerStore."""
    return storage
