"""Where things live under data_dir, and the small blocking file helpers every part shares.

    <data_dir>/
      LOCK                      flock'd by the one Storage (or checker --delete) using this directory
      BALLAST                   space kept back for a start on a full disk (_ballast)
      storage.db                the storage database (SQLite, WAL): entry index, ledgers, managed
      storage.db-wal, -shm      ledgers, cursors, entry logs, checkpoint, id counters (_storage_db)
      metadata.db               the metadata store's SQLite file (velamq.metadata), not ours
      journal/                  the shared write-ahead log, see _journal_file
        <seq:020d>.wal          journal segments
      logs/
        <log id:010d>.log       shared entry logs: records of many ledgers, see _entry_log

The number of files depends on the bytes stored (entry logs roll over at entry_log_bytes_max,
journal segments at journal_segment_bytes), never on the number of topics or cursors.

A data directory written by storage format 1 (a directory per topic under `ledgers/`, a file per
ledger, `ledger_id_next`, `journal/checkpoint`) is migrated at start (_migrate_v1).

Every function here blocks: call them from a storage thread, never from the event loop.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Sequence
from pathlib import Path

import crc32c

from velamq._errors import StorageError

LOCK_FILE = "LOCK"
BALLAST_FILE = "BALLAST"
DB_FILE = "storage.db"
LOGS_DIR = "logs"
LOG_SUFFIX = ".log"
TMP_SUFFIX = ".tmp"

# writev takes at most IOV_MAX buffers per call (1024 on Linux).
iov_max = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def crc_of(data: bytes | memoryview) -> int:
    """CRC32C (Castagnoli), the checksum of every record and header."""
    return int(crc32c.crc32c(data))


def log_file_name(log_id: int) -> str:
    return f"{log_id:010d}{LOG_SUFFIX}"


def parse_log_id(file_name: str) -> int | None:
    stem = file_name[: -len(LOG_SUFFIX)] if file_name.endswith(LOG_SUFFIX) else ""
    return int(stem) if stem.isdigit() else None


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (files created, renamed or removed in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_fd(fd: int) -> None:
    # fdatasync skips the inode times nobody needs, but still flushes the file size.
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS
        os.fsync(fd)


def write_all(fd: int, buffers: Sequence[bytes | memoryview]) -> int:
    """writev every buffer, in chunks of IOV_MAX, resuming after short writes. Returns the bytes."""
    total_written = 0
    for i in range(0, len(buffers), iov_max):
        chunk = buffers[i : i + iov_max]
        total = sum(map(len, chunk))  # in C: once per buffer, two buffers per journal record
        written = os.writev(fd, chunk)
        if written < total:
            # Rare (disk full, signals): finish the rest with plain writes.
            rest = memoryview(b"".join(chunk))[written:]
            while rest:
                rest = rest[os.write(fd, rest) :]
        total_written += total
    return total_written


def open_retrying(path: Path, flags: int, mode: int = 0o644, *, attempts: int = 6) -> int:
    """os.open, waiting and trying again (10 ms doubling, about 0.6 s in all) while the process or
    the system is out of file descriptors (EMFILE, ENFILE): a connection storm passes, a read
    should not fail for it. Other errors, and the last attempt's, are raised."""
    delay = 0.01
    for attempt in range(attempts):
        try:
            return os.open(path, flags, mode)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or attempt == attempts - 1:
                raise
        time.sleep(delay)  # a storage thread, never the event loop
        delay *= 2
    raise AssertionError("unreachable")


def lock_data_dir(data_dir: Path, wait_s: float = 0.0) -> int:
    """Take the directory's lock, so two brokers never write one data_dir; returns the lock's fd.

    With wait_s > 0 a lock held by another process is tried again (5 ms, doubling up to 250 ms)
    until wait_s has passed: a bundle's next owner waits while the previous one closes it."""
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    delay = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                os.close(fd)
                waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
                raise StorageError(f"{data_dir} is in use by another Storage{waited}") from exc
        time.sleep(min(delay, left))  # a storage thread, never the event loop
        delay = min(delay * 2, 0.25)


def unlock_data_dir(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def lock_is_held(data_dir: Path) -> bool:
    """Whether some process holds data_dir's lock right now (a broker is running there)."""
    lock = data_dir / LOCK_FILE
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return True
        raise
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
