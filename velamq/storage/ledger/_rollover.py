"""A managed ledger's current ledger, the one appends go to, and its rollover.

Entry ids are assigned here, in call order: `assign` gives the next append its ledger handle and
entry id. When the current ledger holds ledger_entries_max entries or ledger_bytes_max record
bytes, the next append first seals it and starts a new one, whose entries start again at 0. It is
replaced the same way when it lost an append, or its creation, to a failed write (`roll_pending`):
it then ends at its durable entries, so no ledger ever has a hole. Creating and sealing ledgers
are metadata operations (_meta_ops) journaled in the same queue as the entries, so a ledger's
creation always precedes its first entry; a log's own creation (ML_CREATE) goes first, and again
if its write failed (`create_pending`).

Lives on the event loop, owned by one RollingLog (the `owner` passed in, which the journal
handle and the operations point back to); ledger ids come from the Storage's one counter.
"""

from __future__ import annotations

from velamq._errors import StorageError
from velamq.storage.formats import _meta_ops
from velamq.storage.formats._journal_file import RECORD_HEADER_BYTES
from velamq.storage.journal._journal import LedgerHandle
from velamq.storage.ledger._context import RollingLog, StorageContext
from velamq.storage.ledger._list import LedgerList, LedgerState


class CurrentLedger:
    """The current ledger of one managed ledger as assigned (ahead of durable while appends are in
    flight), its journal handle, and when it rolls over (see the module docstring)."""

    __slots__ = ("_ctx", "_list", "bytes", "create_pending", "handle", "roll_pending", "state")

    def __init__(self, ctx: StorageContext, ledgers: LedgerList) -> None:
        self._ctx = ctx
        self._list = ledgers
        self.state = LedgerState(-1, 0, 0, 0)
        self.bytes = 0  # record bytes assigned in the current ledger (rollover by size)
        self.handle: LedgerHandle | None = None  # None once the owner is closed
        # Its log's ML_CREATE is still to be journaled (a new log), or must be again (that write failed).
        self.create_pending = False
        # The current ledger lost an append (or its creation) to a failed write: the next append
        # seals it at its durable end and starts a new one (no hole, nothing latched).
        self.roll_pending = False

    def resume(self, owner: RollingLog) -> None:
        """Appends go on in the list's newest ledger (not sealed in the storage database)."""
        state = self._list.states[-1]
        self._list.current_id = state.ledger_id
        self.state = state
        self.bytes = state.size_bytes
        self.handle = LedgerHandle(state.ledger_id, owner)

    def start(self, owner: RollingLog, first_ordinal: int) -> None:
        """Make a new, empty current ledger. Synchronous: ids are handed out in call order, and its
        creation is journaled before any of its entries."""
        ctx = self._ctx
        ledger_id = ctx.allocate_ledger_id()
        created_ms = ctx.clock.now_ms()
        handle = self.handle = LedgerHandle(ledger_id, owner)
        journal = ctx.journal
        if self.create_pending:
            self.create_pending = False
            create = _meta_ops.ml_create(owner.ml_id, owner.name, owner=owner)
            create.fences = handle  # no ledger of a log whose creation failed
            journal.submit(create)
        op = _meta_ops.ledger_create(ledger_id, owner.ml_id, created_ms, owner=owner)
        op.fences = handle
        journal.submit(op)
        self.roll_pending = False
        self.state = LedgerState(ledger_id, 0, 0, 0, created_ms, None, first_ordinal)
        self._list.add(self.state)
        self._list.current_id = ledger_id
        self.bytes = 0

    def assign(self, owner: RollingLog, size: int, first_ordinal: int) -> tuple[LedgerHandle, int]:
        """The handle and entry id of the next append (`size` data bytes), rolling over first if
        the current ledger is full or must be replaced. `first_ordinal`: the log's entries so far."""
        config = self._ctx.config
        handle = self.handle
        assert handle is not None
        if (
            self.state.assigned >= config.ledger_entries_max
            or self.bytes >= config.ledger_bytes_max
            or self.roll_pending
            or handle.failed is not None
        ):
            self._roll(owner, first_ordinal)
            handle = self.handle
            assert handle is not None
        state = self.state
        entry_id = state.assigned
        state.assigned += 1
        self.bytes += RECORD_HEADER_BYTES + size
        return handle, entry_id

    def _roll(self, owner: RollingLog, first_ordinal: int) -> None:
        old = self.state
        old.closed_ms = self._ctx.clock.now_ms()
        self._ctx.journal.submit(_meta_ops.ledger_seal(old.ledger_id, old.closed_ms, owner=owner))
        self.start(owner, first_ordinal)
        self._ctx.counters.ledgers_rolled_total += 1

    def on_append_failed(self, ledger_id: int) -> None:
        """An append of that ledger was lost to a failed write: if it is the current one, the next
        append starts a new ledger."""
        if ledger_id == self._list.current_id:
            self.roll_pending = True

    def on_op_failed(self, op: _meta_ops.MetaOp, error: StorageError) -> None:
        """A metadata operation of the log failed to be journaled: its creation is journaled again
        before the next ledger's; a ledger whose creation failed is replaced at the next append."""
        if op.kind == _meta_ops.ML_CREATE:
            self.create_pending = True
        if op.fences is not None and op.fences is self.handle:
            self.roll_pending = True
