"""One managed ledger's directory: recovery when it is opened, and its cursor files.

Everything here blocks; the managed ledger runs it in a storage thread. Layouts: _layout (the
directory), _ledger_file (ledger and index files), _cursor (cursor files).

Recovery, ledger by ledger in id order: a ledger whose index file verifies is sealed and is
neither scanned nor loaded beyond its index; a ledger without a valid index is scanned and a torn
or corrupt tail cut off (_ledger_file.recover). If it is the newest, it is the current ledger and
appends continue in it; if not (a crash at the wrong moment, or damage) it is sealed now. Left-over
temp files of interrupted atomic writes are removed; the files they would have replaced are intact.
"""

from __future__ import annotations

import logging
import os
from array import array
from dataclasses import dataclass
from pathlib import Path

from velamq.storage import _layout
from velamq.storage._config import index_cache_ledgers_max, tail_cache_bytes_max
from velamq.storage._cursor import CursorState
from velamq.storage._ledger_file import LedgerIndex, encode_index, new_offsets, read_index, recover

log = logging.getLogger("velamq.storage")


@dataclass(slots=True)
class LedgerState:
    ledger_id: int
    entries: int  # durable
    size_bytes: int  # durable, record headers included
    assigned: int  # entries with a position, durable or still in flight


@dataclass(slots=True)
class Recovered:
    """What the recovery thread found on disk, handed to the loop."""

    ledgers: list[LedgerState]
    last_sealed: bool  # the newest ledger is sealed (or there is none): start a new one
    current_offsets: array[int]
    tail: list[bytes]  # data of the newest entries of the unsealed ledger
    indexes: dict[int, LedgerIndex]
    cursors: list[CursorState]
    torn_tails: int


def recover_dir(directory: Path, sync: bool) -> Recovered:
    names = os.listdir(directory)
    for name in names:
        if name.endswith(_layout.TMP_SUFFIX):
            (directory / name).unlink()  # an atomic write (index, name) cut short
    ids = sorted(i for n in names if (i := _layout.parse_ledger_id(n, _layout.LOG_SUFFIX)) is not None)
    ledgers: list[LedgerState] = []
    indexes: dict[int, LedgerIndex] = {}
    found = Recovered(ledgers, True, new_offsets(), [], indexes, [], 0)
    for n, ledger_id in enumerate(ids):
        path = directory / _layout.ledger_file_name(ledger_id)
        index_path = directory / _layout.index_file_name(ledger_id)
        index = read_index(index_path, ledger_id)
        if index is not None:
            ledgers.append(LedgerState(ledger_id, index.entries, index.file_bytes, index.entries))
            indexes[ledger_id] = index
            if len(indexes) > index_cache_ledgers_max:
                del indexes[min(indexes)]
            continue
        newest = n == len(ids) - 1
        if index_path.exists():
            log.error("ledger %s: index %s does not verify, rescanning the ledger", path, index_path)
        result = recover(path, tail_cache_bytes_max if newest else 0, sync=sync)
        found.torn_tails += result.valid_bytes < result.file_bytes
        ledgers.append(LedgerState(ledger_id, len(result.offsets), result.valid_bytes, len(result.offsets)))
        if newest:
            found.last_sealed = False
            found.current_offsets = result.offsets
            found.tail = result.tail
        else:
            # An older ledger without its index (a crash, or damage): seal it now.
            _layout.write_atomic(index_path, encode_index(ledger_id, result.offsets, result.valid_bytes), sync=sync)
    cursors_dir = directory / _layout.CURSORS_DIR
    cursors_dir.mkdir(exist_ok=True)
    for name in sorted(os.listdir(cursors_dir)):
        path = cursors_dir / name
        if name.endswith(_layout.TMP_SUFFIX):
            path.unlink()  # an atomic write cut short; the previous file is intact
        elif name.endswith(_layout.CURSOR_SUFFIX):
            found.cursors.append(CursorState.from_json_bytes(path.read_bytes(), str(path)))
    return found


def write_cursor_files(paths: list[Path], states: list[CursorState], sync: bool) -> None:
    for path, state in zip(paths, states, strict=True):
        _layout.write_atomic(path, state.to_json_bytes(), sync=sync, sync_parent=False)
    if sync:
        _layout.fsync_dir(paths[0].parent)  # one directory fsync for all the renames


def remove_file(path: Path, sync: bool) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    if sync:
        _layout.fsync_dir(path.parent)
