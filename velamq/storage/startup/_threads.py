"""How a Storage starts and stops: the data directory's lock, recovery, and the storage threads.

Start: lock the directory (_layout), migrate a format 1 directory (_migrate_v1), bring the entry
logs back to what the index committed and replay the journal (_recovery); on a disk too full for
replay, the ballast is given back and recovery runs again (_ballast). Then the threads are made and
wired together (`StorageThreads.start`): the journal (group commit), the write path that takes its
groups on the loop, the flusher, the garbage collector and its schedule, and the I/O threads'
database connections. `StorageThreads.stop` ends them in the order that leaves nothing behind: the
write path drained, then the journal, the flusher, the collector, the connections.

Storage (_storage) owns what these return; nothing here keeps state of its own.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

from velamq._clock import Clock
from velamq._errors import StorageError
from velamq.storage import _layout
from velamq.storage._caches import ByteLRU
from velamq.storage._config import Counters, StorageConfig
from velamq.storage._position import Position
from velamq.storage._write_errors import failure_kind
from velamq.storage.formats._journal_file import JOURNAL_DIR
from velamq.storage.formats._meta_ops import MetaOp
from velamq.storage.gc._collector import GarbageCollector
from velamq.storage.gc._schedule import GcSchedule
from velamq.storage.index._db_reader import DbReader
from velamq.storage.index._storage_db import StorageDb, ThreadDbs
from velamq.storage.journal._journal import Journal
from velamq.storage.startup._ballast import Ballast
from velamq.storage.startup._migrate_v1 import migrate_if_format_1
from velamq.storage.startup._recovery import JournalRecovery, check_logs, recover_journal
from velamq.storage.write._flusher import Flusher
from velamq.storage.write._log_writer import LogIds, LogWriter
from velamq.storage.write._publish_buffer import PublishBuffer
from velamq.storage.write._write_cache import WriteCache
from velamq.storage.write._write_path import WritePath


@dataclass(frozen=True, slots=True)
class StoragePaths:
    """Where a data directory keeps what."""

    data_dir: Path

    @property
    def journal_dir(self) -> Path:
        return self.data_dir / JOURNAL_DIR

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / _layout.LOGS_DIR

    @property
    def db_path(self) -> Path:
        return self.data_dir / _layout.DB_FILE


def lock(data_dir: Path, wait_s: float = 0.0) -> int:
    """Blocking: create the directory if needed and lock it against a second broker, waiting up to
    wait_s for another process to release it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return _layout.lock_data_dir(data_dir, wait_s)


@dataclass(eq=False, slots=True)
class Recovered:
    """What recovery hands to the threads: the open entry log writer, the log id counter, the
    journal replay's figures, and where the ledger and managed ledger id counters stand."""

    writer: LogWriter
    log_ids: LogIds
    recovery: JournalRecovery
    ledger_id_next: int
    ml_id_next: int


def recover(config: StorageConfig, paths: StoragePaths, ballast: Ballast, clock: Clock) -> Recovered:
    """Blocking: migration, entry logs against the index, journal replay. On a disk too full for
    replay, the ballast is given back and recovery runs again; afterwards the ballast is made again
    if there is room."""
    try:
        result = _recover_once(config, paths, clock)
    except (OSError, StorageError, sqlite3.Error) as exc:
        if failure_kind(exc) != "no_space" or not ballast.release():
            raise
        result = _recover_once(config, paths, clock)
    ballast.make()
    return result


def _recover_once(config: StorageConfig, paths: StoragePaths, clock: Clock) -> Recovered:
    migrate_if_format_1(paths.data_dir, sync=config.sync, log_bytes_max=config.entry_log_bytes_max)
    db = StorageDb(paths.db_path, sync=config.sync, create=True)
    writer: LogWriter | None = None
    try:
        removed, truncated, log_id_next = check_logs(paths.logs_dir, db)
        log_ids = LogIds(log_id_next)
        writer = LogWriter(
            paths.logs_dir,
            db,
            log_ids,
            sync=config.sync,
            log_bytes_max=config.entry_log_bytes_max,
            now_ms=clock.now_ms,
        )
        writer.open()
        recovery = recover_journal(paths.journal_dir, writer)
    except BaseException:
        if writer is not None:
            writer.close()
        db.close()
        raise
    recovery.logs_removed, recovery.log_bytes_truncated = removed, truncated
    recovery.log_id_next = log_id_next
    meta = db.meta()
    return Recovered(
        writer,
        log_ids,
        recovery,
        ledger_id_next=max(1, meta.get("ledger_id_next", 1)),
        ml_id_next=max(1, meta.get("ml_id_next", 1)),
    )


@dataclass(frozen=True, slots=True)
class SharedMemory:
    """The loop-side buffers the write path fills (sized by the memory budget, owned by Storage)."""

    write_cache: WriteCache
    tail_cache: ByteLRU[Position, bytes]
    publish_buffer: PublishBuffer
    counters: Counters


@dataclass(eq=False, slots=True)
class StorageThreads:
    """The threads of a started Storage and the loop-side objects that feed them: built once
    recovery is done (`start`), ended by `stop`."""

    journal: Journal
    flusher: Flusher
    gc: GarbageCollector
    gc_schedule: GcSchedule
    write_path: WritePath
    dbs: ThreadDbs
    reader: DbReader

    @classmethod
    def start(
        cls,
        config: StorageConfig,
        clock: Clock,
        paths: StoragePaths,
        recovered: Recovered,
        memory: SharedMemory,
        *,
        loop: asyncio.AbstractEventLoop,
        io: Executor,
        on_metadata_flushed: Callable[[list[MetaOp]], None],
        on_writable: Callable[[], None],
    ) -> StorageThreads:
        """Make the threads, wire them together and start them (on the loop, after recovery)."""
        write_path = WritePath(
            config,
            loop,
            memory.write_cache,
            memory.tail_cache,
            memory.publish_buffer,
            memory.counters,
            clock,
            on_metadata_flushed,
        )
        journal = _open_journal(config, clock, paths, recovered.recovery.next_seq, write_path, loop)
        write_path.health.on_writable = on_writable
        flusher = Flusher(
            recovered.writer, paths.journal_dir, sync=config.sync, on_flushed=write_path.on_flushed, loop=loop
        )
        gc = GarbageCollector(
            paths.db_path,
            paths.logs_dir,
            recovered.log_ids,
            sync=config.sync,
            log_bytes_max=config.entry_log_bytes_max,
            bytes_per_s=config.gc_bytes_per_s,
            now_ms=clock.now_ms,
            loop=loop,
        )
        journal.start()
        flusher.start()
        gc.start()
        write_path.start(journal, flusher)
        dbs = ThreadDbs(paths.db_path, sync=config.sync)
        reader = DbReader(dbs, io, loop)
        gc_schedule = GcSchedule(config, clock, gc, flusher, reader, write_path.drain, loop)
        return cls(journal, flusher, gc, gc_schedule, write_path, dbs, reader)

    async def stop(self, loop: asyncio.AbstractEventLoop, io: Executor) -> None:
        """Drain the write path (everything durable reaches the entry logs), then end the threads
        and close the I/O threads' connections."""
        self.gc_schedule.stop()
        await self.write_path.drain()
        self.write_path.stop_timer()
        await loop.run_in_executor(io, self.journal.stop)
        await loop.run_in_executor(io, self.flusher.stop)
        await loop.run_in_executor(io, self.gc.stop)
        await loop.run_in_executor(io, self.dbs.close_all)


def _open_journal(
    config: StorageConfig,
    clock: Clock,
    paths: StoragePaths,
    first_seq: int,
    write_path: WritePath,
    loop: asyncio.AbstractEventLoop,
) -> Journal:
    journal = Journal(
        paths.journal_dir,
        first_seq,
        policy=config.sync_policy,
        sync_interval_ms=config.sync_interval_ms,
        segment_bytes=config.journal_segment_bytes,
        deliver=write_path.on_group,
        loop=loop,
        clock=clock,
    )
    journal.open()
    if journal.failure is not None:  # no segment yet (a full disk): not writable until one is made
        write_path.health.journal_failed(journal.failure)
    return journal
