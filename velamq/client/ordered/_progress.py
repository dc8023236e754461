"""What the ordered consumer may acknowledge, and which worker runs a message (OC-1, OC-2, OC-3).
Sans-IO: no asyncio here, so the rules can be tested with any completion order.

    worker_of(key, n)   the worker (0..n-1) of a key inside its partition. A stable hash (BLAKE2b,
                        64 bits) that is independent of the hashes producers route keys to
                        partitions with: with the same hash, every key of partition p would have
                        hash % partitions == p, and hash % n would use only n / gcd(n, partitions)
                        of the n workers (8 partitions, 16 workers: 2 workers busy, 14 idle).
    KeyHashes           the same hash with a bounded cache, so a key seen again costs one dict
                        lookup instead of a BLAKE2b call (keys repeat: that is why order per key
                        matters).
    routing_key(msg)    the ordering key if the message has one (as Key_Shared uses it), else its
                        key, else None.
    PartitionWindow     the messages of one partition between receipt and acknowledgement, in
                        partition order, held as ranges of received batches (not one object per
                        message). Each message gets a ticket (its place in receipt order);
                        workers complete tickets in any order, and the window keeps the end of
                        the contiguous completed prefix. Its length is what the consumer holds for
                        the partition, so the fetch loop pauses while it is at capacity: a stuck
                        message keeps the window from moving and pauses its partition instead of
                        letting memory (and redeliveries after a crash) grow.

Ids only grow inside a partition, so a message whose position is not above the highest position the
window ever took is a redelivery (a reconnect, a broker restart or a failover switch sends
everything unacknowledged again): it is either still in the window, and will be acknowledged with
the prefix, or already acknowledged.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Protocol

from velamq.client._message import ReceivedBatch

RoutingKey = str | bytes | None
Position = tuple[int, int, int]  # (ledger, entry, batch index or -1): the order of a partition
Range = tuple[ReceivedBatch, int, int]  # messages first..end-1 of a received batch


class _Keyed(Protocol):
    @property
    def key(self) -> str | None: ...

    @property
    def ordering_key(self) -> bytes | None: ...


def routing_key(message: _Keyed) -> RoutingKey:
    """The key whose order the consumer keeps: ordering key first (as Key_Shared), then key."""
    if message.ordering_key:
        return message.ordering_key
    return message.key or None


def key_hash(key: str | bytes) -> int:
    """A stable 64-bit hash of a key (the same in every process and Python version)."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=b"velamq-oc").digest(), "little")


def worker_of(key: str | bytes, parallelism: int) -> int:
    """hash(key) % parallelism: every message of one key goes to the same worker (OC-1)."""
    if parallelism <= 1:
        return 0
    return key_hash(key) % parallelism


class KeyHashes:
    """key_hash with a cache of at most max_keys keys (cleared whole when full: a key set larger
    than the cache costs what it cost without one, never more memory)."""

    __slots__ = ("_cache", "max_keys")

    def __init__(self, max_keys: int = 65_536) -> None:
        self._cache: dict[str | bytes, int] = {}
        self.max_keys = max_keys

    def __call__(self, key: str | bytes) -> int:
        h = self._cache.get(key)
        if h is None:
            if len(self._cache) >= self.max_keys:
                self._cache.clear()
            h = self._cache[key] = key_hash(key)
        return h


def position(batch: ReceivedBatch, j: int) -> Position:
    return (batch.ledger_id, batch.entry_id, batch.columns.index(j) if batch.batch_size else -1)


class PartitionWindow:
    """Received-but-unacknowledged messages of one partition, and the completed prefix.

        ticket = window.add(batch, first, end)   messages first..end-1 get tickets ticket.. in
                                                 receipt (= partition) order
        moved = window.complete(ticket)          True when the completed prefix grew
        window.prefix()                          the ranges that joined the prefix since the last
                                                 call (what to acknowledge now), in order
    """

    __slots__ = ("_chunks", "_done", "_head", "_next", "_settled", "acked", "capacity_messages", "highest")

    def __init__(self, capacity_messages: int) -> None:
        if capacity_messages < 1:
            raise ValueError("a window holds at least one message")
        self.capacity_messages = capacity_messages
        # [first ticket, batch, first, end] per received range, oldest first, until acknowledged.
        self._chunks: deque[tuple[int, ReceivedBatch, int, int]] = deque()
        self._done: set[int] = set()  # completed tickets after the prefix
        self._head = 0  # the first ticket not in the completed prefix
        self._next = 0  # the next ticket to give
        self._settled = 0  # tickets below this were returned by prefix()
        self.highest: Position | None = None  # the highest position ever added
        self.acked: Position | None = None  # the end of the prefix prefix() last returned

    def __len__(self) -> int:
        return self._next - self._head

    @property
    def prefix_count(self) -> int:
        """Messages ever in the completed prefix."""
        return self._head

    @property
    def full(self) -> bool:
        return self._next - self._head >= self.capacity_messages

    @property
    def room(self) -> int:
        return self.capacity_messages - (self._next - self._head)

    @property
    def completed_behind_head(self) -> int:
        """Completed messages that wait for an earlier one before they can be acknowledged."""
        return len(self._done)

    def is_redelivery(self, at: Position) -> bool:
        return self.highest is not None and at <= self.highest

    def is_acknowledged(self, at: Position) -> bool:
        return self.acked is not None and at <= self.acked

    def new_from(self, batch: ReceivedBatch, first: int, end: int) -> int:
        """The first j in first..end whose message is not a redelivery (end: none is new)."""
        highest = self.highest
        if highest is None or position(batch, first) > highest:
            return first
        j = first
        while j < end and position(batch, j) <= highest:
            j += 1
        return j

    def add(self, batch: ReceivedBatch, first: int, end: int) -> int:
        """Take messages first..end-1 (new, in order, within capacity); returns the first's ticket."""
        count = end - first
        if count <= 0:
            raise ValueError("an empty range")
        last = position(batch, end - 1)
        if self.highest is not None and position(batch, first) <= self.highest:
            raise ValueError(f"{position(batch, first)} is not after {self.highest}: a redelivery")
        if count > self.room:
            raise ValueError("the window is full: fetching should have paused")
        ticket = self._next
        self._chunks.append((ticket, batch, first, end))
        self._next = ticket + count
        self.highest = last
        return ticket

    def complete(self, ticket: int) -> bool:
        head = self._head
        if ticket >= self._next:
            raise ValueError(f"ticket {ticket} is not in flight")
        if ticket != head:
            if not head < ticket < self._next or ticket in self._done:
                raise ValueError(f"ticket {ticket} is not in flight")
            self._done.add(ticket)
            return False
        head += 1
        done = self._done
        if done:
            while head in done:
                done.remove(head)
                head += 1
        self._head = head
        return True

    def prefix(self) -> list[Range]:
        """The ranges that became the completed prefix since the last call, oldest first; their
        last message is the new acknowledged position (`acked`)."""
        out: list[Range] = []
        head, settled, chunks = self._head, self._settled, self._chunks
        while chunks and settled < head:
            ticket, batch, first, end = chunks[0]
            start = first + settled - ticket
            stop = min(end, first + head - ticket)
            out.append((batch, start, stop))
            settled += stop - start
            if stop == end:
                chunks.popleft()
        self._settled = settled
        if out:
            batch, _, stop = out[-1]
            self.acked = position(batch, stop - 1)
        return out
