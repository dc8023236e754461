"""Terminating a topic: it takes no more messages, and its consumers learn when they have read it all.

As Pulsar (PersistentTopicsBase.internalTerminate, PersistentTopic.terminate; pulsar-admin topics
terminate):

    terminate(topic)   -> the position of its last entry ((current ledger, -1) when it has none);
                          the same position again for a terminated topic
    producers          closed by the broker; a producer that (re)connects is refused with
                       TopicTerminatedError (Topic.admit_producer), so the client fails its sends
                       with TopicTerminated
    consumers          get everything published before; once a subscription has consumed it all,
                       REACHED_END_OF_TOPIC (velamq/broker/subscription/_end_of_topic.py)

The position is recorded with the topic's policies (a partition's under its partitioned topic's,
one key per partition) before the call answers, so the topic stays terminated across restarts and
unloads, and the record goes when the topic is deleted.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from velamq.broker.subscription._end_of_topic import check_end_of_topic
from velamq.broker.topic._topic import Topic
from velamq.storage import Position

log = logging.getLogger(__name__)

# The topic policy that records where a topic was terminated ("ledger:entry"); velamq's own key.
_KEY = "velamqTerminatedAt"


class TopicPolicyReader(Protocol):
    async def get_topic_policies(self, topic: str) -> dict[str, Any]: ...


class TerminationRows(TopicPolicyReader, Protocol):
    """What terminating reads and writes of the metadata store (MetadataStore implements it)."""

    async def set_topic_policy(self, topic: str, key: str, value: Any) -> None: ...


def _key(topic: Topic) -> str:
    index = topic.partition_index
    return _KEY if index < 0 else f"{_KEY}.partition-{index}"


async def stored_termination(metadata: TopicPolicyReader, topic: Topic) -> Position | None:
    """Where the topic was terminated, if it was (read when the topic loads)."""
    value = (await metadata.get_topic_policies(topic.full_name)).get(_key(topic))
    if not isinstance(value, str):
        return None
    ledger, _, entry = value.partition(":")
    try:
        return Position(int(ledger), int(entry))
    except ValueError:
        return None


async def terminate(topic: Topic, metadata: TerminationRows) -> Position:
    """Terminate a loaded topic; returns the position of its last entry."""
    if topic.terminated_at is not None:
        return topic.terminated_at
    topic.terminating = True  # producers are refused from now on
    for producer in list(topic.producers.values()):
        producer.close_by_broker()
    ledger = topic.ledger
    while ledger.pending_appends:  # what was sent before is durable before the end is taken
        await ledger.appends_settled()
    end = ledger.last_confirmed or Position(ledger.current_ledger_id, -1)
    await metadata.set_topic_policy(topic.full_name, _key(topic), f"{end.ledger_id}:{end.entry_id}")
    set_terminated(topic, end)
    log.info("topic %s terminated at %s:%s", topic.full_name, end.ledger_id, end.entry_id)
    return end


def set_terminated(topic: Topic, end: Position) -> None:
    """The topic ends at `end` (terminated now, or found terminated when it loaded)."""
    topic.terminating = True
    topic.terminated_at = end
    for subscription in topic.subscriptions.values():
        subscription.terminated = True
        check_end_of_topic(subscription)

