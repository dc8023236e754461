"""A fault injected at the OS boundary: the `os` calls storage writes files with, failing for files
under one directory as a full disk or an exhausted descriptor table would.

Only the operating system is faked (os.open, os.writev, os.write, os.fdatasync, os.fsync), never a
storage component; SQLite does its I/O in C and is not affected (the tmpfs tests cover it). A fault
applies to file descriptors whose path (/proc/self/fd) lies under `root`, so sockets, pipes and
other tests' files are left alone. `write_budget` lets that many more bytes through first: a write
that crosses it writes the bytes that fit, then fails, like a disk that fills in the middle of it.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


class FaultyDisk:
    """Arm with `no_space(budget)` or `no_descriptors()`, lift with `heal()`; counts what it failed."""

    def __init__(self, root: Path) -> None:
        self.root = str(root.resolve())
        self._lock = threading.Lock()
        self.space_budget: int | None = None  # None: no space fault; else bytes still writable
        self.descriptors = True
        self.fsync_fails = False
        self.failed_writes = 0
        self.failed_opens = 0
        self._real = {name: getattr(os, name) for name in ("open", "writev", "write", "fdatasync", "fsync")}

    def no_space(self, budget: int = 0) -> None:
        with self._lock:
            self.space_budget = budget

    def no_descriptors(self) -> None:
        self.descriptors = False

    def heal(self) -> None:
        with self._lock:
            self.space_budget = None
            self.descriptors = True
            self.fsync_fails = False

    def _ours(self, fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(self.root)
        except OSError:
            return False

    def _open(self, path: Any, flags: int, mode: int = 0o777, *args: Any, **kwargs: Any) -> int:
        if not self.descriptors and str(Path(os.fspath(path)).resolve()).startswith(self.root):
            self.failed_opens += 1
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        return int(self._real["open"](path, flags, mode, *args, **kwargs))

    def _allow(self, fd: int, size: int) -> int:
        """Bytes of a write of `size` that may go through (all, unless a space fault applies)."""
        if self.space_budget is None or not self._ours(fd):
            return size
        with self._lock:
            if self.space_budget is None:
                return size
            allowed = min(size, self.space_budget)
            self.space_budget -= allowed
            return allowed

    def _no_space(self) -> OSError:
        self.failed_writes += 1
        return OSError(errno.ENOSPC, "No space left on device")

    def _writev(self, fd: int, buffers: Any) -> int:
        data = [bytes(b) for b in buffers]
        total = sum(len(b) for b in data)
        allowed = self._allow(fd, total)
        if allowed == total:
            return int(self._real["writev"](fd, data))
        if allowed:
            self._real["write"](fd, b"".join(data)[:allowed])
        raise self._no_space()

    def _write(self, fd: int, data: Any) -> int:
        data = bytes(data)
        allowed = self._allow(fd, len(data))
        if allowed == len(data):
            return int(self._real["write"](fd, data))
        if allowed:
            self._real["write"](fd, data[:allowed])
        raise self._no_space()

    def _sync(self, name: str) -> Any:
        def sync(fd: int) -> None:
            if self.fsync_fails and self._ours(fd):
                raise OSError(errno.EIO, "Input/output error")
            self._real[name](fd)

        return sync

    @contextmanager
    def installed(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultyDisk]:
        with monkeypatch.context() as patch:
            patch.setattr(os, "open", self._open)
            patch.setattr(os, "writev", self._writev)
            patch.setattr(os, "write", self._write)
            patch.setattr(os, "fdatasync", self._sync("fdatasync"))
            patch.setattr(os, "fsync", self._sync("fsync"))
            yield self
