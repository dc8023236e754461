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
    KeyQueue            key_assignment "free_worker": a partition's waiting messages by key, and
                        which key a free worker may start (one message of a key at a time).

Ids only grow inside a partition, so a message whose position is not above the highest position the
window ever took is a redelivery (a reconnect, a broker restart or a failover switch sends
everything unacknowledged again): it is either still in the window, and will be acknowledged with
the prefix, or already acknowledged.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Protocol

from velamq.client._message import ReceivedBatch

RoutingKey = str | bytes | None
Position = tuple[int, int, int]  # (ledger, entry, batch index or -1): the order of a partition
Range = tuple[ReceivedBatch, int, int]  # messages first..end-1 of a received batch
Item = tuple[int, ReceivedBatch, int]  # (window ticket, batch, index of the message in the batch)


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


class KeyQueue:
    """The messages of one partition waiting for a worker, by key, for key_assignment="free_worker".
    Sans-IO: no asyncio and no lock here; the caller serialises access.

    With key_assignment="hash" (OC-1, ZTO's design) a key always runs on worker hash(key) % N, so the
    worker holding the most keys bounds the partition: 1000 uniform keys over 8 partitions x 16 workers
    leave the busiest of the 128 workers with 231 messages where the average is 125, and the run can
    go no faster than that worker. With "free_worker" the only messages that wait for each other are
    those of one key: a key is *ready* when it has waiting messages and none running, and a free worker
    takes the ready key whose next message is oldest (the one holding back the acknowledged prefix).
    Order per key is the same guarantee: one message of a key at a time, in arrival order.

        add(item, key)   a received message joins its key's queue (a new key is ready at once)
        take()           (item, key) of the oldest ready message, the key now running; None if no key
                         is ready (every waiting message's key is running, or nothing waits)
        release(key)     the key's running message finished: its next message, if any, is ready

    The heap holds (ticket of the key's next message, key) for ready keys only; tickets are unique,
    so two entries never compare their keys. A key leaves the table when it is neither running nor
    waiting, so the table is bounded by the partition's window (max_in_flight messages).
    """

    __slots__ = ("_keys", "_ready", "waiting")

    def __init__(self) -> None:
        # A key is in _keys while it runs or has waiting messages. Present with an empty deque:
        # running and nothing behind it. Present with items and not running: in _ready.
        self._keys: dict[Hashable, deque[Item]] = {}
        self._ready: list[tuple[int, Hashable]] = []
        self.waiting = 0  # messages added and not yet taken

    def __len__(self) -> int:
        return self.waiting

    @property
    def ready(self) -> int:
        """Keys a free worker could start now."""
        return len(self._ready)

    @property
    def keys(self) -> int:
        """Keys running or waiting."""
        return len(self._keys)

    def add(self, item: Item, key: Hashable) -> None:
        self.waiting += 1
        queue = self._keys.get(key)
        if queue is None:
            self._keys[key] = deque((item,))
            heapq.heappush(self._ready, (item[0], key))
        else:
            # Not new: either running (release() readies it) or already in the heap with an
            # older message at its head. Either way nothing to push.
            queue.append(item)

    def add_many(self, items: Sequence[Item], keys: Sequence[Hashable]) -> None:
        for item, key in zip(items, keys, strict=True):
            self.add(item, key)

    def take(self) -> tuple[Item, Hashable] | None:
        if not self._ready:
            return None
        _, key = heapq.heappop(self._ready)
        self.waiting -= 1
        return self._keys[key].popleft(), key

    def release(self, key: Hashable) -> None:
        queue = self._keys[key]
        if queue:
            heapq.heappush(self._ready, (queue[0][0], key))
        else:
            del self._keys[key]
