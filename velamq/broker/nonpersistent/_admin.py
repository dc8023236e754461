"""The admin operations that act on a loaded non-persistent topic (BrokerAdmin dispatches here).

As Pulsar's: stats and internal stats (no ledgers; a cursor entry per subscription, all at
(0, 0)), the subscriptions listed, created (in memory, kept while the topic is loaded) and
deleted. What needs a log (skip, expire, reset, peek, messages by id or position, compaction,
trim, last message id) has nothing to act on: BrokerAdmin refuses it for non-persistent topics.
"""

from __future__ import annotations

from velamq._errors import AlreadyExistsError, NotFoundError, PreconditionFailedError
from velamq.broker.nonpersistent._subscription import NON_PERSISTENT_POSITION
from velamq.broker.nonpersistent._topic import NonPersistentTopic
from velamq.broker.stats._records import CursorStats, InternalStats
from velamq.broker.subscription._selector import SubType


def internal_stats(topic: NonPersistentTopic) -> InternalStats:
    return InternalStats(
        entries_added_counter=topic.entries_added,
        number_of_entries=0,
        total_size_bytes=0,
        current_ledger_entries=0,
        current_ledger_size_bytes=0,
        pending_add_entries=0,
        last_confirmed_entry=NON_PERSISTENT_POSITION,
        ledgers=(),
        cursors={
            name: CursorStats(
                mark_delete_position=NON_PERSISTENT_POSITION,
                read_position=NON_PERSISTENT_POSITION,
                messages_consumed_counter=s.out.messages_total,
                individually_acked=(),
                entries_since_mark_delete=0,
                active=bool(s.consumers),
            )
            for name, s in topic.subscriptions.items()
        },
    )


def list_subscriptions(topic: NonPersistentTopic) -> list[str]:
    return sorted(topic.subscriptions)


async def create_subscription(topic: NonPersistentTopic, name: str) -> None:
    """A durable subscription in memory: it gets what is published while it has consumers."""
    if name in topic.subscriptions:
        raise AlreadyExistsError(f"subscription {name} already exists")
    await topic.subscription(name, SubType.EXCLUSIVE, True, False, None)


async def delete_subscription(topic: NonPersistentTopic, name: str, force: bool) -> None:
    subscription = topic.subscriptions.get(name)
    if subscription is None:
        raise NotFoundError(f"subscription {name} not found")
    if subscription.consumers and not force:
        raise PreconditionFailedError(f"subscription {name} has active consumers")
    await topic.remove_subscription(name, delete_cursor=True)
