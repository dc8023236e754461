"""Helpers of the ShardedStorage tests (a unique module name: tests/ has no __init__.py files)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from velamq.storage import ShardedStorage, StorageConfig


def shard_of(shards: int) -> Any:
    """A shard_of as a broker's could be: the ledger name's CRC-32 picks one of `shards` keys."""

    def of(name: str) -> str:
        return f"tenant/ns/0x{zlib.crc32(name.encode()) % shards:08x}"

    return of


def sharded(data_dir: Path, shards: int = 4, *, lock_wait_s: float = 30.0, **kwargs: Any) -> ShardedStorage:
    kwargs.setdefault("sync_policy", "none")
    return ShardedStorage(StorageConfig(data_dir, **kwargs), shard_of=shard_of(shards), lock_wait_s=lock_wait_s)


@asynccontextmanager
async def started_sharded(data_dir: Path, shards: int = 4, **kwargs: Any) -> AsyncIterator[ShardedStorage]:
    storage = sharded(data_dir, shards, **kwargs)
    await storage.start()
    try:
        yield storage
    finally:
        await storage.close()
