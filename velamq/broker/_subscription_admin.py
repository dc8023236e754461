"""The admin API's operations on one subscription's cursor: skip, expire, reset, peek.

BrokerAdmin looks the topic up and hands it here. A subscription with consumers is changed through
its Subscription (so that dispatch forgets what was acknowledged behind the consumers' backs, or
rewinds for a reset); a durable subscription without consumers is only its ManagedCursor.
NotFoundError when the topic has no such subscription.
"""

from __future__ import annotations

from velamq._errors import NotFoundError, PreconditionFailedError
from velamq.broker import _positions
from velamq.broker._policy_tasks import expire
from velamq.broker._subscription import Subscription
from velamq.broker._topic import Topic
from velamq.storage import ManagedCursor, Position


def skip(t: Topic, subscription: str, count: int | None) -> None:
    """Acknowledge the first `count` unacknowledged entries; None: everything (skip_all)."""
    cursor, s = _cursor(t, subscription)
    last = t.ledger.last_confirmed
    if last is None:
        return
    if count is None:
        cursor.ack_cumulative(last)
    else:
        skipped: list[Position] = []
        position = t.ledger.next_position(cursor.mark_delete_position)
        while len(skipped) < count and position <= last:
            if not cursor.is_acked(position):
                skipped.append(position)
            position = t.ledger.next_position(position)
        cursor.ack(skipped)
    if s is not None:
        s.forget_acked()


async def expire_older(t: Topic, subscription: str, seconds: int, now_ms: int) -> None:
    """Acknowledge the entries published more than `seconds` before now (TTL's rule, _policy_tasks)."""
    cursor, s = _cursor(t, subscription)
    expired = await expire(t, cursor, now_ms - seconds * 1000, now_ms, s)
    if s is not None:
        s.count_expired(expired)
        s.forget_acked()


async def reset(t: Topic, subscription: str, timestamp_ms: int | None, message_id: tuple[int, int] | None) -> None:
    """Move the cursor to a message id (the next read is that message) or to a publish time."""
    cursor, s = _cursor(t, subscription)
    if message_id is not None:
        mark_delete = _positions.before(Position(*message_id))
    elif timestamp_ms is not None:
        mark_delete = await _positions.mark_delete_for_publish_time(t.ledger, timestamp_ms)
    else:
        raise PreconditionFailedError("reset needs a timestamp or a message id")
    if s is not None:
        s.seek(mark_delete)
    else:
        cursor.reset(mark_delete)


async def peek(t: Topic, subscription: str, count: int) -> list[tuple[tuple[int, int], bytes]]:
    """The first `count` unacknowledged entries of the subscription's backlog, with their ids."""
    cursor, _ = _cursor(t, subscription)
    out: list[tuple[tuple[int, int], bytes]] = []
    position = t.ledger.next_position(cursor.mark_delete_position)
    last = t.ledger.last_confirmed
    while last is not None and position <= last and len(out) < count:
        entries = await t.ledger.read_entries(position, count)
        if not entries:
            break
        for entry in entries:
            if not cursor.is_acked(entry.position) and len(out) < count:
                out.append(((entry.position.ledger_id, entry.position.entry_id), entry.data))
        position = t.ledger.next_position(entries[-1].position)
    return out


def _cursor(t: Topic, subscription: str) -> tuple[ManagedCursor, Subscription | None]:
    s = t.subscriptions.get(subscription)
    if s is not None:
        return s.cursor, s
    cursor = t.ledger.cursors.get(subscription)
    if cursor is None:
        raise NotFoundError(f"subscription {subscription} not found")
    return cursor, None
