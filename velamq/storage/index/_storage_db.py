"""The storage database (`storage.db`, SQLite in WAL mode): entry index and storage metadata.

One SQLite file instead of a file per ledger, per topic and per cursor. Its tables:

    meta             key -> integer: format (2), ledger_id_next, ml_id_next, checkpoint_seq and
                     checkpoint_offset (where journal replay starts), migrating (format 1 data being
                     copied in, _migrate_v1)
    managed_ledgers  id -> topic name (unique)
    ledgers          id -> ml, entries and size_bytes flushed so far, created_ms, closed_ms (NULL
                     while current), offloaded_ms and local_deleted_ms (NULL unless offloaded, and
                     unless its local copy is gone); indexed by (ml, id), so a topic's ledger list
                     is one range scan
    entries          (ledger, first_entry) -> n, log, pos, bytes, ends: one row per run (a ledger's
                     dense entries written back to back by one flush, _entry_log.Run); WITHOUT
                     ROWID, so rows are stored in key order; indexed by log for the garbage collector
    logs             id -> total_bytes (committed length of the file), live_bytes (bytes of runs
                     still indexed), sealed (0 for the log the flusher appends to)
    cursors          (ml, name) -> state (the cursor's JSON, _cursor); WITHOUT ROWID

`ends` packs the runs's record ends as u32 little-endian, relative to pos. One row per run and
not per entry (BookKeeper's RocksDB index keeps a row per entry): a flush writes each ledger's
entries back to back, so a busy ledger costs a row per flush, an idle one a row per entry.

Writers: the flusher (one transaction per flush: metadata operations, index rows, log lengths and
the checkpoint together, _flusher), the garbage collector (one per compaction batch, _gc), and
recovery before either starts. Readers: the I/O threads (opening a managed ledger, locating runs).
Every thread has its own connection; WAL lets readers run while a writer commits, and writers wait
for each other (busy timeout). With sync, commits are synchronous=FULL (the WAL is fsynced).

Everything here blocks: call it from a storage thread, never from the event loop.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from velamq._errors import StorageError
from velamq.storage.formats._entry_log import Run, pack_ends, unpack_ends
from velamq.storage.formats._meta_ops import MetaOp
from velamq.storage.index import _changes as _changes

log = logging.getLogger("velamq.storage")

FORMAT = 2
# A writer waits this long for another writer's transaction before giving up.
busy_timeout_s = 120.0
# SQLite's page cache per connection (negative: KiB).
cache_kib = 8 * 1024
# Runs a lookup loads after the one it asked for (a reader that goes on finds them cached).
locate_prefetch_runs = 8

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS managed_ledgers (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS ledgers (
    id INTEGER PRIMARY KEY, ml INTEGER NOT NULL, entries INTEGER NOT NULL DEFAULT 0,
    size_bytes INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL, closed_ms INTEGER,
    offloaded_ms INTEGER, local_deleted_ms INTEGER);
CREATE INDEX IF NOT EXISTS ledgers_by_ml ON ledgers (ml, id);
CREATE TABLE IF NOT EXISTS entries (
    ledger INTEGER NOT NULL, first_entry INTEGER NOT NULL, n INTEGER NOT NULL, log INTEGER NOT NULL,
    pos INTEGER NOT NULL, bytes INTEGER NOT NULL, ends BLOB NOT NULL,
    PRIMARY KEY (ledger, first_entry)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_by_log ON entries (log);
CREATE TABLE IF NOT EXISTS logs (
    id INTEGER PRIMARY KEY, total_bytes INTEGER NOT NULL, live_bytes INTEGER NOT NULL,
    sealed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS cursors (
    ml INTEGER NOT NULL, name TEXT NOT NULL, state BLOB NOT NULL, PRIMARY KEY (ml, name)) WITHOUT ROWID;
"""

_RUN_COLUMNS = "ledger, first_entry, n, log, pos, ends"
# Ids per "IN (...)" (SQLite allows 32766 parameters; smaller chunks keep statements cheap).
_IN_CHUNK = 500


@dataclass(frozen=True, slots=True)
class LedgerRow:
    ledger_id: int
    entries: int
    size_bytes: int
    created_ms: int
    closed_ms: int | None
    offloaded_ms: int | None = None  # when its offloaded copy was complete (velamq/storage/offload)
    local_deleted_ms: int | None = None  # when its local copy was deleted (it is read from the offload)


@dataclass(frozen=True, slots=True)
class StoredOffloadSummary:
    """A stored managed ledger as the offload's check sees it (StorageDb.offload_summaries)."""

    name: str
    local_bytes: int  # bytes of its ledgers not offloaded (the current one included)
    sealed_local: int  # sealed ledgers, not offloaded, local, with entries: what may be offloaded
    oldest_sealed_ms: int | None  # when the oldest of those was sealed
    oldest_offloaded_ms: int | None  # when the oldest offloaded ledger still local was offloaded


@dataclass(frozen=True, slots=True)
class LogRow:
    log_id: int
    total_bytes: int
    live_bytes: int
    sealed: bool


@dataclass(frozen=True, slots=True)
class StoredLedger:
    """A managed ledger as the database has it (what opening one reads)."""

    ml_id: int
    ledgers: list[LedgerRow]
    cursors: list[tuple[str, bytes]]


def _run(row: tuple[int, int, int, int, int, bytes]) -> Run:
    return Run(row[0], row[1], row[2], row[3], row[4], unpack_ends(row[5]))


class StorageDb:
    """One connection to storage.db, and every query storage makes (blocking; one thread each)."""

    def __init__(self, path: Path, *, sync: bool, create: bool = False) -> None:
        self.path = path
        if not create and not path.exists():
            raise StorageError(f"{path} does not exist")
        try:
            self._conn = sqlite3.connect(
                str(path), isolation_level=None, check_same_thread=False, timeout=busy_timeout_s
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={'FULL' if sync else 'OFF'}")
            self._conn.execute(f"PRAGMA cache_size=-{cache_kib}")
            if create:
                self._conn.executescript(_SCHEMA)
                self._conn.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc
        fmt = self.meta().get("format")
        if fmt != FORMAT:
            raise StorageError(f"{path}: storage format {fmt}, this version reads format {FORMAT}")
        _changes.add_offload_columns(self._conn)

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE (take the write lock now) ... COMMIT; ROLLBACK on an exception, the
        COMMIT's own included (a full disk fails it and leaves the transaction open: rolled back,
        the next transaction can begin when space is back)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    # -- meta ----------------------------------------------------------------------------------

    def meta(self) -> dict[str, int]:
        return {k: int(v) for k, v in self._conn.execute("SELECT key, value FROM meta")}

    def set_meta(self, items: dict[str, int]) -> None:
        self._conn.executemany(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            list(items.items()),
        )

    def delete_meta(self, key: str) -> None:
        self._conn.execute("DELETE FROM meta WHERE key = ?", (key,))

    def raise_meta(self, key: str, value: int) -> None:
        """meta[key] = max(meta[key], value): counters never go back."""
        self._conn.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)",
            (key, value),
        )

    # -- managed ledgers -----------------------------------------------------------------------

    def find_ml(self, name: str) -> int | None:
        row = self._conn.execute("SELECT id FROM managed_ledgers WHERE name = ?", (name,)).fetchone()
        return None if row is None else int(row[0])

    def load_ml(self, name: str) -> StoredLedger | None:
        """A managed ledger's ledgers and cursors: three index lookups, no scan."""
        ml_id = self.find_ml(name)
        if ml_id is None:
            return None
        ledgers = [
            LedgerRow(*row)
            for row in self._conn.execute(
                "SELECT id, entries, size_bytes, created_ms, closed_ms, offloaded_ms, local_deleted_ms FROM ledgers "
                "WHERE ml = ? ORDER BY id",
                (ml_id,),
            )
        ]
        cursors = [(str(n), bytes(s)) for n, s in self._conn.execute("SELECT name, state FROM cursors WHERE ml = ?",
                                                                      (ml_id,))]
        return StoredLedger(ml_id, ledgers, cursors)

    def ledger_ids_of(self, ml_id: int) -> list[int]:
        return [int(r[0]) for r in self._conn.execute("SELECT id FROM ledgers WHERE ml = ? ORDER BY id", (ml_id,))]

    def offload_flags(self) -> dict[int, tuple[bool, bool]]:
        """(offloaded, local copy kept) of every ledger (the checker's offloaded files)."""
        query = "SELECT id, offloaded_ms IS NOT NULL, local_deleted_ms IS NULL FROM ledgers"
        return {int(i): (bool(o), bool(k)) for i, o, k in self._conn.execute(query)}

    def ledger_entries(self, ledger_id: int) -> int | None:
        """Entries of the ledger in the index, or None if the ledger is unknown (or deleted)."""
        row = self._conn.execute("SELECT entries FROM ledgers WHERE id = ?", (ledger_id,)).fetchone()
        return None if row is None else int(row[0])

    def ml_names(self, after: str = "", limit: int = 10_000) -> list[tuple[int, str]]:
        """(id, name) of managed ledgers in name order, a page at a time (the checker)."""
        return [
            (int(i), str(n))
            for i, n in self._conn.execute(
                "SELECT id, name FROM managed_ledgers WHERE name > ? ORDER BY name LIMIT ?", (after, limit)
            )
        ]

    def offload_summaries(self, after: str = "", limit: int = 1000) -> list[StoredOffloadSummary]:
        """For the managed ledgers after `after` in name order (a page of `limit` names), what the
        offload's check needs to know whether anything may be due, summed up by SQLite: one query,
        one small tuple a name (the check of topics nobody has open, storage/offload)."""
        candidate = ("l.offloaded_ms IS NULL AND l.closed_ms IS NOT NULL AND l.local_deleted_ms IS NULL "
                     "AND l.entries > 0")
        rows = self._conn.execute(
            "SELECT m.name, COALESCE(SUM(CASE WHEN l.offloaded_ms IS NULL THEN l.size_bytes END), 0), "
            f"COUNT(CASE WHEN {candidate} THEN 1 END), MIN(CASE WHEN {candidate} THEN l.closed_ms END), "
            "MIN(CASE WHEN l.offloaded_ms IS NOT NULL AND l.local_deleted_ms IS NULL THEN l.offloaded_ms END) "
            "FROM (SELECT id, name FROM managed_ledgers WHERE name > ? ORDER BY name LIMIT ?) m "
            "LEFT JOIN ledgers l ON l.ml = m.id GROUP BY m.id, m.name ORDER BY m.name",
            (after, limit),
        )
        return [StoredOffloadSummary(str(n), int(b), int(c), s, o) for n, b, c, s, o in rows]

    # -- the entry index -----------------------------------------------------------------------

    def locate(self, ledger_id: int, entry_id: int) -> list[Run]:
        """The run holding (ledger_id, entry_id), then the runs after it; [] if none holds it."""
        row = self._conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM entries WHERE ledger = ? AND first_entry <= ? "
            "ORDER BY first_entry DESC LIMIT 1",
            (ledger_id, entry_id),
        ).fetchone()
        if row is None:
            return []
        first = _run(row)
        if not first.covers(entry_id):
            return []
        rows = self._conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM entries WHERE ledger = ? AND first_entry > ? ORDER BY first_entry LIMIT ?",
            (ledger_id, first.first_entry, locate_prefetch_runs),
        ).fetchall()
        return [first, *map(_run, rows)]

    def runs_in_log(self, log_id: int) -> list[Run]:
        return [
            _run(r)
            for r in self._conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM entries WHERE log = ? ORDER BY ledger, first_entry", (log_id,)
            )
        ]

    def runs_of_ledger(self, ledger_id: int) -> list[Run]:
        return [
            _run(r)
            for r in self._conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM entries WHERE ledger = ? ORDER BY first_entry", (ledger_id,)
            )
        ]

    def add_runs(self, runs: list[Run]) -> tuple[list[Run], set[int]]:
        """Index the runs of one flush; returns the runs kept and the ledgers that no longer exist
        (deleted meanwhile: their runs are dead bytes from the start). A ledger whose local copy was
        deleted (it is offloaded) gets its counts but keeps no run. Call in a transaction."""
        by_ledger: dict[int, list[Run]] = {}
        for run in runs:
            by_ledger.setdefault(run.ledger_id, []).append(run)
        existing = self._existing_ledgers(list(by_ledger))
        kept = [run for ledger_id, local in existing.items() if local for run in by_ledger[ledger_id]]
        self._conn.executemany(
            "UPDATE ledgers SET entries = max(entries, ?), size_bytes = size_bytes + ? WHERE id = ?",
            [
                (max(r.end_entry for r in by_ledger[i]), sum(r.size_bytes for r in by_ledger[i]), i)
                for i in existing
            ],
        )
        self._conn.executemany(
            "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(r.ledger_id, r.first_entry, r.count, r.log_id, r.offset, r.size_bytes, pack_ends(r.ends)) for r in kept],
        )
        return kept, set(by_ledger) - set(existing)

    def _existing_ledgers(self, ledger_ids: list[int]) -> dict[int, bool]:
        """Which of the ledgers exist, and whether each keeps its local copy."""
        out: dict[int, bool] = {}
        for k in range(0, len(ledger_ids), _IN_CHUNK):
            chunk = ledger_ids[k : k + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT id, local_deleted_ms IS NULL FROM ledgers WHERE id IN ({marks})"
            out.update((int(i), bool(local)) for i, local in self._conn.execute(query, chunk))
        return out

    def load_mls(self, names: list[str]) -> dict[str, StoredLedger]:
        """load_ml for many names at once (topics opened together share one trip to a thread)."""
        out = {}
        for name in names:
            stored = self.load_ml(name)
            if stored is not None:
                out[name] = stored
        return out

    # -- entry logs ----------------------------------------------------------------------------

    def logs(self) -> list[LogRow]:
        return [
            LogRow(int(i), int(t), int(live), bool(s))
            for i, t, live, s in self._conn.execute("SELECT id, total_bytes, live_bytes, sealed FROM logs ORDER BY id")
        ]

    def put_log(self, log_id: int, total_bytes: int, live_added: int, *, sealed: bool) -> None:
        self._conn.execute(
            "INSERT INTO logs VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET total_bytes = excluded.total_bytes, "
            "live_bytes = live_bytes + excluded.live_bytes, sealed = excluded.sealed",
            (log_id, total_bytes, live_added, int(sealed)),
        )

    def seal_logs(self) -> None:
        """Mark every log sealed: the flusher starts a new one (its next flush creates it)."""
        self._conn.execute("UPDATE logs SET sealed = 1 WHERE sealed = 0")

    def delete_log(self, log_id: int) -> None:
        self._conn.execute("DELETE FROM logs WHERE id = ?", (log_id,))

    def relocate(self, moves: Iterable[tuple[Run, int, int]]) -> int:
        """Point runs at their copies: (run as read, new log, new pos) each. A run deleted since it
        was read stays deleted (0 rows change). Returns the bytes moved. Call in a transaction."""
        moved = 0
        for run, new_log, new_pos in moves:
            cursor = self._conn.execute(
                "UPDATE entries SET log = ?, pos = ? WHERE ledger = ? AND first_entry = ? AND log = ? AND pos = ?",
                (new_log, new_pos, run.ledger_id, run.first_entry, run.log_id, run.offset),
            )
            if cursor.rowcount:
                moved += run.size_bytes
        return moved

    # -- metadata operations, deletions, consistency (_storage_db_changes) ----------------------

    def apply(self, metadata: list[MetaOp]) -> set[int]:
        """Apply operations in journal order; returns the ledgers they deleted. Idempotent. Call in
        a transaction."""
        return _changes.apply_metadata(self._conn, metadata)

    def delete_ledgers(self, ledger_ids: Iterable[int]) -> list[int]:
        """Delete ledgers, their runs, and their bytes from the logs' live share. Idempotent."""
        return _changes.delete_ledgers(self._conn, ledger_ids)

    def delete_ml(self, ml_id: int, ledger_ids: Iterable[int] = ()) -> list[int]:
        """Delete a managed ledger with all its ledgers and cursors. Idempotent."""
        return _changes.delete_ml(self._conn, ml_id, ledger_ids)

    def orphans(self) -> dict[str, int]:
        """Rows that point at nothing (should all be 0), by what they are."""
        return _changes.orphans(self._conn)

    def delete_orphans(self) -> None:
        """Remove the rows `orphans` counts (the checker's --delete). Call in a transaction."""
        _changes.delete_orphans(self._conn)

    def counts(self) -> dict[str, int]:
        """Row counts of the main tables (the checker's summary)."""
        return _changes.counts(self._conn)


class ThreadDbs:
    """A connection per thread of a pool (the I/O threads), opened on first use."""

    def __init__(self, path: Path, *, sync: bool) -> None:
        self._path = path
        self._sync = sync
        self._local = threading.local()
        self._all: list[StorageDb] = []
        self._lock = threading.Lock()

    def get(self) -> StorageDb:
        db: StorageDb | None = getattr(self._local, "db", None)
        if db is None:
            db = StorageDb(self._path, sync=self._sync)
            self._local.db = db
            with self._lock:
                self._all.append(db)
        return db

    def close_all(self) -> None:
        with self._lock:
            for db in self._all:
                db.close()
            self._all.clear()
