"""Where ShardedStorage keeps its shards, and the number each shard's ledger ids start from.

    <data_dir>/
      bundles/
        LOCK                  flock'd for a moment while a shard number is handed out
        SHARD_ID_NEXT         the next shard number, ASCII decimal (written by rename)
        <key>/                one whole Storage per shard key (a relative path, e.g.
          SHARD_ID            public/default/0x00000000_0x40000000): its number, ASCII decimal
          LOCK, storage.db, journal/, logs/, ...   as in any data directory (_layout)

Every shard of a data directory has its own number, handed out once under bundles/LOCK and kept in
the shard's SHARD_ID, so it survives moves between processes. Shard n hands out ledger ids from
n << 40: ledger ids stay unique across all shards, so the shards of one process can share the
tail, read and index caches, which key entries by position alone (_caches). 2^40 ledgers per shard
is more than a shard can use (a ledger per topic and rollover), and 2^23 shards keep every id
below 2^63, the largest ledger id Pulsar's clients accept.

Every function here blocks: call them from a thread, never from the event loop.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path, PurePosixPath

from velamq._errors import StorageError
from velamq.storage import _layout

BUNDLES_DIR = "bundles"
SHARD_ID_FILE = "SHARD_ID"
SHARD_ID_NEXT_FILE = "SHARD_ID_NEXT"
ledger_id_bits = 40
shard_id_max = (1 << (63 - ledger_id_bits)) - 1
_reserved = {_layout.LOCK_FILE, SHARD_ID_NEXT_FILE}


def shards_root(data_dir: Path) -> Path:
    return data_dir / BUNDLES_DIR


def shard_dir(data_dir: Path, key: str) -> Path:
    """The directory of shard `key`; a StorageError if the key is not a plain relative path."""
    parts = PurePosixPath(key).parts
    if (
        not key
        or key.startswith("/")
        or "\\" in key
        or "\0" in key
        or any(p in ("", ".", "..") for p in key.split("/"))
        or parts[0] in _reserved
    ):
        raise StorageError(f"a shard key must be a relative path without '.' or '..' parts, not {key!r}")
    return shards_root(data_dir).joinpath(*parts)


def ledger_id_base(shard_id: int) -> int:
    """The first ledger id of shard number shard_id."""
    return shard_id << ledger_id_bits


def shard_id_of(ledger_id: int) -> int:
    return ledger_id >> ledger_id_bits


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not text.isdigit():
        raise StorageError(f"{path} does not hold a number: {text[:40]!r}")
    return int(text)


def _write_int(path: Path, value: int, *, sync: bool) -> None:
    """Write a small number by rename, so a crash leaves the old file or the new one."""
    tmp = path.with_name(path.name + _layout.TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _layout.write_all(fd, [f"{value}\n".encode()])
        if sync:
            _layout.sync_fd(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        _layout.fsync_dir(path.parent)


def shard_id(data_dir: Path, key: str, *, sync: bool) -> int:
    """The number of shard `key`, handed out now if it has none yet (its directory is created)."""
    directory = shard_dir(data_dir, key)
    known = _read_int(directory / SHARD_ID_FILE)
    if known is not None:
        return known
    root = shards_root(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / _layout.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for a few file operations by whoever has it
        known = _read_int(directory / SHARD_ID_FILE)  # another process may have just numbered it
        if known is not None:
            return known
        number = _read_int(root / SHARD_ID_NEXT_FILE) or 1
        if number > shard_id_max:
            raise StorageError(f"{root} has handed out every shard number ({shard_id_max})")
        # The counter first: a crash in between wastes a number, never hands one out twice.
        _write_int(root / SHARD_ID_NEXT_FILE, number + 1, sync=sync)
        _write_int(directory / SHARD_ID_FILE, number, sync=sync)
        return number
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def shard_dirs(data_dir: Path) -> list[tuple[str, Path]]:
    """Every shard directory under data_dir (key, path), in key order: those with a SHARD_ID."""
    root = shards_root(data_dir)
    found: list[tuple[str, Path]] = []
    for current, dirs, files in os.walk(root):
        here = Path(current)
        if SHARD_ID_FILE in files and here != root:
            found.append((here.relative_to(root).as_posix(), here))
            dirs.clear()  # a shard's own journal/ and logs/ hold no shards
    return sorted(found)
