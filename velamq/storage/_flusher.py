"""The flusher thread: write cache halves to ledger files, then checkpoint and trim the journal.

One flush, for one frozen half of the write cache (_write_cache), in this order:

    1. for each ledger in the half: append its entries, together, to the ledger's file (one
       writev), then fsync the file                                         ("ledgers-written",
                                                                             "ledgers-synced")
    2. write the index file of every ledger sealed in that half, atomically  ("indexes-written")
    3. write the checkpoint: the journal location the half's newest entry reached ("checkpoint-written")
    4. delete the journal segments wholly before the checkpoint              ("journal-trimmed")

A crash anywhere in it is safe, because each step only makes durable what the next one relies on:
until the checkpoint moves (3), replay starts before every entry of this half and rewrites any
that did not make it into the ledger files (recovery cuts a torn record off first); an index file
is written only once its ledger's records are fsynced; segments are deleted only once the
checkpoint that skips them is durable. The names in parentheses are the steps a test hook
(`step_hook`) is called after, to stop the world there.

Deletions of ledger files and managed ledger directories (trim, delete) also run here, so that
they are ordered with flushes: a flush never writes into a file that is being deleted, and the
entries or index of a deleted ledger that are still in a half are skipped, not resurrected.

With sync policy "none" nothing is fsynced. A flush that fails (disk full, I/O error) is reported
to the loop, which stops accepting appends: the journal still holds everything the flush lacked.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from velamq._errors import StorageError
from velamq.storage import _layout
from velamq.storage._journal_file import CHECKPOINT_FILE, encode_checkpoint, list_segments, segment_name
from velamq.storage._ledger_file import RECORD_HEADER, encode_index, write_all
from velamq.storage._write_cache import SealInfo, WriteBuffer

log = logging.getLogger("velamq.storage")


@dataclass(eq=False, slots=True)
class FlushJob:
    buffer: WriteBuffer


@dataclass(eq=False, slots=True)
class DeleteJob:
    """Delete ledger files (trim) or whole managed ledger directories (delete)."""

    ledger_ids: list[int]
    files: list[Path]
    dirs: list[Path]
    generation: int  # the write cache's active generation when the deletion was asked for
    future: asyncio.Future[None]


@dataclass(slots=True)
class FlushResult:
    buffer: WriteBuffer
    error: StorageError | None = None
    sealed: list[SealInfo] = field(default_factory=list)


class Flusher:
    """The flusher thread: takes frozen write cache halves and deletions, in order, from one queue;
    writes each half's entries to the ledger files, fsyncs, writes index files and the checkpoint,
    trims the journal, and reports back to the loop. Deletions run between flushes, so a deleted
    ledger's entries are never written back."""

    def __init__(
        self,
        journal_dir: Path,
        *,
        sync: bool,
        on_flushed: Callable[[FlushResult], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._journal_dir = journal_dir
        self._sync = sync
        self._on_flushed = on_flushed
        self._loop = loop
        self._queue: queue.SimpleQueue[FlushJob | DeleteJob | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="velamq-storage-flusher", daemon=True)
        self._deleted: dict[int, int] = {}  # ledger id -> generation when deleted
        self.step_hook: Callable[[str], None] | None = None  # tests stop the world after a step
        # Counters (written here only).
        self.flushes_total = 0
        self.flush_seconds_total = 0.0
        self.flush_bytes_total = 0
        self.flush_entries_total = 0
        self.flush_files_total = 0
        self.fsyncs_total = 0
        self.indexes_written_total = 0
        self.checkpoints_total = 0
        self.journal_segments_deleted_total = 0
        self.missing_files_total = 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: FlushJob | DeleteJob) -> None:
        self._queue.put(job)

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if type(job) is FlushJob:
                result = FlushResult(job.buffer)
                try:
                    self._flush(job.buffer, result)
                except OSError as exc:
                    result.error = StorageError(f"flushing the write cache failed: {exc}")
                    log.error("%s", result.error)
                except BaseException as exc:
                    log.exception("storage flusher: unexpected error")
                    result.error = StorageError(f"flushing the write cache failed: {exc!r}")
                self._reply(self._on_flushed, result)
            elif type(job) is DeleteJob:
                error: BaseException | None = None
                try:
                    self._delete(job)
                except BaseException as exc:
                    log.exception("storage flusher: deleting %s failed", job.files or job.dirs)
                    error = exc
                self._reply(_resolve, job.future, error)

    def _reply(self, fn: Callable[..., None], *args: object) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed
            pass

    def _step(self, name: str) -> None:
        if self.step_hook is not None:
            self.step_hook(name)

    # -- one flush -----------------------------------------------------------------------------

    def _flush(self, buffer: WriteBuffer, result: FlushResult) -> None:
        started = time.perf_counter()
        # Ledgers deleted before this half was frozen cannot have entries in later halves.
        self._deleted = {i: g for i, g in self._deleted.items() if g >= buffer.generation}
        fds: list[tuple[int, Path]] = []
        try:
            for ledger_id, segment in buffer.segments.items():
                if ledger_id in self._deleted:
                    continue
                path = segment.handle.path
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                except FileNotFoundError:
                    self.missing_files_total += 1
                    log.error("flush: ledger file %s is missing; its %d entries are dropped", path, len(segment.datas))
                    continue
                fds.append((fd, path))
                size = os.fstat(fd).st_size
                if size != segment.file_offset:
                    if size < segment.file_offset:
                        raise StorageError(
                            f"ledger file {path} is {size} bytes, its next entry belongs at {segment.file_offset}"
                        )
                    log.warning("flush: ledger file %s has %d stray bytes at its end, cutting them off",
                                path, size - segment.file_offset)
                    os.ftruncate(fd, segment.file_offset)
                buffers: list[bytes] = []
                pack = RECORD_HEADER.pack
                for data, crc in zip(segment.datas, segment.crcs, strict=True):
                    buffers.append(pack(len(data), crc))
                    buffers.append(data)
                self.flush_bytes_total += write_all(fd, buffers)
                self.flush_entries_total += len(segment.datas)
            self._step("ledgers-written")
            if self._sync:
                for fd, _ in fds:
                    _layout.sync_fd(fd)
                    self.fsyncs_total += 1
        finally:
            for fd, _ in fds:
                os.close(fd)
        self.flush_files_total += len(fds)
        self._step("ledgers-synced")
        self._write_indexes(buffer, result)
        self._step("indexes-written")
        if buffer.journal_end is not None:
            checkpoint = buffer.journal_end
            _layout.write_atomic(self._journal_dir / CHECKPOINT_FILE, encode_checkpoint(checkpoint), sync=self._sync)
            self.checkpoints_total += 1
            self._step("checkpoint-written")
            self._trim_journal(checkpoint.seq)
            self._step("journal-trimmed")
        self.flushes_total += 1
        self.flush_seconds_total += time.perf_counter() - started

    def _write_indexes(self, buffer: WriteBuffer, result: FlushResult) -> None:
        dirs: set[Path] = set()
        for seal in buffer.seals:
            if seal.handle.ledger_id in self._deleted:
                continue
            index = encode_index(seal.handle.ledger_id, seal.offsets, seal.file_bytes, seal.created_ms, seal.closed_ms)
            _layout.write_atomic(seal.index_path, index, sync=self._sync, sync_parent=False)
            dirs.add(seal.index_path.parent)
            result.sealed.append(seal)
            self.indexes_written_total += 1
        if self._sync:
            for directory in dirs:
                _layout.fsync_dir(directory)

    def _trim_journal(self, checkpoint_seq: int) -> None:
        removed = 0
        for seq in list_segments(self._journal_dir):
            if seq >= checkpoint_seq:
                break
            try:
                (self._journal_dir / segment_name(seq)).unlink()
                removed += 1
            except FileNotFoundError:
                pass
        if removed:
            self.journal_segments_deleted_total += removed
            if self._sync:
                _layout.fsync_dir(self._journal_dir)

    # -- deletions -----------------------------------------------------------------------------

    def _delete(self, job: DeleteJob) -> None:
        for ledger_id in job.ledger_ids:
            self._deleted[ledger_id] = job.generation
        parents: set[Path] = set()
        for path in job.files:
            try:
                path.unlink()
                parents.add(path.parent)
            except FileNotFoundError:
                pass
        for directory in job.dirs:
            shutil.rmtree(directory, ignore_errors=True)
            parents.add(directory.parent)
        if self._sync:
            for parent in parents:
                if parent.exists():
                    _layout.fsync_dir(parent)


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error if isinstance(error, StorageError) else StorageError(str(error)))
