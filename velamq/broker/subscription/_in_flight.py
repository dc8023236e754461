"""The entries of one subscription between dispatch and acknowledgement.

    pending           position -> the consumer it is out at (and, per consumer, its message count)
    dispatched_at     position -> monotonic seconds when it went out (ack-hole redelivery, BR-4)
    replay            positions to send again, before any new entry, in position order
    replay_keys       Key_Shared: the sticky key of a replay entry, which blocks newer entries of
                      that key until it is delivered
    redelivery_counts position -> times it went out before (the MESSAGE's redelivery_count)
"""

from __future__ import annotations

from velamq.broker.subscription._consumer import ServerConsumer
from velamq.storage import Position


class InFlight:
    """Bookkeeping of what a subscription has out at its consumers and what must go again."""

    def __init__(self) -> None:
        self.pending: dict[Position, ServerConsumer] = {}
        self.dispatched_at: dict[Position, float] = {}
        self.replay: set[Position] = set()
        self.replay_keys: dict[Position, bytes] = {}
        self.redelivery_counts: dict[Position, int] = {}

    def sent(self, position: Position, consumer: ServerConsumer, now_s: float) -> None:
        self.replay_keys.pop(position, None)
        self.pending[position] = consumer
        self.dispatched_at[position] = now_s

    def forget(self, position: Position) -> None:
        """Acknowledged: nothing more to do for it."""
        self.dispatched_at.pop(position, None)
        consumer = self.pending.pop(position, None)
        if consumer is not None:
            consumer.pending.pop(position, None)
        self.replay.discard(position)
        self.replay_keys.pop(position, None)
        self.redelivery_counts.pop(position, None)

    def take_back(self, position: Position, count_redelivery: bool) -> None:
        """An entry out at a consumer goes to the replay set."""
        consumer = self.pending.pop(position, None)
        if consumer is not None:
            consumer.pending.pop(position, None)
        self.dispatched_at.pop(position, None)
        if count_redelivery:
            self.redelivery_counts[position] = self.redelivery_counts.get(position, 0) + 1
        self.replay.add(position)

    def take_back_all(self, consumer: ServerConsumer, count_redelivery: bool) -> None:
        for position in list(consumer.pending):
            self.take_back(position, count_redelivery)

    def stuck_behind(self, newest_acked: Position, now_s: float, threshold_s: float) -> list[Position]:
        """Pending entries older than newest_acked that went out at least threshold_s ago."""
        return [p for p, t in self.dispatched_at.items() if p < newest_acked and now_s - t >= threshold_s]

    def due_after_delay(self, position: Position) -> None:
        """A delayed entry whose time has come; marked as seen so it is not delayed again."""
        self.redelivery_counts.setdefault(position, 0)
        self.replay.add(position)

    def clear(self, consumers: list[ServerConsumer]) -> None:
        for consumer in consumers:
            consumer.pending.clear()
        self.pending.clear()
        self.dispatched_at.clear()
        self.replay.clear()
        self.replay_keys.clear()
        self.redelivery_counts.clear()
