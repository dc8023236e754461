"""Crash-safe topic deletes: a topic is either fully there or fully gone, never listed with holes.

A delete removes two kinds of state that no single transaction covers: the metadata rows (SQLite)
and the topic's managed ledgers (storage: its log and its compacted store). Removing files first
and rows last, as the first version did, left a crash in between with a topic still listed whose
ledgers were partly gone. So a delete runs in this order:

    1. mark      metadata: a topic_deletions row per topic (one transaction for a partitioned
                 topic and all its partitions). This is the commit point: from here on the delete
                 will finish, now or at the next start.
    2. close     the loaded topic: its producers and consumers are disconnected (their clients
                 reconnect and are refused with ServiceNotReady until step 5, then may create a new,
                 empty topic if auto-creation is on), cursors and dispatch stop
    3. ledgers   storage deletes each managed ledger (storage makes each of these atomic and
                 idempotent: deleting one that is gone is a no-op)
    4. metadata  the topic's rows, its policies if nothing else carries them, and its mark, in one
                 transaction
    5. loads of the name are allowed again

A crash before 1 leaves the topic whole. A crash after 1 leaves a mark, and the broker's start
(`finish_interrupted_deletions`, before it listens) runs 3 and 4 again for every mark. A delete that
fails at 3 keeps refusing loads of the topic (its data is partly gone) until a later delete or a
restart finishes it. Roll-back is never needed: nothing is removed before the mark.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from velamq.metadata import MetadataStore


class TopicDeleter(Protocol):
    """What a delete needs of the broker: the metadata store, the names whose loads are refused
    meanwhile, and deleting one loaded or unloaded topic's data (BrokerService has all three)."""

    @property
    def metadata(self) -> MetadataStore: ...

    @property
    def deleting(self) -> set[str]: ...

    async def delete(self, topic: str) -> None: ...

log = logging.getLogger(__name__)


async def delete_topics(broker: TopicDeleter, topics: Sequence[str], partitioned: str | None = None) -> None:
    """Delete topics (full names) and, if given, the partitioned topic they are the partitions of."""
    metadata = broker.metadata
    await metadata.mark_topics_deleting(topics, [partitioned] if partitioned is not None else [])
    broker.deleting.update(topics)
    for topic in topics:
        await broker.delete(topic)
    for topic in topics:
        await metadata.finish_topic_deletion(topic)
    if partitioned is not None:
        await metadata.finish_topic_deletion(partitioned, partitioned=True)
    broker.deleting.difference_update(topics)


async def finish_interrupted_deletions(broker: TopicDeleter) -> int:
    """At start, before anything is served: finish every delete a crash cut short. Returns how
    many topics (and partitioned topics) were finished."""
    marked = await broker.metadata.topics_being_deleted()
    if not marked:
        return 0
    topics = [name for name, partitioned in marked if not partitioned]
    broker.deleting.update(topics)
    for topic in topics:
        await broker.delete(topic)
    for name, partitioned in marked:  # partitions first, then their partitioned topics
        await broker.metadata.finish_topic_deletion(name, partitioned=partitioned)
    broker.deleting.difference_update(topics)
    log.warning("finished %d topic deletes cut short by a crash: %s", len(marked), ", ".join(n for n, _ in marked))
    return len(marked)
