"""Acknowledgements and redeliveries of a subscription: what moves its cursor and what sends
entries out again.

Individual and cumulative acks (with batch-index ack sets: a batch stays unacknowledged until its
last message is acked), acks made behind the consumers' backs (admin skip / expire, TTL, backlog
eviction), nacks, and BR-4's redelivery of entries stuck behind acknowledged ones. Each drops or
takes back entries in the in-flight bookkeeping and wakes the dispatch task when something may go
out (_dispatch.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from velamq.broker.log import _positions
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._end_of_topic import check_end_of_topic
from velamq.broker.subscription._selector import SubType
from velamq.broker.subscription._state import SubscriptionState
from velamq.storage import Position


class Acknowledgements(SubscriptionState):
    """A base of Subscription: owns the acknowledgement and redelivery operations over the
    subscription's cursor and in-flight bookkeeping (permits included: FLOW, like an ack, may let
    dispatch go on)."""

    __slots__ = ()

    if TYPE_CHECKING:

        def wake(self) -> None: ...  # the dispatch task's (_dispatch.py)

    def flow(self, consumer: ServerConsumer, permits: int) -> None:
        consumer.permits += permits
        self.wake()

    def acknowledge(self, acks: Iterable[tuple[Position, list[int] | None]]) -> None:
        full: list[Position] = []
        for position, ack_set in acks:
            if ack_set is not None and self._partial_ack(position, ack_set):
                continue
            full.append(position)
        if full:
            self.cursor.ack(full)
            in_flight = self._in_flight
            if in_flight is not None:
                for position in full:
                    in_flight.forget(position)
        self._after_ack()

    def acknowledge_cumulative(self, position: Position, ack_set: list[int] | None) -> None:
        if ack_set is not None and self._partial_ack(position, ack_set):
            # Everything before the batch is acknowledged; the batch itself only partly.
            position = _positions.before(position)
        self.cursor.ack_cumulative(position)
        in_flight = self._in_flight
        if in_flight is not None:
            for p in [p for p in in_flight.pending if p <= position]:
                in_flight.forget(p)
        self._after_ack()

    def _partial_ack(self, position: Position, ack_set: list[int]) -> bool:
        """Merge a batch-index ack; True while some messages of the batch remain unacked."""
        current = self.cursor.batch_ack_set(position)
        merged = ack_set if current is None else [a & b for a, b in zip(current, ack_set, strict=False)]
        if any(merged):
            self.cursor.set_batch_ack_set(position, merged)
            return True
        self.cursor.set_batch_ack_set(position, None)
        return False

    def forget_acked(self) -> None:
        """Drop pending, replay and delayed entries that were acknowledged behind the consumers'
        backs (admin skip / expire, TTL, backlog eviction)."""
        mark_delete = self.cursor.mark_delete_position

        def gone(p: Position) -> bool:
            return p <= mark_delete or self.cursor.is_acked(p)

        in_flight = self._in_flight
        if in_flight is not None:
            for position in [p for p in in_flight.pending if gone(p)] + [p for p in in_flight.replay if gone(p)]:
                in_flight.forget(position)
        if self._delayed is not None:
            self._delayed.discard_up_to(mark_delete)
        if self.read_position <= mark_delete:
            self.read_position = self.ledger.next_position(mark_delete)
        self._after_ack()
        self.wake()

    def redeliver_stuck_holes(self, threshold_s: float) -> int:
        """BR-4: entries still unacknowledged behind acknowledged ones after threshold_s go back
        to the replay set (to any consumer), so the mark-delete position can move on."""
        in_flight = self._in_flight
        if in_flight is None or not in_flight.pending:
            return 0
        acked = self.cursor.individually_acked.ranges()
        if not acked:
            return 0
        stuck = in_flight.stuck_behind(acked[-1][1], self.clock.monotonic_s(), threshold_s)
        for position in stuck:
            in_flight.take_back(position, count_redelivery=True)
        if stuck:
            self._counting().add_redelivered(len(stuck))
            self.wake()
        return len(stuck)

    def redeliver(self, consumer: ServerConsumer, positions: list[Position] | None) -> None:
        """A consumer's nack: all its unacked entries (None) or the listed ones go to the replay set."""
        in_flight = self._flight()
        if positions is None:
            consumer.redelivered.add(sum(consumer.pending.values()), 0)
            in_flight.take_back_all(consumer, count_redelivery=True)
        else:
            mine = [p for p in positions if in_flight.pending.get(p) is consumer]
            consumer.redelivered.add(sum(consumer.pending.get(p, 0) for p in mine), 0)
            for position in mine:
                in_flight.take_back(position, count_redelivery=True)
            if mine:
                self._counting().add_redelivered(len(mine))
        self.wake()

    def _after_ack(self) -> None:
        if self.terminated:
            check_end_of_topic(self)
        if self._sub_type != SubType.KEY_SHARED or self._selector is None:
            return
        first_unacked = self.ledger.next_position(self.cursor.mark_delete_position)
        if self._selector.release_joined(first_unacked) or (self._in_flight is not None and self._in_flight.replay):
            self.wake()
