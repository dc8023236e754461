"""One managed ledger's directory: recovery when it is opened, and its cursor files.

Everything here blocks; the managed ledger runs it in a storage thread. Layouts: _layout (the
directory), _ledger_file (ledger and index files), _cursor (cursor files).

A managed ledger is opened only when its files are quiescent: after the journal replay at start
(_recovery), or after the same managed ledger was closed, which waits until the flusher has put
all its entries in the files. So the files hold every durable entry, and nothing writes them
while this runs.

Recovery, ledger by ledger in id order: a ledger whose index file verifies is sealed and is
neither scanned nor loaded beyond its index; a ledger without a valid index is scanned and a torn
or corrupt tail cut off (_ledger_file.recover: only possible after a power loss under sync policy
"none"). If it is the newest, it is the current ledger and appends continue in it; if not (a crash
at the wrong moment, or damage) it is sealed now, its closing time taken from the file's mtime.
Left-over temp files of interrupted atomic writes are removed (the files they would have replaced
are intact), and so is an index file whose ledger file is gone (a trim cut short).
"""

from __future__ import annotations

import logging
import os
from array import array
from dataclasses import dataclass
from pathlib import Path

from velamq.storage import _layout
from velamq.storage._cursor import CursorState
from velamq.storage._ledger_file import (
    LEDGER_HEADER_BYTES,
    LedgerIndex,
    encode_index,
    new_offsets,
    read_index,
    recover,
)

log = logging.getLogger("velamq.storage")


@dataclass(slots=True)
class LedgerState:
    ledger_id: int
    entries: int  # durable (and in the write cache or the file)
    size_bytes: int  # durable record bytes, record headers included, the file header not
    assigned: int  # entries with a position, durable or still in flight
    created_ms: int = 0
    closed_ms: int | None = None
    first_ordinal: int = 0  # the managed ledger's running count of entries before this ledger's first


@dataclass(slots=True)
class Recovered:
    """What the recovery thread found on disk, handed to the loop."""

    ledgers: list[LedgerState]
    last_sealed: bool  # the newest ledger is sealed (or there is none): start a new one
    current_offsets: array[int]
    current_file_bytes: int
    indexes: dict[int, LedgerIndex]
    cursors: list[CursorState]
    torn_tails: int


def recover_dir(directory: Path, sync: bool, now_ms: int) -> Recovered:
    names = os.listdir(directory)
    for name in names:
        if name.endswith(_layout.TMP_SUFFIX):
            (directory / name).unlink()  # an atomic write (index, name) cut short
    ids = sorted(i for n in names if (i := _layout.parse_ledger_id(n, _layout.LOG_SUFFIX)) is not None)
    present = set(ids)
    for name in names:
        index_id = _layout.parse_ledger_id(name, _layout.INDEX_SUFFIX)
        if index_id is not None and index_id not in present:
            (directory / name).unlink()  # its ledger was deleted, the index was to follow
    ledgers: list[LedgerState] = []
    indexes: dict[int, LedgerIndex] = {}
    found = Recovered(ledgers, True, new_offsets(), LEDGER_HEADER_BYTES, indexes, [], 0)
    for n, ledger_id in enumerate(ids):
        path = directory / _layout.ledger_file_name(ledger_id)
        index_path = directory / _layout.index_file_name(ledger_id)
        index = read_index(index_path, ledger_id)
        if index is not None:
            size = index.file_bytes - LEDGER_HEADER_BYTES
            ledgers.append(
                LedgerState(ledger_id, index.entries, size, index.entries, index.created_ms, index.closed_ms)
            )
            indexes[ledger_id] = index
            continue
        newest = n == len(ids) - 1
        if index_path.exists():
            log.error("ledger %s: index %s does not verify, rescanning the ledger", path, index_path)
        result = recover(path, ledger_id, now_ms, sync=sync)
        found.torn_tails += result.valid_bytes < result.file_bytes or result.file_bytes < LEDGER_HEADER_BYTES
        created_ms = result.created_ms if result.created_ms is not None else now_ms
        entries = len(result.offsets)
        state = LedgerState(ledger_id, entries, result.valid_bytes - LEDGER_HEADER_BYTES, entries, created_ms)
        ledgers.append(state)
        if newest:
            found.last_sealed = False
            found.current_offsets = result.offsets
            found.current_file_bytes = result.valid_bytes
        else:
            # An older ledger without its index (a crash, or damage): seal it now.
            state.closed_ms = int(os.stat(path).st_mtime * 1000)
            index_bytes = encode_index(ledger_id, result.offsets, result.valid_bytes, created_ms, state.closed_ms)
            _layout.write_atomic(index_path, index_bytes, sync=sync)
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
