"""Commits of other processes to the shared metadata file, noticed within about one interval.

Several worker processes share one metadata.db (docs/workers.md); each keeps loop-side caches of
what it read (_caches.py). SQLite's `PRAGMA data_version` changes on a connection exactly when
ANOTHER connection has committed to the file since it was last asked (the connection's own commits
do not change it), so one cheap query per interval, run in the store's SQLite thread, says whether
anything changed at all.

Most commits of a busy broker only add topic rows, which no cache holds: a worker creating
thousands of topics a second must not make every other worker drop its caches and re-apply its
policies ten times a second. So every write of a shared store that changes something cached also
bumps a counter in the file (`bump_cache_version`, in the write's own transaction), and only when
data_version moved is the counter read: a changed counter drops the caches (`drop_caches`), then
each callback registered with `add` is awaited, one after the other (the broker re-applies
policies to its loaded topics, the authorization model reloads, ownership is looked at again).

A read that raced the other process's commit cannot leave a stale answer in a cache: a cache is
only filled if no drop happened since the read was sent (ReadCache.put_if_current), and the read's
result reaches the loop before the result of a later poll does (one thread, answers in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Final

from velamq._errors import MetadataError

log = logging.getLogger(__name__)

ChangeCallback = Callable[[], Awaitable[None]]

# How often a shared store asks whether another process committed (seconds).
watch_interval_s_default: Final = 0.1


def data_version(conn: sqlite3.Connection) -> int:
    """The connection's view of the file's version: changes when another connection commits."""
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def bump_cache_version(conn: sqlite3.Connection) -> None:
    """Tell the other processes that something they may have cached changed (in the caller's
    transaction, so the bump commits, or rolls back, with the change)."""
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('cache_version', '1') "
        "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
    )


def read_cache_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'cache_version'").fetchone()
    return 0 if row is None else int(row[0])


class FileVersion:
    """What the store's thread last saw of the file: `read` is the poll, one PRAGMA unless another
    process committed since, and then one primary-key read more. Touched only in that thread."""

    def __init__(self) -> None:
        self._data_version: int | None = None
        self._cache_version = 0
        # Polls that found other processes' commits (the first poll included); read by metrics
        # and tests on the loop, written only here.
        self.commits_seen = 0

    def read(self, conn: sqlite3.Connection) -> int:
        """The file's cache version."""
        version = data_version(conn)
        if version != self._data_version:
            self._data_version = version
            self._cache_version = read_cache_version(conn)
            self.commits_seen += 1
        return self._cache_version


class ChangeWatcher:
    """Polls `poll()` (FileVersion.read, through the store's thread) every `interval_s` while
    running; a new value is a change."""

    def __init__(
        self,
        poll: Callable[[], Awaitable[int]],
        drop_caches: Callable[[], None],
        interval_s: float = watch_interval_s_default,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("the watch interval must be positive")
        self._poll = poll
        self._drop_caches = drop_caches
        self._interval_s = interval_s
        self._callbacks: list[ChangeCallback] = []
        self._task: asyncio.Task[None] | None = None
        # Changes seen so far (for tests and metrics).
        self.changes_seen = 0

    def add(self, callback: ChangeCallback) -> None:
        self._callbacks.append(callback)

    def remove(self, callback: ChangeCallback) -> None:
        with contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    async def start(self) -> None:
        if self._task is not None:
            return
        first = await self._poll()
        self._task = asyncio.get_running_loop().create_task(self._run(first), name="velamq-metadata-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self, seen: int) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                version = await self._poll()
            except MetadataError as exc:
                # The store is closing (stop() comes next) or the file is unreadable for a moment.
                log.debug("metadata watch: %s", exc)
                continue
            if version != seen:
                seen = version
                await self._changed()

    async def _changed(self) -> None:
        self.changes_seen += 1
        self._drop_caches()
        for callback in list(self._callbacks):
            try:
                await callback()
            except Exception:
                # One listener's failure must not keep the others (or later changes) from running.
                log.exception("metadata change callback %r failed", callback)
