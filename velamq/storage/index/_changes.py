"""What changes storage.db's structure: metadata operations applied in journal order, deletions,
and the checker's orphan queries and repair.

The flush (and journal replay at start) applies a write cache half's metadata operations
(_meta_ops) here, in the transaction that also commits the half's index rows. Applying one twice
has the same effect as once. Deleting a ledger takes its runs out of the index and its bytes out
of its logs' live share (the garbage collector, _gc, reclaims them); deleting a managed ledger
takes its ledgers and cursors with it. StorageDb (_storage_db) offers these as methods on its
connection; everything here blocks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from velamq.storage.formats import _meta_ops as ops
from velamq.storage.formats._meta_ops import MetaOp

_NO_ML = "ml NOT IN (SELECT id FROM managed_ledgers)"
_NO_LEDGER = "ledger NOT IN (SELECT id FROM ledgers)"


def apply_metadata(conn: sqlite3.Connection, metadata: list[MetaOp]) -> set[int]:
    """Apply operations in journal order; returns the ledgers they deleted. Idempotent (replay
    may apply an operation again). Call in a transaction.

    Between two deletions, creations are applied kind by kind with one statement each (topics
    created together cost a few statements, not a few per topic): within such a stretch only
    the order "topic, then its ledgers, then their seals and its cursors" matters, and a
    deletion (of a ledger, a topic or a cursor) is applied where it stands."""
    deleted: set[int] = set()
    stretch: list[MetaOp] = []
    for op in metadata:
        if op.kind in (ops.LEDGER_OFFLOADED, ops.LEDGER_LOCAL_DELETE):
            _apply_creations(conn, stretch)
            stretch = []
            _apply_offload(conn, op)
        elif op.kind in (ops.LEDGER_DELETE, ops.ML_DELETE, ops.CURSOR_DELETE):
            _apply_creations(conn, stretch)
            stretch = []
            if op.kind == ops.LEDGER_DELETE:
                deleted.update(delete_ledgers(conn, op.ledger_ids))
            elif op.kind == ops.ML_DELETE:
                deleted.update(delete_ml(conn, op.subject, op.ledger_ids))
            else:
                conn.execute("DELETE FROM cursors WHERE ml = ? AND name = ?", (op.subject, op.name))
        else:
            stretch.append(op)
    _apply_creations(conn, stretch)
    return deleted


def _apply_creations(conn: sqlite3.Connection, stretch: list[MetaOp]) -> None:
    if not stretch:
        return
    executemany = conn.executemany
    executemany(
        "INSERT INTO managed_ledgers VALUES (?, ?) ON CONFLICT DO NOTHING",
        [(op.subject, op.name) for op in stretch if op.kind == ops.ML_CREATE],
    )
    executemany(
        "INSERT INTO ledgers (id, ml, created_ms) SELECT ?, ?, ? "
        "WHERE EXISTS (SELECT 1 FROM managed_ledgers WHERE id = ?) ON CONFLICT DO NOTHING",
        [
            (op.subject, ml_id, created_ms, ml_id)
            for op in stretch
            if op.kind == ops.LEDGER_CREATE
            for ml_id, created_ms in [op.ledger_create()]
        ],
    )
    executemany(
        "UPDATE ledgers SET closed_ms = ? WHERE id = ?",
        [(op.closed_ms(), op.subject) for op in stretch if op.kind == ops.LEDGER_SEAL],
    )
    puts: dict[tuple[int, str], bytes] = {}  # the last state of each cursor written here
    for op in stretch:
        if op.kind == ops.CURSOR_PUT:
            name, state = op.cursor()
            puts[(op.subject, name)] = state
    executemany(
        "INSERT INTO cursors SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM managed_ledgers WHERE id = ?) "
        "ON CONFLICT (ml, name) DO UPDATE SET state = excluded.state",
        [(ml, n, state, ml) for (ml, n), state in puts.items()],
    )


def _apply_offload(conn: sqlite3.Connection, op: MetaOp) -> None:
    """LEDGER_OFFLOADED records when the offloaded copy was complete; LEDGER_LOCAL_DELETE takes the
    ledger's runs out of the index (its bytes become garbage for the collector) and keeps its row,
    so its entries keep their positions and are read from the offloaded copy. Idempotent."""
    if op.kind == ops.LEDGER_OFFLOADED:
        conn.execute("UPDATE ledgers SET offloaded_ms = ? WHERE id = ?", (op.closed_ms(), op.subject))
        return
    execute = conn.execute
    row = execute("SELECT offloaded_ms FROM ledgers WHERE id = ?", (op.subject,)).fetchone()
    if row is None or row[0] is None:
        return  # never the only copy: a ledger not offloaded keeps its runs
    dead = execute("SELECT log, sum(bytes) FROM entries WHERE ledger = ? GROUP BY log", (op.subject,))
    conn.executemany("UPDATE logs SET live_bytes = live_bytes - ? WHERE id = ?", [(b, i) for i, b in dead.fetchall()])
    execute("DELETE FROM entries WHERE ledger = ?", (op.subject,))
    execute("UPDATE ledgers SET local_deleted_ms = ? WHERE id = ?", (op.closed_ms(), op.subject))


def add_offload_columns(conn: sqlite3.Connection) -> None:
    """Give a storage.db made before offloading existed its two columns (NULL: not offloaded)."""
    columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(ledgers)")}
    for name in ("offloaded_ms", "local_deleted_ms"):
        if columns and name not in columns:
            try:
                conn.execute(f"ALTER TABLE ledgers ADD COLUMN {name} INTEGER")
            except sqlite3.OperationalError as exc:  # another connection added it meanwhile
                if "duplicate column" not in str(exc):
                    raise


def delete_ledgers(conn: sqlite3.Connection, ledger_ids: Iterable[int]) -> list[int]:
    """Delete ledgers, their runs, and their bytes from the logs' live share. Idempotent."""
    execute = conn.execute
    out = []
    for ledger_id in ledger_ids:
        dead = execute("SELECT log, sum(bytes) FROM entries WHERE ledger = ? GROUP BY log", (ledger_id,))
        conn.executemany(
            "UPDATE logs SET live_bytes = live_bytes - ? WHERE id = ?", [(b, i) for i, b in dead.fetchall()]
        )
        execute("DELETE FROM entries WHERE ledger = ?", (ledger_id,))
        execute("DELETE FROM ledgers WHERE id = ?", (ledger_id,))
        out.append(ledger_id)
    return out


def delete_ml(conn: sqlite3.Connection, ml_id: int, ledger_ids: Iterable[int] = ()) -> list[int]:
    """Delete a managed ledger with all its ledgers and cursors. Idempotent."""
    doomed = set(ledger_ids) | {int(r[0]) for r in conn.execute("SELECT id FROM ledgers WHERE ml = ?", (ml_id,))}
    out = delete_ledgers(conn, sorted(doomed))
    conn.execute("DELETE FROM cursors WHERE ml = ?", (ml_id,))
    conn.execute("DELETE FROM managed_ledgers WHERE id = ?", (ml_id,))
    return out


# -- consistency (checker, rebuild) ------------------------------------------------------------


def orphans(conn: sqlite3.Connection) -> dict[str, int]:
    """Rows that point at nothing: ledgers of no managed ledger, runs of no ledger, cursors of
    no managed ledger, runs in no log. Should all be 0."""
    q = {
        "ledgers without a managed ledger": f"SELECT count(*) FROM ledgers WHERE {_NO_ML}",
        "index runs without a ledger": f"SELECT count(*) FROM entries WHERE {_NO_LEDGER}",
        "cursors without a managed ledger": f"SELECT count(*) FROM cursors WHERE {_NO_ML}",
        "index runs in no entry log": "SELECT count(*) FROM entries WHERE log NOT IN (SELECT id FROM logs)",
    }
    return {what: int(conn.execute(sql).fetchone()[0]) for what, sql in q.items()}


def delete_orphans(conn: sqlite3.Connection) -> None:
    """Remove the rows `orphans` counts (the checker's --delete). Call in a transaction."""
    dangling = [int(r[0]) for r in conn.execute(f"SELECT id FROM ledgers WHERE {_NO_ML}")]
    delete_ledgers(conn, dangling)
    runs = conn.execute(f"SELECT log, sum(bytes) FROM entries WHERE {_NO_LEDGER} GROUP BY log").fetchall()
    conn.executemany("UPDATE logs SET live_bytes = live_bytes - ? WHERE id = ?", [(b, i) for i, b in runs])
    conn.execute(f"DELETE FROM entries WHERE {_NO_LEDGER}")
    conn.execute(f"DELETE FROM cursors WHERE {_NO_ML}")


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Row counts of the main tables (the checker's summary)."""
    tables = ("managed_ledgers", "ledgers", "entries", "cursors", "logs")
    return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in tables}
