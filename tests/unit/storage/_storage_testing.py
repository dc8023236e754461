"""Helpers shared by the storage tests (a unique module name: tests/ has no __init__.py files)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from velamq.storage import Position, Storage, StorageConfig

T = TypeVar("T")

TOPIC = "persistent://public/default/t"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """pytest-asyncio is not a dependency: each test drives its coroutine with asyncio.run."""
    return asyncio.run(coro)


def config(data_dir: Path, **kwargs: Any) -> StorageConfig:
    kwargs.setdefault("sync_policy", "none")
    return StorageConfig(data_dir=data_dir, **kwargs)


@asynccontextmanager
async def started(data_dir: Path, **kwargs: Any) -> AsyncIterator[Storage]:
    storage = Storage(config(data_dir, **kwargs))
    await storage.start()
    try:
        yield storage
    finally:
        await storage.close()


def payload(i: int, size: int = 0) -> bytes:
    """Recognizable, non-empty entry data of about `size` bytes."""
    head = f"entry-{i}-".encode()
    return head + bytes((i + k) % 251 for k in range(max(0, size - len(head))))


def snapshot(data_dir: Path, to: Path) -> Path:
    """A copy of a data dir as it is on disk right now: what a crash (page cache intact) would leave.

    Taken between storage's own writes (a test hook, or an idle storage): SQLite's WAL is copied
    with the database, its shared-memory index is not (SQLite rebuilds it from the WAL)."""
    shutil.copytree(data_dir, to, ignore=shutil.ignore_patterns("LOCK", "*-shm"))
    return to


async def read_everything(storage: Storage, name: str) -> list[tuple[Position, bytes]]:
    ml = await storage.open_ledger(name)
    return [(e.position, e.data) for e in await ml.read_entries(Position(0, 0), 10_000_000)]


# No flush before the test asks for one: halves are swapped by age only after this long.
NEVER_MS = 3_600_000

