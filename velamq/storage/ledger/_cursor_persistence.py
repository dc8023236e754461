"""Persisting a managed ledger's cursors: at a bounded rate, and on close (BR-2).

A cursor's state is a metadata operation (CURSOR_PUT, _meta_ops): journaled with the entries (one
group commit for many topics), then written to the `cursors` table of the storage database by the
next flush. There is no file per cursor.

A cursor change marks the cursor dirty. The first change after a quiet spell starts one task that
waits until `cursor_persist_interval_s` has passed since the last round (by the injected clock),
then journals every dirty cursor. A round that fails leaves the cursors dirty and is retried after
the next interval. A crash therefore loses at most the last interval of acknowledgements, which
means redeliveries, never a lost message. Rounds need no lock: operations are journaled in the
order they are submitted, so the newest state submitted is the one that stays.
"""

from __future__ import annotations

import asyncio
import logging

from velamq._errors import StorageError
from velamq.storage.formats import _meta_ops
from velamq.storage.formats._meta_ops import MetaOp
from velamq.storage.ledger._context import StorageContext
from velamq.storage.ledger._cursor import ManagedCursor

log = logging.getLogger("velamq.storage")


class CursorPersistence:
    """One managed ledger's cursors as persisted: added and deleted, the dirty set and the pending
    round."""

    __slots__ = ("_ctx", "_cursors", "_dirty", "_last_persist_s", "_ml_id", "_name", "_task", "open")

    def __init__(self, name: str, ml_id: int, cursors: dict[str, ManagedCursor], ctx: StorageContext) -> None:
        self._name = name
        self._ml_id = ml_id
        self._cursors = cursors  # the managed ledger's live cursors, by name
        self._ctx = ctx
        self._dirty: set[str] | None = None  # made on the first change (an empty set is 216 bytes)
        self._task: asyncio.Task[None] | None = None
        self._last_persist_s = float("-inf")
        self.open = True  # False once the managed ledger closes: no more scheduled rounds

    def changed(self, name: str) -> None:
        """A cursor changed: it is journaled within the interval."""
        if self._dirty is None:
            self._dirty = set()
        self._dirty.add(name)
        if self._task is None and self.open:
            self._task = asyncio.get_running_loop().create_task(self._persist_soon())

    async def add(self, cursor: ManagedCursor) -> None:
        """A new cursor: one of the log's from now on, journaled at once."""
        self._cursors[cursor.name] = cursor
        await self.write_now(cursor)

    async def delete(self, name: str) -> None:
        """The cursor is the log's no more; its deletion is journaled."""
        if self._cursors.pop(name, None) is not None:
            await self.remove(name)

    async def write_now(self, cursor: ManagedCursor) -> None:
        """Journal one cursor at once (a new subscription must survive a crash right after it)."""
        if self._dirty:
            self._dirty.discard(cursor.name)
        await self._submit([_meta_ops.cursor_put(self._ml_id, cursor.name, cursor.state().to_json_bytes())])

    async def remove(self, name: str) -> None:
        if self._dirty:
            self._dirty.discard(name)
        await self._submit([_meta_ops.cursor_delete(self._ml_id, name)])

    async def close(self, *, persist: bool) -> None:
        """Stop the scheduled rounds; with persist, journal what is dirty now."""
        self.open = False
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if persist:
            await self.persist_dirty()

    async def _persist_soon(self) -> None:
        clock = self._ctx.clock
        delay = self._last_persist_s + self._ctx.config.cursor_persist_interval_s - clock.monotonic_s()
        if delay > 0:
            await clock.sleep(delay)
        self._task = None  # changes from here on schedule the next round
        try:
            await self.persist_dirty()
        except StorageError as exc:
            log.error("managed ledger %s: persisting cursors failed, will retry: %s", self._name, exc)
            if self.open and self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._persist_soon())

    async def persist_dirty(self) -> None:
        names, self._dirty = self._dirty or set(), None
        self._last_persist_s = self._ctx.clock.monotonic_s()
        cursors = [self._cursors[n] for n in sorted(names) if n in self._cursors]
        try:
            await self._submit([_meta_ops.cursor_put(self._ml_id, c.name, c.state().to_json_bytes()) for c in cursors])
        except BaseException:
            self._dirty = names | (self._dirty or set())  # not durable: try again next round
            raise

    async def _submit(self, metadata: list[MetaOp]) -> None:
        if not metadata:
            return
        loop = asyncio.get_running_loop()
        journal = self._ctx.journal
        for op in metadata:
            op.future = loop.create_future()
            journal.submit(op)
        error: BaseException | None = None
        for op in metadata:  # in journal order, so awaiting them in turn costs no extra wait
            assert op.future is not None
            try:
                await op.future
            except StorageError as exc:
                error = error or exc
        if error is not None:
            raise StorageError(f"managed ledger {self._name}: cannot persist cursors: {error}")
        self._ctx.counters.cursor_persists_total += len(metadata)
