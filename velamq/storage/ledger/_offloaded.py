"""A managed ledger's side of offloading (velamq/storage/offload): marking a ledger offloaded,
deleting its local copy (the interface its reads take once that copy is gone, OffloadedCopies, is
in _context).

Both marks are metadata operations journaled like the others (_meta_ops LEDGER_OFFLOADED and
LEDGER_LOCAL_DELETE), so they are ordered with the ledger's entries and its deletion, survive a
crash by replay, and are applied by the flush in its transaction. A ledger is marked offloaded only
after its offloaded copy (the Parquet file, then its manifest) is complete, and its local copy is
deleted only after that mark is durable: at every step one complete copy exists. The storage
database keeps the ledger's row (entries, size, times) when its local copy goes, so its entries
keep their positions; only its runs leave the index, and their bytes become garbage.
"""

from __future__ import annotations

import asyncio

from velamq._errors import StorageError
from velamq.storage.formats import _meta_ops
from velamq.storage.ledger._context import StorageContext
from velamq.storage.ledger._list import LedgerList, LedgerState


def _sealed(ledgers: LedgerList, ledger_id: int, what: str) -> LedgerState:
    state = ledgers.get(ledger_id)
    if state is None:
        raise StorageError(f"ledger {ledger_id} is not in this log: cannot {what} it")
    if ledger_id == ledgers.current_id or state.closed_ms is None or state.entries != state.assigned:
        raise StorageError(f"ledger {ledger_id} is not sealed: cannot {what} it")
    return state


async def _journal(ctx: StorageContext, op: _meta_ops.MetaOp, owner: _meta_ops.MetaOpOwner) -> None:
    # The owner (the managed ledger) learns the write cache half the mark went to, so that its
    # close waits for that half's flush: a log opened again at once (a topic unloaded and loaded,
    # the offload's check borrowing it) reads the mark from the storage database.
    op.owner = owner
    op.future = asyncio.get_running_loop().create_future()
    ctx.journal.submit(op)
    await op.future


async def mark_offloaded(ctx: StorageContext, ledgers: LedgerList, ledger_id: int,
                         owner: _meta_ops.MetaOpOwner) -> None:
    """Record that the ledger's offloaded copy is complete (durable when this returns)."""
    state = _sealed(ledgers, ledger_id, "mark offloaded")
    now = ctx.clock.now_ms()
    await _journal(ctx, _meta_ops.ledger_offloaded(ledger_id, now), owner)
    state.offloaded_ms = now


async def delete_local(ctx: StorageContext, ledgers: LedgerList, ledger_id: int,
                       owner: _meta_ops.MetaOpOwner) -> None:
    """Delete the local copy of an offloaded ledger: from now on its reads go to the offloaded copy."""
    state = _sealed(ledgers, ledger_id, "delete the local copy of")
    if state.offloaded_ms is None:
        raise StorageError(f"ledger {ledger_id} is not offloaded: its local copy is the only one")
    if not state.local:
        return
    await _journal(ctx, _meta_ops.ledger_local_delete(ledger_id, ctx.clock.now_ms()), owner)
    state.local = False
    # Its entries still in the write cache stay there until their flush: the flush counts them in
    # the ledger's row (entries, size) and indexes no run of them (index/_storage_db.add_runs).
