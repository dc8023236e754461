"""Writing a managed ledger's cursors to disk: at a bounded rate, and on close (BR-2).

A cursor change marks the cursor dirty. The first change after a quiet spell starts one task that
waits until `cursor_persist_interval_s` has passed since the last write (by the injected clock),
then writes every dirty cursor in one round: one file per cursor, replaced atomically, and one
directory fsync for all of them. A write that fails leaves the cursors dirty and is retried after
the next interval. A crash therefore loses at most the last interval of acknowledgements, which
means redeliveries, never a lost message.

Writes of one managed ledger never overlap: they run under one lock, and a cancelled caller still
waits for its thread to finish before the lock is released (`run_to_end`), so the next write of
the same file cannot race it. Lives on the event loop; the file work runs in the storage's I/O
threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import TypeVar

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq.storage import _layout
from velamq.storage._config import Counters
from velamq.storage._cursor import CursorState, ManagedCursor
from velamq.storage._ledger_dir import remove_file, write_cursor_files

log = logging.getLogger("velamq.storage")

_T = TypeVar("_T")


class CursorPersistence:
    """The dirty set, the pending write task and the write lock of one managed ledger's cursors."""

    __slots__ = (
        "_clock",
        "_counters",
        "_cursors",
        "_dir",
        "_dirty",
        "_interval_s",
        "_io",
        "_last_persist_s",
        "_lock",
        "_loop",
        "_name",
        "_sync",
        "_task",
        "open",
    )

    def __init__(
        self,
        name: str,
        directory: Path,
        cursors: Mapping[str, ManagedCursor],
        *,
        clock: Clock,
        interval_s: float,
        sync: bool,
        io: Executor,
        counters: Counters,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._name = name
        self._dir = directory / _layout.CURSORS_DIR
        self._cursors = cursors  # the managed ledger's live cursors, by name
        self._clock = clock
        self._interval_s = interval_s
        self._sync = sync
        self._io = io
        self._counters = counters
        self._loop = loop
        self._dirty: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._last_persist_s = float("-inf")
        self.open = True  # False once the managed ledger closes: no more scheduled writes

    def changed(self, name: str) -> None:
        """A cursor changed: it is written within the interval."""
        self._dirty.add(name)
        if self._task is None and self.open:
            self._task = self._loop.create_task(self._persist_soon())

    async def write_now(self, cursor: ManagedCursor) -> None:
        """Write one cursor at once (a new subscription must survive a crash right after it)."""
        async with self._lock:
            await self._write([cursor.state()])

    async def remove(self, name: str) -> None:
        self._dirty.discard(name)
        async with self._lock:  # not while a write of it may be in flight
            await self.run_to_end(remove_file, self._path(name), self._sync)

    async def close(self, *, persist: bool) -> None:
        """Stop the scheduled writes; with persist, write what is dirty now."""
        self.open = False
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if persist:
            await self.persist_dirty()

    async def wait_idle(self) -> None:
        """Until no write is running (before the managed ledger's files are removed)."""
        async with self._lock:
            pass

    async def _persist_soon(self) -> None:
        delay = self._last_persist_s + self._interval_s - self._clock.monotonic_s()
        if delay > 0:
            await self._clock.sleep(delay)
        self._task = None  # changes from here on schedule the next round
        try:
            await self.persist_dirty()
        except StorageError as exc:
            log.error("managed ledger %s: persisting cursors failed, will retry: %s", self._name, exc)
            if self.open and self._task is None:
                self._last_persist_s = self._clock.monotonic_s()
                self._task = self._loop.create_task(self._persist_soon())

    async def persist_dirty(self) -> None:
        async with self._lock:
            names, self._dirty = self._dirty, set()
            states = [self._cursors[n].state() for n in sorted(names) if n in self._cursors]
            try:
                await self._write(states)
            except BaseException:
                self._dirty |= names  # not written: try again next round
                raise
            finally:
                self._last_persist_s = self._clock.monotonic_s()

    async def _write(self, states: list[CursorState]) -> None:
        if not states:
            return
        paths = [self._path(s.name) for s in states]
        try:
            await self.run_to_end(write_cursor_files, paths, states, self._sync)
        except OSError as exc:
            raise StorageError(f"managed ledger {self._name}: cannot write cursors: {exc}") from exc
        self._counters.cursor_persists_total += len(states)

    def _path(self, name: str) -> Path:
        return self._dir / (_layout.encode_name(name) + _layout.CURSOR_SUFFIX)

    async def run_to_end(self, fn: Callable[..., _T], *args: object) -> _T:
        """Run fn in an I/O thread; a cancelled caller still waits for the thread to finish."""
        future = self._loop.run_in_executor(self._io, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            while not future.done():
                try:
                    await asyncio.wait({future})
                except asyncio.CancelledError:
                    continue
            raise
