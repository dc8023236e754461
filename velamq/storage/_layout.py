"""Where things live under data_dir, and the small blocking file helpers every part shares.

    <data_dir>/
      LOCK                          flock'd by the one Storage using this directory
      ledger_id_next                next ledger id to hand out: ASCII decimal + "\\n", atomic write
      metadata.db                   the metadata store's SQLite file (velamq.metadata), not ours
      journal/                      the shared write-ahead log, see _journal_file
        <seq:020d>.wal              journal segments
        checkpoint                  where replay starts
      ledgers/
        <encoded topic name>/       one directory per managed ledger
          name                      the topic name, UTF-8 (the directory name may be a hash)
          <ledger id:020d>.log      one file per ledger: header and records, see _ledger_file
          <ledger id:020d>.idx      present once that ledger is sealed and flushed: its offset index
          cursors/
            <encoded cursor>.json   one file per durable cursor, see _cursor

Names are percent-encoded (every byte outside [A-Za-z0-9_-]) so that "/", ":" and "." never reach
the file system, and no name can be "." or "..". An encoded name longer than `encoded_name_chars_max`
becomes "~" + SHA-256 hex instead ("~" never appears in a percent-encoded name), which keeps file
names within the 255-byte limit of common file systems; the `name` file keeps the real name.

Every function here blocks: call them from a storage thread, never from the event loop.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
from pathlib import Path
from urllib.parse import quote, unquote

from velamq._errors import StorageError

LEDGERS_DIR = "ledgers"
CURSORS_DIR = "cursors"
NAME_FILE = "name"
LOCK_FILE = "LOCK"
LEDGER_ID_FILE = "ledger_id_next"
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".idx"
CURSOR_SUFFIX = ".json"
TMP_SUFFIX = ".tmp"

# Leaves room for suffixes such as ".json.tmp" under the usual 255-byte file name limit.
encoded_name_chars_max = 200


def encode_name(name: str) -> str:
    encoded = quote(name, safe="-_").replace(".", "%2E").replace("~", "%7E")
    if len(encoded) > encoded_name_chars_max:
        return "~" + hashlib.sha256(name.encode()).hexdigest()
    return encoded


def decode_name(encoded: str) -> str | None:
    """The name behind a directory or file name, or None when only the `name` file knows it."""
    if encoded.startswith("~"):
        return None
    return unquote(encoded)


def ledger_file_name(ledger_id: int) -> str:
    return f"{ledger_id:020d}{LOG_SUFFIX}"


def index_file_name(ledger_id: int) -> str:
    return f"{ledger_id:020d}{INDEX_SUFFIX}"


def parse_ledger_id(file_name: str, suffix: str) -> int | None:
    stem = file_name[: -len(suffix)] if file_name.endswith(suffix) else ""
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


def write_atomic(path: Path, data: bytes, *, sync: bool, sync_parent: bool = True) -> None:
    """Replace path with data so that a crash leaves either the old or the new content.

    temp file, write, fsync, rename over the target, fsync the directory. With sync=False the
    rename still makes the swap atomic for other readers, just not durable.
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if sync:
            sync_fd(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync and sync_parent:
        fsync_dir(path.parent)


def read_ledger_id_next(data_dir: Path) -> int:
    try:
        text = (data_dir / LEDGER_ID_FILE).read_text("ascii").strip()
    except FileNotFoundError:
        return 1
    if not text.isdigit():
        raise StorageError(f"{data_dir / LEDGER_ID_FILE}: not a ledger id: {text!r}")
    return int(text)


def write_ledger_id_next(data_dir: Path, ledger_id_next: int, *, sync: bool) -> None:
    write_atomic(data_dir / LEDGER_ID_FILE, f"{ledger_id_next}\n".encode("ascii"), sync=sync)


def lock_data_dir(data_dir: Path) -> int:
    """Take the directory's lock, so two brokers never write one data_dir; returns the lock's fd."""
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StorageError(f"{data_dir} is in use by another Storage") from exc
        raise
    return fd


def unlock_data_dir(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def scan_ledger_dirs(
    data_dir: Path, wanted: frozenset[int] = frozenset()
) -> tuple[dict[str, Path], int, dict[int, Path]]:
    """Every managed ledger directory by topic name, the highest ledger id found in any of them,
    and the .log path of each ledger id in `wanted` that exists (journal replay looks them up).

    The highest id guards the persisted counter: even if ledger_id_next were lost, ids stay unique.
    """
    root = data_dir / LEDGERS_DIR
    found: dict[str, Path] = {}
    paths: dict[int, Path] = {}
    ledger_id_max = 0
    if not root.is_dir():
        return found, ledger_id_max, paths
    for child in root.iterdir():
        if not child.is_dir():
            continue
        name = read_name_file(child)
        if name is None:
            continue
        found[name] = child
        for file_name in os.listdir(child):
            ledger_id = parse_ledger_id(file_name, LOG_SUFFIX)
            if ledger_id is not None:
                ledger_id_max = max(ledger_id_max, ledger_id)
                if ledger_id in wanted:
                    paths[ledger_id] = child / file_name
    return found, ledger_id_max, paths


def read_name_file(ledger_dir: Path) -> str | None:
    try:
        return (ledger_dir / NAME_FILE).read_text("utf-8")
    except FileNotFoundError:
        # A directory whose creation was cut short: its name can still come from the encoding.
        return decode_name(ledger_dir.name)


def create_ledger_dir(data_dir: Path, name: str, *, sync: bool) -> Path:
    root = data_dir / LEDGERS_DIR
    root.mkdir(parents=True, exist_ok=True)
    path = root / encode_name(name)
    path.mkdir(exist_ok=True)
    (path / CURSORS_DIR).mkdir(exist_ok=True)
    write_atomic(path / NAME_FILE, name.encode("utf-8"), sync=sync)
    if sync:
        fsync_dir(root)
    return path


def remove_tree(path: Path, sync: bool) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if sync and path.parent.exists():
        fsync_dir(path.parent)
