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

import asyncio
import logging
from collections.abc import Sequence
from typing import Final, Protocol

from velamq.broker._errors import BrokerRequestError
from velamq.metadata import MetadataStore
from velamq.protocol import pb


class TopicDeleter(Protocol):
    """What a delete needs of the broker: the metadata store, the names whose loads are refused
    meanwhile, and deleting one loaded or unloaded topic's data (BrokerService has all three)."""

    @property
    def metadata(self) -> MetadataStore: ...

    @property
    def deleting(self) -> set[str]: ...

    async def delete(self, topic: str) -> None: ...

    async def serves(self, topic: str) -> bool:
        """Whether this broker serves the topic (a worker of several serves its bundles only)."""
        ...

log = logging.getLogger(__name__)

# A delete waits this long for the other workers to delete their partitions of a partitioned topic,
# looking every elsewhere_poll_s (they see the marks through the shared metadata's change watch).
elsewhere_timeout_s: Final = 60.0
elsewhere_poll_s: Final = 0.05


async def delete_topics(broker: TopicDeleter, topics: Sequence[str], partitioned: str | None = None) -> None:
    """Delete topics (full names) and, if given, the partitioned topic they are the partitions of."""
    metadata = broker.metadata
    mine = [topic for topic in topics if await broker.serves(topic)]
    broker.deleting.update(mine)  # before the marks: this worker's watch must leave them to us
    await metadata.mark_topics_deleting(topics, [partitioned] if partitioned is not None else [])
    for topic in mine:
        await broker.delete(topic)
    for topic in mine:
        await metadata.finish_topic_deletion(topic)
    broker.deleting.difference_update(mine)
    if len(mine) < len(topics):
        # The other workers' topics (partitions spread over bundles): each owner finishes the
        # marks of its own when it sees them (finish_interrupted_deletions, owned_only).
        await _deleted_elsewhere(broker, set(topics).difference(mine))
    if partitioned is not None:
        await metadata.finish_topic_deletion(partitioned, partitioned=True)


async def _deleted_elsewhere(broker: TopicDeleter, topics: set[str]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + elsewhere_timeout_s
    while True:
        marked = {name for name, partitioned in await broker.metadata.topics_being_deleted() if not partitioned}
        left = topics & marked
        if not left:
            return
        if loop.time() > deadline:
            raise BrokerRequestError(
                pb.ServiceNotReady, f"the workers serving {', '.join(sorted(left))} did not delete them yet: try again"
            )
        await asyncio.sleep(elsewhere_poll_s)


async def finish_interrupted_deletions(broker: TopicDeleter, owned_only: bool = False, orphans: bool = False) -> int:
    """At start, before anything is served: finish every delete a crash cut short. Returns how
    many topics (and partitioned topics) were finished. owned_only (a worker of several): only the
    marks of topics this worker serves, which another worker's delete (or a crash) left for it;
    a partitioned topic's own mark stays for the worker deleting it, unless `orphans` (at start:
    whoever deleted it crashed) and none of its partitions is marked any more."""
    marked = await broker.metadata.topics_being_deleted()
    if owned_only:
        marked = [
            (n, p) for n, p in marked
            if (not p and n not in broker.deleting and await broker.serves(n))
            or (p and orphans and not any(not q and m.startswith(f"{n}-partition-") for m, q in marked))
        ]
    if not marked:
        return 0
    topics = [name for name, partitioned in marked if not partitioned]
    broker.deleting.update(topics)
    for topic in topics:
        await broker.delete(topic)
    for name, partitioned in marked:  # partitions first, then their partitioned topics
        await broker.metadata.finish_topic_deletion(name, partitioned=partitioned)
    broker.deleting.difference_update(topics)
    if not owned_only:
        log.warning("finished %d topic deletes cut short by a crash: %s", len(marked), ", ".join(n for n, _ in marked))
    return len(marked)
