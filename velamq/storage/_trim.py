"""Retention's side of a managed ledger: which ledgers a trim may delete, and deleting them (BR-5).

Retention deletes whole ledgers only, oldest first, and never the current ledger (appends go
there) nor a ledger with appends still in flight (its last entries are not durable yet, so they
cannot be known to be past retention). The ledger's entries still in the write cache are dropped
there, and its files are deleted by the flusher thread, ordered with flushes: a flush that runs
after the deletion skips the ledger's entries instead of writing them back (see _flusher).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from velamq.storage._flusher import DeleteJob
from velamq.storage._ledger_list import LedgerList
from velamq.storage._position import Position

if TYPE_CHECKING:
    from velamq.storage._managed_ledger import StorageContext


def trimmable(ledgers: LedgerList, up_to: Position) -> int:
    """How many of the oldest ledgers a trim to up_to may delete: sealed ones whose every entry is
    at or before up_to and durable; never the current ledger."""
    count = 0
    for ledger_id in ledgers.ids:
        if ledger_id == ledgers.current_id or ledger_id > up_to.ledger_id:
            break
        state = ledgers.states[ledger_id]
        if state.entries != state.assigned:
            break
        if ledger_id == up_to.ledger_id and state.entries - 1 > up_to.entry_id:
            break
        count += 1
    return count


async def delete_ledgers(ctx: StorageContext, ledger_ids: list[int], files: list[Path], dirs: list[Path]) -> None:
    """Forget the ledgers in the caches, then delete their files (or whole directories) in the
    flusher thread; returns once they are gone."""
    for ledger_id in ledger_ids:
        ctx.write_cache.drop_ledger(ledger_id)
        ctx.index_cache.pop(ledger_id)
    deleted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ctx.flusher.submit(DeleteJob(ledger_ids, files, dirs, ctx.write_cache.active.generation, deleted))
    await deleted
