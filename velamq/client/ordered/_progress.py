"""What the ordered consumer may acknowledge, and which worker runs a message (OC-1, OC-2, OC-3).
Sans-IO: no asyncio here, so the rules can be tested with any completion order.

    worker_of(key, n)   the worker (0..n-1) of a key inside its partition. A stable hash (BLAKE2b,
                        64 bits) that is independent of the hashes producers route keys to
                        partitions with: with the same hash, every key of partition p would have
                        hash % partitions == p, and hash % n would use only n / gcd(n, partitions)
                        of the n workers (8 partitions, 16 workers: 2 workers busy, 14 idle).
    routing_key(msg)    the ordering key if the message has one (as Key_Shared uses it), else its
                        key, else None.
    PartitionWindow     the messages of one partition between receipt and acknowledgement, in
                        partition order. Workers complete them in any order; the window says
                        which contiguous prefix became acknowledgeable. Its length is what the
                        consumer holds for the partition, so the fetch loop pauses while it is at
                        capacity: a stuck message keeps the window from moving and pauses its
                        partition instead of letting memory (and redeliveries after a crash) grow.

Ids only grow inside a partition, so a message whose id is not above the highest id the window
ever took is a redelivery (a reconnect, a broker restart or a failover switch sends everything
unacknowledged again): it is either still in the window, and will be acknowledged with the prefix,
or already acknowledged.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from velamq.client._message import MessageId

RoutingKey = str | bytes | None


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


class PartitionWindow:
    """Received-but-unacknowledged messages of one partition, and the acknowledgeable prefix.

        ticket = window.add(message_id)       in receipt (= partition) order
        done = window.complete(ticket)        ids that just became the acknowledged prefix, in
                                              order; empty while an earlier message is unfinished
    """

    __slots__ = ("_done", "_head_ticket", "_ids", "_next_ticket", "acked", "capacity_messages", "highest")

    def __init__(self, capacity_messages: int) -> None:
        if capacity_messages < 1:
            raise ValueError("a window holds at least one message")
        self.capacity_messages = capacity_messages
        self._ids: dict[int, MessageId] = {}  # ticket -> id, in partition order
        self._done: set[int] = set()  # completed tickets not yet in the prefix
        self._head_ticket = 0  # the oldest unacknowledged ticket
        self._next_ticket = 0
        self.highest: MessageId | None = None  # the highest id ever added
        self.acked: MessageId | None = None  # the end of the acknowledged prefix

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def full(self) -> bool:
        return len(self._ids) >= self.capacity_messages

    @property
    def completed_behind_head(self) -> int:
        """Completed messages that wait for an earlier one before they can be acknowledged."""
        return len(self._done)

    def is_redelivery(self, message_id: MessageId) -> bool:
        return self.highest is not None and message_id <= self.highest

    def is_acknowledged(self, message_id: MessageId) -> bool:
        return self.acked is not None and message_id <= self.acked

    def add(self, message_id: MessageId) -> int:
        if self.is_redelivery(message_id):
            raise ValueError(f"{message_id} is not after {self.highest}: a redelivery")
        if self.full:
            raise ValueError("the window is full: fetching should have paused")
        ticket = self._next_ticket
        self._next_ticket += 1
        self._ids[ticket] = message_id
        self.highest = message_id
        return ticket

    def complete(self, ticket: int) -> list[MessageId]:
        if ticket not in self._ids or ticket in self._done:
            raise ValueError(f"ticket {ticket} is not in flight")
        self._done.add(ticket)
        prefix: list[MessageId] = []
        while self._head_ticket in self._done:
            self._done.discard(self._head_ticket)
            prefix.append(self._ids.pop(self._head_ticket))
            self._head_ticket += 1
        if prefix:
            self.acked = prefix[-1]
        return prefix
