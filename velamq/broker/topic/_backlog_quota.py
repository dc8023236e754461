"""The backlog quota of a topic (BR-3): when its slowest subscription has too much to read.

A quota limits the backlog's size (estimated as Pulsar does: backlog entries times the average
entry size, known at any time without I/O) and its age (of the oldest unacknowledged message of
the slowest cursor: it needs a read, so the periodic policy check measures it). Exceeded, the
policy decides:

    producer_exception         producers are disconnected; reconnecting ones are refused with
                               ProducerBlockedQuotaExceededException (the client fails their sends)
    producer_request_hold      the same, refused with ProducerBlockedQuotaExceededError (the client
                               keeps the sends and retries: they wait)
    consumer_backlog_eviction  the slowest cursors skip their oldest backlog until the quota holds

The size is checked at every publish (`check_quota_on_publish`, called by Topic.after_durable
after the receipt went out) and at producer creation (`quota_exceeded`); the age and the eviction
at every policy check (`enforce_backlog_quota`, from _policy_tasks.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from velamq.broker.log._entry_info import entry_info
from velamq.broker.log._positions import before
from velamq.metadata import Policies
from velamq.storage import ManagedCursor, ManagedLedger, Position


class _ClosableProducer(Protocol):
    def close_by_broker(self) -> None: ...


class _TrimmedSubscription(Protocol):
    def forget_acked(self) -> None: ...


class QuotaTopic(Protocol):
    """What the backlog quota reads and does to a topic (Topic is one): its log, its policies, the
    age verdict of the last check, its producers to close and its subscriptions to trim."""

    quota_age_exceeded: bool

    @property
    def full_name(self) -> str: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def policies(self) -> Policies: ...

    @property
    def producers(self) -> Mapping[str, _ClosableProducer]: ...

    @property
    def subscriptions(self) -> Mapping[str, _TrimmedSubscription]: ...

log = logging.getLogger(__name__)


def backlog_bytes(ledger: ManagedLedger) -> int:
    """The slowest subscription's backlog in bytes, estimated as Pulsar does (entries times the
    average entry size); O(subscriptions), no I/O."""
    cursors = ledger.cursors
    if not cursors or not ledger.entries_total:
        return 0
    backlog = max(c.backlog for c in cursors.values())
    return int(backlog * ledger.size_bytes / ledger.entries_total)


def quota_exceeded(topic: QuotaTopic) -> str | None:
    """The producer policy in force when the quota is exceeded now, else None: the size from the
    backlog as it is (a producer is admitted as soon as the backlog is under the limit), the age as
    the last policy check found it, unless the backlog is gone since."""
    quota = topic.policies.backlog_quota
    if quota is None or quota.policy == "consumer_backlog_eviction":
        return None
    if quota.limit_bytes >= 0 and backlog_bytes(topic.ledger) > quota.limit_bytes:
        return quota.policy
    if topic.quota_age_exceeded and quota.limit_time_s >= 0 and any(c.backlog for c in topic.ledger.cursors.values()):
        return quota.policy
    return None


def check_quota_on_publish(topic: QuotaTopic) -> None:
    """A size quota is checked at every publish, so producers stop within one entry (or the
    batches already on the wire) of the limit, not at the next periodic check."""
    policy = quota_exceeded(topic)
    if policy is not None:
        log.info("backlog quota exceeded on %s at publish: %s", topic.full_name, policy)
        for producer in list(topic.producers.values()):
            producer.close_by_broker()


async def enforce_backlog_quota(topic: QuotaTopic, now_ms: int) -> None:
    """The periodic part of the backlog quota: the age of the oldest unacknowledged message (the
    size is checked at every publish and producer creation too), and the eviction."""
    quota = topic.policies.backlog_quota
    if quota is None or quota.unlimited:
        topic.quota_age_exceeded = False
        return
    topic.quota_age_exceeded = await _age_exceeded(topic, now_ms)
    if quota.policy == "consumer_backlog_eviction":
        size_exceeded = quota.limit_bytes >= 0 and backlog_bytes(topic.ledger) > quota.limit_bytes
        if size_exceeded or topic.quota_age_exceeded:
            await _evict(topic, now_ms)
        return
    if quota_exceeded(topic) is not None and topic.producers:
        log.info("backlog quota exceeded on %s: %s", topic.full_name, quota.policy)
        for producer in list(topic.producers.values()):
            producer.close_by_broker()


def _slowest(topic: QuotaTopic) -> ManagedCursor | None:
    cursors = list(topic.ledger.cursors.values())
    return max(cursors, key=lambda c: c.backlog) if cursors else None


async def _oldest_unacked_ms(topic: QuotaTopic, cursor: ManagedCursor) -> int | None:
    position = topic.ledger.next_position(cursor.mark_delete_position)
    last = topic.ledger.last_confirmed
    if last is None or position > last:
        return None
    entries = await topic.ledger.read_entries(position, 1)
    return entry_info(entries[0].data).publish_time_ms if entries else None


async def _age_exceeded(topic: QuotaTopic, now_ms: int) -> bool:
    quota = topic.policies.backlog_quota
    cursor = _slowest(topic)
    if quota is None or quota.limit_time_s < 0 or cursor is None or cursor.backlog == 0:
        return False
    oldest = await _oldest_unacked_ms(topic, cursor)
    return oldest is not None and now_ms - oldest > quota.limit_time_s * 1000


async def _evict(topic: QuotaTopic, now_ms: int) -> None:
    """Drop the oldest backlog of the slowest cursors until the quota holds."""
    quota = topic.policies.backlog_quota
    assert quota is not None
    ledger = topic.ledger
    average = ledger.size_bytes / ledger.entries_total if ledger.entries_total else 1.0
    time_cutoff = now_ms - quota.limit_time_s * 1000
    for name, cursor in list(ledger.cursors.items()):
        last = ledger.last_confirmed
        if last is None:
            return
        keep = cursor.backlog
        if quota.limit_bytes >= 0:
            keep = min(keep, int(quota.limit_bytes / max(average, 1.0)))
        position = ledger.next_position(cursor.mark_delete_position)
        drop_until: Position | None = None
        to_drop = cursor.backlog - keep
        while position <= last and to_drop > 0:
            drop_until = position
            to_drop -= 0 if cursor.is_acked(position) else 1
            position = ledger.next_position(position)
        if quota.limit_time_s >= 0:
            found = await ledger.find_first(lambda data: entry_info(data).publish_time_ms >= time_cutoff)
            candidate = last if found is None else before(found)
            if drop_until is None or candidate > drop_until:
                drop_until = candidate
        if drop_until is not None and drop_until > cursor.mark_delete_position:
            cursor.ack_cumulative(drop_until)
            subscription = topic.subscriptions.get(name)
            if subscription is not None:
                subscription.forget_acked()
            log.info("evicted backlog of %s/%s up to %s", topic.full_name, name, drop_until)
