"""The emergency ballast: space kept back so that storage can start on a full disk.

Starting writes: journal replay copies what the last run journaled but never flushed into the
entry logs and the index, and commits a checkpoint. On a disk that filled up (ENOSPC reached, not
just the broker's read-only threshold) that fails, and a broker that cannot start cannot serve the
consumers and admin deletes that would free space. So storage keeps a file of `ballast_bytes`
(`<data_dir>/BALLAST`, blocks really allocated with posix_fallocate) and, when recovery fails for
lack of space, deletes it and recovers again. CockroachDB keeps an "emergency ballast" for the same
reason. It is made again, when there is room for it twice over, at a start and whenever storage
turns writable again after a failed write.

Replay needs at most what was journaled and not flushed when the broker stopped: about the write
cache (both halves), since the journal refuses appends while flushes fail. Hence the default: the
write cache's size, at most 64 MiB and 1/64 of the filesystem (small test filesystems keep their
room; a large one then has more than the write cache). A clean shutdown leaves nothing to replay;
a start then writes nothing it cannot do without.

Everything here blocks: storage threads call it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from velamq.storage._layout import BALLAST_FILE

log = logging.getLogger("velamq.storage")

MIB = 1 << 20
default_bytes_max = 64 * MIB
filesystem_share_max = 64  # at most 1/64 of the filesystem


def ballast_size(configured: int | None, write_cache_bytes: int, data_dir: Path) -> int:
    """The ballast to keep: as configured, or the default (module docstring)."""
    if configured is not None:
        return configured
    try:
        st = os.statvfs(data_dir)
        fs_bytes = st.f_blocks * st.f_frsize
    except OSError:
        fs_bytes = 0
    size = min(write_cache_bytes, default_bytes_max)
    if fs_bytes:
        size = min(size, fs_bytes // filesystem_share_max)
    return max(size, 0)


class Ballast:
    """The ballast file of one data directory: `make` when there is room, `release` when a start
    needs the space. Counters are read as metrics."""

    def __init__(self, data_dir: Path, size_bytes: int) -> None:
        self.path = data_dir / BALLAST_FILE
        self.size_bytes = size_bytes
        self.releases_total = 0
        self.present_bytes = 0  # as `make` and `release` last found it (read as a metric on the loop)

    def _stat(self) -> int:
        try:
            self.present_bytes = self.path.stat().st_size
        except OSError:
            self.present_bytes = 0
        return self.present_bytes

    def make(self) -> bool:
        """Create the ballast if it is missing and the filesystem has room for it twice over;
        whether it is there afterwards. Never raises for lack of space or descriptors."""
        if self.size_bytes <= 0:
            return False
        if self._stat() >= self.size_bytes:
            return True
        try:
            st = os.statvfs(self.path.parent)
            if st.f_bavail * st.f_frsize < 2 * self.size_bytes:
                return False
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.posix_fallocate(fd, 0, self.size_bytes)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("cannot make the storage ballast %s (%d bytes): %s", self.path, self.size_bytes, exc)
            self.path.unlink(missing_ok=True)
            self.present_bytes = 0
            return False
        self.present_bytes = self.size_bytes
        return True

    def release(self) -> bool:
        """Delete the ballast; whether there was one to delete."""
        present = self._stat()
        if not present:
            return False
        self.path.unlink(missing_ok=True)
        self.present_bytes = 0
        self.releases_total += 1
        log.warning("the disk is full: released the storage ballast %s (%d MiB) to recover", self.path, present >> 20)
        return True
