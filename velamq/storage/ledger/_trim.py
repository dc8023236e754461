"""Retention's side of a managed ledger: which ledgers a trim may delete, and deleting them (BR-5).

Retention deletes whole ledgers only, oldest first, and never the current ledger (appends go
there) nor a ledger with appends still in flight (its last entries are not durable yet, so they
cannot be known to be past retention). A deletion is recorded first, as a journaled operation
(LEDGER_DELETE, _meta_ops), and finished by the flush that applies it (index rows and ledger rows
gone in one transaction); after a crash, replay finishes it. So a deleted ledger is either fully
present or fully gone, never half. Its bytes stay in the entry logs as garbage until the collector
(_gc) rewrites the logs they are in. Its entries still in the write cache are dropped there.
"""

from __future__ import annotations

import asyncio

from velamq._errors import StorageError
from velamq.storage._position import Position
from velamq.storage.formats import _meta_ops
from velamq.storage.formats._meta_ops import MetaOp
from velamq.storage.ledger._context import StorageContext
from velamq.storage.ledger._list import LedgerList


def trimmable(ledgers: LedgerList, up_to: Position) -> int:
    """How many of the oldest ledgers a trim to up_to may delete: sealed ones whose every entry is
    at or before up_to and durable; never the current ledger."""
    count = 0
    for state in ledgers.states:
        ledger_id = state.ledger_id
        if ledger_id == ledgers.current_id or ledger_id > up_to.ledger_id:
            break
        if state.entries != state.assigned:
            break
        if ledger_id == up_to.ledger_id and state.entries - 1 > up_to.entry_id:
            break
        count += 1
    return count


async def trim_ledgers(ctx: StorageContext, ml_id: int, ledgers: LedgerList, up_to: Position) -> list[int]:
    """Delete the oldest ledgers a trim to up_to may delete (`trimmable`); returns their ids. They
    leave the list at once; if the deletion cannot be journaled they are put back (still the log's)
    and the StorageError is raised."""
    count = trimmable(ledgers, up_to)
    if not count:
        return []
    removed = ledgers.remove_first(count)
    doomed = [state.ledger_id for state in removed]
    try:
        await delete_ledgers(ctx, _meta_ops.ledger_delete(ml_id, doomed), doomed)
    except StorageError:
        ledgers.put_back_first(removed)
        raise
    ctx.counters.ledgers_trimmed_total += len(doomed)
    return doomed


async def delete_ledgers(ctx: StorageContext, op: MetaOp, ledger_ids: list[int]) -> None:
    """Journal the deletion and wait until it is durable (the flush then deletes their index rows
    and their bytes become garbage for _gc), then forget the ledgers' entries in the write cache
    (not before: if the write fails, they are still the log's)."""
    op.future = asyncio.get_running_loop().create_future()
    ctx.journal.submit(op)
    await op.future
    for ledger_id in ledger_ids:
        ctx.write_cache.drop_ledger(ledger_id)
