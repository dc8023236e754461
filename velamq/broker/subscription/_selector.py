"""Which consumer of a subscription gets an entry, by subscription type (CO-1):

    Exclusive / Failover   the one active consumer: lowest priority level, then name; for a
                           partition of a partitioned topic the partition index picks among them,
                           so the partitions spread over the consumers
    Shared                 round-robin over the consumers that have permits
    Key_Shared             the consumer whose hash range holds murmur3(key) % 65536; a consumer
                           that joins while entries are out gets nothing at or past the read
                           position of its joining until everything before it is acknowledged,
                           so that a key moving to it cannot overtake its unacked entries
                           (unless the subscription allows out-of-order delivery: Pulsar's
                           KeySharedPolicy allowOutOfOrderDelivery, then it gets them at once)
"""

from __future__ import annotations

from enum import IntEnum

from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._key_shared import KeySharedSelector
from velamq.storage import Position


class SubType(IntEnum):
    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3

    @property
    def pulsar_name(self) -> str:
        """Exclusive, Shared, Failover or Key_Shared, as Pulsar's stats spell it."""
        return self.name.title()


class ConsumerSelector:
    """The consumers of one subscription and the rule that picks the one an entry goes to. It knows
    nothing of entries in flight: add() and remove() return the consumer that lost its active
    status while still connected, whose unacknowledged entries the subscription hands on."""

    def __init__(self, sub_type: SubType, partition_index: int) -> None:
        self.sub_type = sub_type
        self.partition_index = partition_index
        self.consumers: list[ServerConsumer] = []
        self.active: ServerConsumer | None = None  # Exclusive and Failover only
        self._round_robin = 0
        self._key_ranges = KeySharedSelector()
        self._sticky: set[int] = set()  # id() of Key_Shared consumers that brought their own ranges
        # Key_Shared consumers that joined while entries were out -> the read position at joining.
        self._joined_at: dict[int, Position] = {}

    def add(
        self, consumer: ServerConsumer, sticky_ranges: list[tuple[int, int]] | None, joined_at: Position | None
    ) -> ServerConsumer | None:
        """Raises HashRangeOverlapError for bad sticky ranges (nothing is changed then)."""
        if self.sub_type == SubType.KEY_SHARED:
            if sticky_ranges:
                self._key_ranges.add_sticky(consumer, sticky_ranges)
                self._sticky.add(id(consumer))
            else:
                self._key_ranges.add_auto_split(consumer)
            if joined_at is not None:
                self._joined_at[id(consumer)] = joined_at
        self.consumers.append(consumer)
        active_before = self.active
        demoted = self._update_active()
        if self.sub_type == SubType.FAILOVER and self.active is active_before:
            # The active consumer did not change: tell the newcomer it is a standby (as Pulsar does).
            consumer.notify_active(consumer is self.active)
        return demoted

    def remove(self, consumer: ServerConsumer) -> ServerConsumer | None:
        self.consumers.remove(consumer)
        if self.sub_type == SubType.KEY_SHARED:
            self._key_ranges.remove(consumer, auto_split=id(consumer) not in self._sticky)
            self._sticky.discard(id(consumer))
            self._joined_at.pop(id(consumer), None)
        return self._update_active()

    def _update_active(self) -> ServerConsumer | None:
        if self.sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return None
        active: ServerConsumer | None = None
        if self.consumers:
            ordered = sorted(self.consumers, key=lambda c: (c.priority, c.name))
            index = self.partition_index % len(ordered) if self.partition_index >= 0 else 0
            active = ordered[index]
        if active is self.active:
            return None
        previous, self.active = self.active, active
        if self.sub_type == SubType.FAILOVER:
            for c in self.consumers:
                c.notify_active(c is active)
        return previous if previous is not None and previous in self.consumers else None

    def is_active(self, consumer: ServerConsumer) -> bool:
        """Exclusive and Failover: the one that receives; every consumer of the other types."""
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return consumer is self.active
        return True

    def permits_available(self) -> int:
        """Permits of the consumers that may receive now: a consumer whose connection is not
        writable (a slow reader, its write buffer above the high-water mark) counts as none."""
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            active = self.active
            return max(active.permits, 0) if active is not None and active.channel.writable else 0
        return sum(max(c.permits, 0) for c in self.consumers if c.channel.writable)

    def select(self, sticky_key: bytes, position: Position) -> ServerConsumer | None:
        """The consumer for an entry, or None if it must wait (no one may take it now)."""
        if self.sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
            return self.active
        if self.sub_type == SubType.KEY_SHARED:
            consumer = self._key_ranges.select(sticky_key)
            if consumer is not None and self._joined_at:
                joined = self._joined_at.get(id(consumer))
                if joined is not None and position >= joined:
                    return None
            return consumer
        n = len(self.consumers)
        for _ in range(n):
            consumer = self.consumers[self._round_robin % n]
            self._round_robin += 1
            if consumer.permits > 0 and consumer.channel.writable:
                return consumer
        return None

    def joined_at(self, consumer: ServerConsumer) -> Position | None:
        """Where a Key_Shared consumer that joined while entries were out joined (Pulsar's
        readPositionWhenJoining), while it still waits for them; None otherwise."""
        return self._joined_at.get(id(consumer))

    def release_joined(self, first_unacked: Position) -> bool:
        """Key_Shared consumers whose join position everything before is acknowledged may now get
        any of their keys; True if one was released."""
        released = [c for c, joined in self._joined_at.items() if first_unacked >= joined]
        for c in released:
            del self._joined_at[c]
        return bool(released)

    def forget_joins(self) -> None:
        """After a seek nothing is out any more: no consumer waits for older entries."""
        self._joined_at.clear()
