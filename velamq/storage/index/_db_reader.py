"""The loop's way to the storage database: queries run in the storage's I/O threads.

Each I/O thread has its own SQLite connection (ThreadDbs). `run` runs one query function there.
`load` reads managed ledgers by name for Storage.open_ledger, and batches: every name asked for in
the same turn of the event loop goes in one trip to a thread (topics created together, a few
hundred at a time, share one executor call instead of paying one each).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

from velamq.storage.index._storage_db import StorageDb, StoredLedger, ThreadDbs

_T = TypeVar("_T")


class DbReader:
    """Queries of the storage database from the event loop, run in the I/O threads."""

    def __init__(self, dbs: ThreadDbs, io: Executor, loop: asyncio.AbstractEventLoop) -> None:
        self.dbs = dbs
        self._io = io
        self._loop = loop
        self._lookups: dict[str, asyncio.Future[StoredLedger | None]] = {}  # names to read, next trip

    async def run(self, fn: Callable[[StorageDb], _T]) -> _T:
        """fn(db) with an I/O thread's own connection."""
        dbs = self.dbs
        return await self._loop.run_in_executor(self._io, lambda: fn(dbs.get()))

    def load(self, name: str) -> asyncio.Future[StoredLedger | None]:
        """The managed ledger as stored (None if there is none), read with the other names asked
        for in this turn of the loop."""
        future = self._lookups.get(name)
        if future is None:
            future = self._lookups[name] = self._loop.create_future()
            if len(self._lookups) == 1:
                self._loop.call_soon(self._load_batch)
        return future

    def _load_batch(self) -> None:
        batch, self._lookups = self._lookups, {}
        names = list(batch)
        found = asyncio.ensure_future(self.run(lambda db: db.load_mls(names)))

        def deliver(done: asyncio.Future[dict[str, StoredLedger]]) -> None:
            error = None if done.cancelled() else done.exception()
            for name, future in batch.items():
                if future.done():
                    continue
                if done.cancelled():
                    future.cancel()
                elif error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(done.result().get(name))

        found.add_done_callback(deliver)
