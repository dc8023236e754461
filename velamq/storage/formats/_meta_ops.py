"""Metadata operations: journaled like entries, applied to the storage database by the flush.

Creating a topic's log, rolling over a ledger, deleting ledgers and writing a cursor are records in
the shared journal, in the same FIFO queue as the entries. So they are ordered with the entries
(a ledger's creation precedes its first entry, its deletion follows its last), durable by the same
group commit (one fsync for many topics), and replayed after a crash from the same checkpoint. The
flush applies the half's operations in journal order to the storage database, in the transaction
that also commits the half's index rows and moves the checkpoint (_flusher, _storage_db). BookKeeper
journals ledger keys and fence marks the same way, as entries with reserved negative ids.

Applying an operation twice has the same effect as once (replay may repeat a group that a flush
had already applied), and operations name managed ledgers and ledgers by id, never by topic name.

A record's ledger field holds the subject, its entry field META_ENTRY_BASE + kind, its data the
payload (never empty), little-endian:

    kind  name            subject     payload
    1     ML_CREATE       ml id       topic name, UTF-8
    2     LEDGER_CREATE   ledger id   u64 ml id, u64 created epoch ms
    3     LEDGER_SEAL     ledger id   u64 closed epoch ms
    4     LEDGER_DELETE   ml id       u32 n, n x u64 ledger ids (a trim)
    5     ML_DELETE       ml id       u32 n, n x u64 ledger ids (the whole log and its cursors)
    6     CURSOR_PUT      ml id       u16 name length k, k bytes name (UTF-8), cursor state (_cursor)
    7     CURSOR_DELETE   ml id       cursor name, UTF-8
    8     LEDGER_OFFLOADED      ledger id   u64 epoch ms (its offloaded copy is complete)
    9     LEDGER_LOCAL_DELETE   ledger id   u64 epoch ms (its local copy is deleted; the offloaded
                                            copy serves its reads from now on)
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Protocol

from velamq._errors import StorageError
from velamq.storage.formats._journal_file import META_ENTRY_BASE

ML_CREATE = 1
LEDGER_CREATE = 2
LEDGER_SEAL = 3
LEDGER_DELETE = 4
ML_DELETE = 5
CURSOR_PUT = 6
CURSOR_DELETE = 7
LEDGER_OFFLOADED = 8
LEDGER_LOCAL_DELETE = 9
KIND_NAMES = {
    ML_CREATE: "ML_CREATE",
    LEDGER_CREATE: "LEDGER_CREATE",
    LEDGER_SEAL: "LEDGER_SEAL",
    LEDGER_DELETE: "LEDGER_DELETE",
    ML_DELETE: "ML_DELETE",
    CURSOR_PUT: "CURSOR_PUT",
    CURSOR_DELETE: "CURSOR_DELETE",
    LEDGER_OFFLOADED: "LEDGER_OFFLOADED",
    LEDGER_LOCAL_DELETE: "LEDGER_LOCAL_DELETE",
}

_U64 = struct.Struct("<Q")
_U64X2 = struct.Struct("<QQ")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")


class FencedLedger(Protocol):
    """A ledger that cannot exist without an operation (the journal's LedgerHandle): failed with it."""

    failed: StorageError | None


class MetaOpOwner(Protocol):
    """Who asked for a metadata operation (a ManagedLedger, on the loop): the write path records
    the write cache half that holds it, and tells it when the journal write failed."""

    last_generation: int

    def on_op_failed(self, op: MetaOp, error: StorageError) -> None: ...


@dataclass(eq=False, slots=True)
class MetaOp:
    """One metadata operation on its way through the journal, the write cache and the flush."""

    kind: int
    subject: int
    payload: bytes
    owner: MetaOpOwner | None = None  # who asked (told if the journal write fails), or None
    future: asyncio.Future[None] | None = None  # resolves once the operation is durable
    generation: int = 0  # the write cache half it went to (set on the loop)
    # The journal's LedgerHandle of a ledger that cannot exist without this operation (its
    # creation, its managed ledger's creation): if the operation fails, so does every later append
    # to that ledger, and a failed handle fails the operation (no entries of a ledger whose
    # creation is not durable, no creation after a failed managed-ledger creation).
    fences: FencedLedger | None = None

    @property
    def entry_id(self) -> int:
        return META_ENTRY_BASE + self.kind

    @property
    def size_bytes(self) -> int:
        return len(self.payload)

    def __repr__(self) -> str:
        return f"MetaOp({KIND_NAMES.get(self.kind, self.kind)}, {self.subject}, {len(self.payload)} bytes)"

    # -- payloads --------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """ML_CREATE's topic name, CURSOR_DELETE's cursor name."""
        return self.payload.decode("utf-8")

    @property
    def ledger_ids(self) -> list[int]:
        """LEDGER_DELETE's and ML_DELETE's ledgers."""
        (n,) = _U32.unpack_from(self.payload, 0)
        return list(struct.unpack_from(f"<{n}Q", self.payload, 4))

    def ledger_create(self) -> tuple[int, int]:
        """(ml id, created_ms) of a LEDGER_CREATE."""
        ml_id, created_ms = _U64X2.unpack(self.payload)
        return int(ml_id), int(created_ms)

    def closed_ms(self) -> int:
        """LEDGER_SEAL's closed time; LEDGER_OFFLOADED's and LEDGER_LOCAL_DELETE's time too."""
        return int(_U64.unpack(self.payload)[0])

    def cursor(self) -> tuple[str, bytes]:
        """(cursor name, state) of a CURSOR_PUT."""
        (k,) = _U16.unpack_from(self.payload, 0)
        return self.payload[2 : 2 + k].decode("utf-8"), self.payload[2 + k :]


def ml_create(ml_id: int, name: str, owner: MetaOpOwner | None = None) -> MetaOp:
    return MetaOp(ML_CREATE, ml_id, name.encode("utf-8"), owner)


def ledger_create(ledger_id: int, ml_id: int, created_ms: int, owner: MetaOpOwner | None = None) -> MetaOp:
    return MetaOp(LEDGER_CREATE, ledger_id, _U64X2.pack(ml_id, created_ms), owner)


def ledger_seal(ledger_id: int, closed_ms: int, owner: MetaOpOwner | None = None) -> MetaOp:
    return MetaOp(LEDGER_SEAL, ledger_id, _U64.pack(closed_ms), owner)


def ledger_offloaded(ledger_id: int, offloaded_ms: int) -> MetaOp:
    return MetaOp(LEDGER_OFFLOADED, ledger_id, _U64.pack(offloaded_ms))


def ledger_local_delete(ledger_id: int, deleted_ms: int) -> MetaOp:
    return MetaOp(LEDGER_LOCAL_DELETE, ledger_id, _U64.pack(deleted_ms))


def _ids(ledger_ids: list[int]) -> bytes:
    return _U32.pack(len(ledger_ids)) + struct.pack(f"<{len(ledger_ids)}Q", *ledger_ids)


def ledger_delete(ml_id: int, ledger_ids: list[int]) -> MetaOp:
    return MetaOp(LEDGER_DELETE, ml_id, _ids(ledger_ids))


def ml_delete(ml_id: int, ledger_ids: list[int]) -> MetaOp:
    return MetaOp(ML_DELETE, ml_id, _ids(ledger_ids))


def cursor_put(ml_id: int, name: str, state: bytes) -> MetaOp:
    raw = name.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise StorageError(f"cursor name of {len(raw)} bytes is too long")
    return MetaOp(CURSOR_PUT, ml_id, _U16.pack(len(raw)) + raw + state)


def cursor_delete(ml_id: int, name: str) -> MetaOp:
    return MetaOp(CURSOR_DELETE, ml_id, name.encode("utf-8"))


def from_record(ledger_id: int, entry_id: int, data: bytes) -> MetaOp | None:
    """The operation a journal record holds, or None if it is an entry."""
    if entry_id < META_ENTRY_BASE:
        return None
    kind = entry_id - META_ENTRY_BASE
    if kind not in KIND_NAMES:
        raise StorageError(f"journal record of unknown kind {kind} (subject {ledger_id})")
    return MetaOp(kind, ledger_id, data)


def deleted_ledgers(ops: list[MetaOp]) -> set[int]:
    """Every ledger the operations delete."""
    out: set[int] = set()
    for op in ops:
        if op.kind in (LEDGER_DELETE, ML_DELETE):
            out.update(op.ledger_ids)
    return out
