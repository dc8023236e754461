"""Offsets in a topic partition, the streaming offset, and entry arithmetic for rate limits.

A PartitionOffset names the LAST message a range includes (or a query has consumed) in one
partition (it is not storage's Position, which names an entry):

    (ledgerId, entryId, batchIndex)   batchIndex -1 means "the whole entry" (every message of a
                                      batch entry); >= 0 means "up to this message of the batch"
    EARLIEST = (-1, -1, -1)           nothing consumed yet
    (L, -1, -1)                       just before the first entry of ledger L

so a micro-batch reads the messages m with start < m <= end. Messages compare by
(ledgerId, entryId, batchIndex) with an unbatched message or a whole entry sorting after every
batch index of its entry: that is the order of a partition, and a range never splits an entry
unless a user-given id asks for it.

The streaming offset Spark checkpoints (SP-2) is JSON with a deterministic key order (Spark
compares offsets as JSON strings), keyed by partition name, plus the name of the query's durable
subscription so that every restart moves the same cursor:

    {"partitions": {"persistent://public/default/t-partition-0":
                        {"ledgerId": 12, "entryId": 40, "batchIndex": -1}, ...},
     "subscription": "velamq-spark-3f2a9c1b0d7e"}
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from velamq.client import MessageId

# Sorts after every real batch index: a whole entry (or an unbatched message) is the last of its entry.
WHOLE = 1 << 62


@dataclass(frozen=True, slots=True)
class PartitionOffset:
    """The last message a range includes in one partition: (ledger, entry, batch index or -1)."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1

    def key(self) -> tuple[int, int, int]:
        return (self.ledger_id, self.entry_id, self.batch_index if self.batch_index >= 0 else WHOLE)

    def __lt__(self, other: PartitionOffset) -> bool:
        return self.key() < other.key()

    def __le__(self, other: PartitionOffset) -> bool:
        return self.key() <= other.key()

    def __gt__(self, other: PartitionOffset) -> bool:
        return self.key() > other.key()

    def __ge__(self, other: PartitionOffset) -> bool:
        return self.key() >= other.key()

    @property
    def is_earliest(self) -> bool:
        return self.ledger_id < 0

    @property
    def entry(self) -> tuple[int, int]:
        return (self.ledger_id, self.entry_id)

    @classmethod
    def of(cls, message_id: MessageId) -> PartitionOffset:
        """The position of a received message: its own id (a chunked message: its last chunk)."""
        return cls(message_id.ledger_id, message_id.entry_id, message_id.batch_index)

    @classmethod
    def before(cls, message_id: MessageId) -> PartitionOffset:
        """The position just before a message, so that a range starting there includes it."""
        if message_id.first_chunk is not None:
            message_id = message_id.first_chunk
        if message_id.batch_index > 0:
            return cls(message_id.ledger_id, message_id.entry_id, message_id.batch_index - 1)
        return cls(message_id.ledger_id, message_id.entry_id - 1)

    def to_json(self) -> dict[str, int]:
        return {"ledgerId": self.ledger_id, "entryId": self.entry_id, "batchIndex": self.batch_index}

    @classmethod
    def from_json(cls, value: Any) -> PartitionOffset:
        """{"ledgerId", "entryId"[, "batchIndex"]}, a list of the serialized MessageId's bytes (as the
        Pulsar Spark connector writes them) or those bytes in base64."""
        if isinstance(value, dict):
            unknown = set(value) - {"ledgerId", "entryId", "batchIndex", "partitionIndex", "partition"}
            if unknown or "ledgerId" not in value or "entryId" not in value:
                raise ValueError(f"a message id needs ledgerId and entryId (and may have batchIndex), not {value}")
            return cls(int(value["ledgerId"]), int(value["entryId"]), int(value.get("batchIndex", -1)))
        if isinstance(value, list) and all(isinstance(b, int) and -128 <= b < 256 for b in value):
            return cls.of(MessageId.deserialize(bytes(b % 256 for b in value)))
        if isinstance(value, str):
            try:
                raw = base64.b64decode(value, validate=True)
            except ValueError:
                raise ValueError(f"not a message id: {value!r}") from None
            return cls.of(MessageId.deserialize(raw))
        raise ValueError(f"not a message id: {value!r}")

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"


EARLIEST = PartitionOffset(-1, -1, -1)


def message_key(message_id: MessageId) -> tuple[int, int, int]:
    """The sort key of a received message, comparable with PartitionOffset.key()."""
    b = message_id.batch_index
    return (message_id.ledger_id, message_id.entry_id, b if b >= 0 else WHOLE)


def is_last_of_entry(message_id: MessageId) -> bool:
    """True for an unbatched message or the last message of a batch entry."""
    index, size = message_id.batch_index, message_id.batch_size
    return index < 0 or (size > 0 and index >= size - 1)


@dataclass(frozen=True, slots=True)
class StreamOffset:
    """What Spark checkpoints for each micro-batch: per partition, the last message included."""

    subscription: str
    partitions: Mapping[str, PartitionOffset]

    def to_json(self) -> dict[str, Any]:
        # Insertion order is the JSON order Spark sees: keep it sorted.
        return {
            "partitions": {name: self.partitions[name].to_json() for name in sorted(self.partitions)},
            "subscription": self.subscription,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> StreamOffset:
        if not isinstance(value, Mapping) or "partitions" not in value or "subscription" not in value:
            raise ValueError(f"not a velamq streaming offset: {value!r}")
        partitions = {str(name): PartitionOffset.from_json(p) for name, p in value["partitions"].items()}
        return cls(str(value["subscription"]), partitions)


@dataclass(frozen=True, slots=True)
class LedgerMap:
    """A partition's ledgers in order with their entry counts (from the admin internalStats), for
    counting entries between two positions and stepping forward by a number of entries."""

    ledgers: tuple[tuple[int, int], ...]

    @classmethod
    def from_internal_stats(cls, stats: Mapping[str, Any]) -> LedgerMap:
        last_ledger, last_entry = -1, -1
        confirmed = str(stats.get("lastConfirmedEntry") or "")
        if ":" in confirmed:
            left, right = confirmed.split(":", 1)
            last_ledger, last_entry = int(left), int(right)
        ledgers: list[tuple[int, int]] = []
        for info in stats.get("ledgers") or []:
            ledger_id, entries = int(info["ledgerId"]), int(info.get("entries") or 0)
            if ledger_id == last_ledger:
                # Pulsar reports 0 entries for the ledger still open: lastConfirmedEntry has them.
                entries = max(entries, last_entry + 1)
            ledgers.append((ledger_id, entries))
        return cls(tuple(ledgers))

    def count_through(self, position: PartitionOffset) -> int:
        """How many entries are at or before the position's entry (a partly read entry counts as
        not read: its remaining messages still have to be delivered)."""
        if position.is_earliest:
            return 0
        total = 0
        for ledger_id, entries in self.ledgers:
            if ledger_id < position.ledger_id:
                total += entries
            elif ledger_id == position.ledger_id:
                total += min(entries, position.entry_id + 1)
        if position.batch_index >= 0 and total > 0:
            total -= 1
        return total

    def position_at(self, count: int) -> PartitionOffset:
        """The whole entry that is the count-th (1-based) of the partition."""
        seen = 0
        for ledger_id, entries in self.ledgers:
            if seen + entries >= count:
                return PartitionOffset(ledger_id, count - seen - 1)
            seen += entries
        raise ValueError(f"the partition has {seen} entries, not {count}")

    def advance(self, start: PartitionOffset, latest: PartitionOffset, entries_max: int) -> PartitionOffset:
        """At most entries_max entries after start, never beyond latest."""
        available = self.count_through(latest) - self.count_through(start)
        if available <= entries_max:
            return latest
        return self.position_at(self.count_through(start) + entries_max)


def allocate(budget: int, available: Mapping[str, int]) -> dict[str, int]:
    """Split a budget of entries over partitions in proportion to what each has available,
    deterministically (Spark may plan the same batch twice). Every partition with data gets at
    least one entry while the budget lasts, so none starves."""
    total = sum(max(0, n) for n in available.values())
    if total <= budget:
        return {name: max(0, n) for name, n in available.items()}
    names = sorted(name for name, n in available.items() if n > 0)
    shares = dict.fromkeys(names, 0)
    left = budget
    for name in names[:budget]:  # one entry each first
        shares[name] = 1
        left -= 1
    rest = {name: available[name] - shares[name] for name in names}
    rest_total = sum(rest.values())
    if left > 0 and rest_total > 0:
        spread = left
        for name in names:
            extra = min(rest[name], spread * rest[name] // rest_total)
            shares[name] += extra
            left -= extra
    for name in names:  # what rounding left over, one entry at a time
        if left <= 0:
            break
        if shares[name] < available[name]:
            shares[name] += 1
            left -= 1
    return {name: shares.get(name, 0) for name in sorted(available)}
