"""The writer thread: group commit of appends to ledger files (ME-6).

The event loop hands every file-changing operation to this one thread through one FIFO queue.
The thread takes what is queued, all of it, as one group: it writes each file's records with one
writev, fsyncs each touched file once, and only then hands the whole group's results back to the
loop with a single call_soon_threadsafe. One fsync thereby covers every append that arrived while
the previous group was being written, and an append resolves only once durable under the policy.

Because opening, sealing and closing a ledger file travel through the same queue as appends, the
order the loop submits in is the order they happen on disk: a seal always follows the last append
to its ledger, the next ledger is created only after the previous one is sealed and the ledger id
counter persisted.

The queue has no bound of its own: every item references bytes an awaiting caller already holds,
and the broker's publish buffer (ME-2) bounds the bytes in flight. Metrics counters are written
only here and read from the loop (single writer, int reads are atomic under the GIL).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from velamq._errors import StorageError
from velamq.storage import _layout
from velamq.storage._ledger_file import encode_index, record_header
from velamq.storage._position import Position

log = logging.getLogger("velamq.storage")

# writev takes at most IOV_MAX buffers per call (1024 on Linux).
_iov_max = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


class DurabilitySink(Protocol):
    """The loop-side owner of a ledger file (the ManagedLedger), told about its durable appends."""

    def on_durable(self, ledger_id: int, last_entry_id: int, entries: int, size_bytes: int) -> None: ...

    def on_write_failed(self, ledger_id: int, error: StorageError) -> None: ...


@dataclass(eq=False, slots=True)
class FileHandle:
    """The writer thread's end of one ledger file; only the writer thread touches fd and failed."""

    path: Path
    ledger_id: int
    owner: DurabilitySink
    fd: int = -1
    failed: StorageError | None = None
    unsynced: bool = False  # written since its last fsync


@dataclass(eq=False, slots=True)
class AppendOp:
    handle: FileHandle
    position: Position
    data: bytes
    future: asyncio.Future[Position]


@dataclass(eq=False, slots=True)
class OpenOp:
    """Open a ledger file for appending; create it (after persisting the id counter) if asked."""

    handle: FileHandle
    create: bool
    ledger_id_next: int | None
    future: asyncio.Future[None] | None


@dataclass(eq=False, slots=True)
class SealOp:
    """fsync a full ledger's file, write its index file, close it; errors also fail the handle."""

    handle: FileHandle
    offsets: array[int]
    file_bytes: int
    future: asyncio.Future[None]


@dataclass(eq=False, slots=True)
class CloseOp:
    handle: FileHandle
    future: asyncio.Future[None]


Op = AppendOp | OpenOp | SealOp | CloseOp


@dataclass(eq=False, slots=True)
class _Group:
    """The appends of one group commit that went to one file."""

    handle: FileHandle
    ops: list[AppendOp] = field(default_factory=list)
    buffers: list[bytes] = field(default_factory=list)  # not yet written: header, data, header, ...
    size_bytes: int = 0
    # The handle's state when this group was done: a later group may fail it meanwhile.
    error: StorageError | None = None


class Writer:
    def __init__(self, data_dir: Path, loop: asyncio.AbstractEventLoop, *, sync: bool) -> None:
        self._data_dir = data_dir
        self._loop = loop
        self._sync = sync
        self._queue: queue.SimpleQueue[Op | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="velamq-storage-writer", daemon=True)
        self.appends_total = 0
        self.bytes_written_total = 0
        self.fsyncs_total = 0
        self.group_commits_total = 0
        self.entries_per_fsync = 0.0
        self.fsync_seconds_total = 0.0

    def start(self) -> None:
        self._thread.start()

    def submit(self, op: Op) -> None:
        self._queue.put(op)

    def stop(self) -> None:
        """Finish everything queued so far, then end the thread (blocks: call from a thread)."""
        self._queue.put(None)
        self._thread.join()

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        get, get_nowait = self._queue.get, self._queue.get_nowait
        while True:
            batch: list[Op] = []
            item = get()
            stop = item is None
            if item is not None:
                batch.append(item)
            while not stop:
                try:
                    item = get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                else:
                    batch.append(item)
            if batch:
                try:
                    self._process(batch)
                except BaseException as exc:  # never die silently: fail what this group owed
                    log.exception("storage writer: unexpected error")
                    self._fail_all(batch, exc)
            if stop:
                return

    def _process(self, batch: list[Op]) -> None:
        groups: dict[FileHandle, _Group] = {}
        replies: list[tuple[asyncio.Future[None], StorageError | None]] = []
        fsyncs = 0
        for op in batch:
            if type(op) is AppendOp:
                handle = op.handle
                group = groups.get(handle)
                if group is None:
                    group = groups[handle] = _Group(handle)
                group.ops.append(op)
                if handle.failed is None:
                    data = op.data
                    group.buffers.append(record_header(data))
                    group.buffers.append(data)
                    group.size_bytes += 8 + len(data)
                continue
            handle = op.handle
            group = groups.get(handle)
            if group is not None:
                self._write(group)
            if type(op) is OpenOp:
                error = self._open(op)
                if op.future is not None:
                    replies.append((op.future, error))
            elif type(op) is SealOp:
                fsyncs += self._seal(op)
                replies.append((op.future, handle.failed))
            elif type(op) is CloseOp:
                fsyncs += self._close(handle)
                replies.append((op.future, handle.failed))
        appends = 0
        for group in groups.values():
            self._write(group)
            handle = group.handle
            if handle.unsynced and handle.failed is None:
                fsyncs += self._fsync(handle)
            group.error = handle.failed
            appends += len(group.ops)
        self.fsyncs_total += fsyncs
        self.group_commits_total += 1
        if appends:
            self.appends_total += appends
            self.entries_per_fsync = appends / fsyncs if fsyncs else float(appends)
        try:
            self._loop.call_soon_threadsafe(_deliver, list(groups.values()), replies)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _write(self, group: _Group) -> None:
        handle = group.handle
        buffers, group.buffers = group.buffers, []
        if not buffers or handle.failed is not None:
            return
        try:
            if handle.fd < 0:
                raise OSError(f"ledger file {handle.path} is not open")
            _write_all(handle.fd, buffers)
        except OSError as exc:
            handle.failed = StorageError(f"write to {handle.path} failed: {exc}")
            log.error("%s", handle.failed)
            return
        handle.unsynced = True
        self.bytes_written_total += sum(len(b) for b in buffers)

    def _fsync(self, handle: FileHandle) -> int:
        handle.unsynced = False
        if not self._sync:
            return 0
        started = time.perf_counter()
        try:
            _layout.sync_fd(handle.fd)
        except OSError as exc:
            # After a failed fsync the page cache may have dropped the data: the file is suspect.
            handle.failed = StorageError(f"fsync of {handle.path} failed: {exc}")
            log.error("%s", handle.failed)
        self.fsync_seconds_total += time.perf_counter() - started
        return 1

    def _open(self, op: OpenOp) -> StorageError | None:
        handle = op.handle
        try:
            if op.ledger_id_next is not None:
                _layout.write_ledger_id_next(self._data_dir, op.ledger_id_next, sync=self._sync)
            flags = os.O_WRONLY | os.O_APPEND
            if op.create:
                flags |= os.O_CREAT | os.O_EXCL
            handle.fd = os.open(handle.path, flags, 0o644)
            if op.create and self._sync:
                _layout.fsync_dir(handle.path.parent)
        except OSError as exc:
            handle.failed = StorageError(f"cannot open ledger file {handle.path}: {exc}")
            log.error("%s", handle.failed)
        return handle.failed

    def _seal(self, op: SealOp) -> int:
        handle = op.handle
        fsyncs = 0
        if handle.failed is None:
            fsyncs = self._fsync(handle)
        if handle.failed is None:
            try:
                index = encode_index(handle.ledger_id, op.offsets, op.file_bytes)
                index_path = handle.path.with_name(_layout.index_file_name(handle.ledger_id))
                _layout.write_atomic(index_path, index, sync=self._sync)
            except OSError as exc:
                handle.failed = StorageError(f"cannot seal ledger file {handle.path}: {exc}")
                log.error("%s", handle.failed)
        self._close_fd(handle)
        return fsyncs

    def _close(self, handle: FileHandle) -> int:
        fsyncs = 0
        if handle.unsynced and handle.failed is None:
            fsyncs = self._fsync(handle)
        self._close_fd(handle)
        return fsyncs

    def _close_fd(self, handle: FileHandle) -> None:
        if handle.fd >= 0:
            try:
                os.close(handle.fd)
            except OSError as exc:
                log.warning("closing %s: %s", handle.path, exc)
            handle.fd = -1

    def _fail_all(self, batch: list[Op], exc: BaseException) -> None:
        error = StorageError(f"storage writer failed: {exc!r}")
        failed: list[tuple[asyncio.Future[None], StorageError | None]] = []
        groups: dict[FileHandle, _Group] = {}
        for op in batch:
            op.handle.failed = op.handle.failed or error
            if isinstance(op, AppendOp):
                groups.setdefault(op.handle, _Group(op.handle, error=op.handle.failed)).ops.append(op)
            elif op.future is not None:
                failed.append((op.future, error))
        try:
            self._loop.call_soon_threadsafe(_deliver, list(groups.values()), failed)
        except RuntimeError:
            pass


def _deliver(groups: list[_Group], replies: list[tuple[asyncio.Future[None], StorageError | None]]) -> None:
    """On the loop: tell each ledger what became durable, then wake the appenders."""
    for group in groups:
        handle = group.handle
        ops = group.ops
        if group.error is None:
            handle.owner.on_durable(handle.ledger_id, ops[-1].position.entry_id, len(ops), group.size_bytes)
            for op in ops:
                if not op.future.done():
                    op.future.set_result(op.position)
        else:
            handle.owner.on_write_failed(handle.ledger_id, group.error)
            for op in ops:
                if not op.future.done():
                    op.future.set_exception(group.error)
    for future, error in replies:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


def _write_all(fd: int, buffers: list[bytes]) -> None:
    """writev every buffer, in chunks of IOV_MAX, resuming after short writes."""
    for i in range(0, len(buffers), _iov_max):
        chunk = buffers[i : i + _iov_max]
        total = sum(len(b) for b in chunk)
        written = os.writev(fd, chunk)
        if written < total:
            # Rare (disk full, signals): finish the rest with plain writes.
            rest = memoryview(b"".join(chunk))[written:]
            while rest:
                rest = rest[os.write(fd, rest) :]
