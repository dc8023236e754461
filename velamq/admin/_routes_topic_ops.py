"""Operations on live topics: stats, internal stats, last message id, unload, compaction (WC-4).

Under /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}:

    GET /stats                         TopicStats; 404 unknown (and for a partitioned topic itself)
    GET /partitioned-stats?perPartition=true|false
                                       PartitionedTopicStats; 404 if not a partitioned topic;
                                       perPartition=false empties "partitions"
    GET /internalStats                 PersistentTopicInternalStats; 404 unknown
    GET /partitioned-internalStats     {"metadata": {"partitions": N}, "partitions": {name: internal stats}}
    GET /lastMessageId                 {"ledgerId", "entryId", "partitionIndex"}; 405 partitioned topic
    PUT /unload                        204; a partitioned topic unloads every partition
    PUT /compaction                    204; every partition of a partitioned topic (a compaction
                                       already running is left to finish)
    POST /trim                         204; retention applied now (consumed ledgers it no longer
                                       keeps are deleted); every partition of a partitioned topic
    GET /compaction                    LongRunningProcessStatus {"status", "lastError"}; 405 partitioned

The work is the broker's (BrokerBackend); the JSON is _stats_json.py's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from velamq._errors import AlreadyExistsError, NotFoundError
from velamq._topic_name import TopicName
from velamq.admin._http import HttpError, Response
from velamq.admin._non_persistent_stats import any_partitioned_stats_json, any_stats_json
from velamq.admin._params import bool_param, partitions_of, require_namespace, require_topic, topic_of
from velamq.admin._router import Call, Router
from velamq.admin._routes_replication import add_replication
from velamq.admin._stats_json import (
    compaction_status_json,
    internal_stats_json,
    last_message_id_json,
)
from velamq.broker import NonPersistentTopicStats, TopicStats

T = TypeVar("T")

TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"


async def on_topic_or_partitions(
    call: Call, topic: TopicName, action: Callable[[str], Awaitable[T]]
) -> list[T]:
    """Run `action` on the topic, or on each partition of a partitioned topic, as Pulsar fans admin
    calls out. Partitions that say NotFoundError are skipped unless all of them do; one that says
    AlreadyExistsError is reported after the others have run (so a retry converges)."""
    partitions = await partitions_of(call, topic)
    if partitions == 0:
        return [await action(str(topic))]
    results: list[T] = []
    not_found: NotFoundError | None = None
    exists: AlreadyExistsError | None = None
    for index in range(partitions):
        try:
            results.append(await action(str(topic.partition(index))))
        except NotFoundError as exc:
            not_found = not_found or exc
        except AlreadyExistsError as exc:
            exists = exists or exc
    if exists is not None:
        raise exists
    if not results and not_found is not None:
        raise not_found
    return results


async def _not_partitioned(call: Call, topic: TopicName, what: str) -> None:
    if await partitions_of(call, topic) > 0:
        raise HttpError(405, f"{what} on a partitioned topic is not allowed")


async def _existing_topic(call: Call) -> TopicName:
    topic = topic_of(call)
    await require_namespace(call, topic.namespace)
    if await partitions_of(call, topic) > 0:
        # Pulsar has no single ledger behind a partitioned topic's name.
        raise HttpError(404, f"Topic {topic} not found: it is a partitioned topic, ask its partitions")
    return topic


async def stats(call: Call) -> Response:
    name = str(await _existing_topic(call))
    return Response.json(add_replication(call, name, any_stats_json(await call.backend.topic_stats(name))))


async def partitioned_stats(call: Call) -> Response:
    topic = topic_of(call)
    per_partition = bool_param(call, "perPartition", default=True)
    await require_namespace(call, topic.namespace)
    if await partitions_of(call, topic) == 0:
        raise HttpError(404, f"Partitioned Topic not found: {topic} is not a partitioned topic")
    partitions = await partitions_of(call, topic)
    found: dict[str, TopicStats | NonPersistentTopicStats] = {}
    for index in range(partitions):
        name = str(topic.partition(index))
        try:
            found[name] = await call.backend.topic_stats(name)
        except NotFoundError:
            continue  # a partition never used has no ledger yet
    result = any_partitioned_stats_json(partitions, found)
    if not per_partition:
        result["partitions"] = {}
    return Response.json(result)


async def internal_stats(call: Call) -> Response:
    stats = await call.backend.topic_internal_stats(str(await _existing_topic(call)))
    return Response.json(internal_stats_json(stats))


async def partitioned_internal_stats(call: Call) -> Response:
    topic = topic_of(call)
    await require_namespace(call, topic.namespace)
    partitions = await partitions_of(call, topic)
    if partitions == 0:
        raise HttpError(404, f"Partitioned Topic not found: {topic} is not a partitioned topic")
    result: dict[str, Any] = {"metadata": {"partitions": partitions}, "partitions": {}}
    for index in range(partitions):
        name = str(topic.partition(index))
        try:
            result["partitions"][name] = internal_stats_json(await call.backend.topic_internal_stats(name))
        except NotFoundError:
            continue  # a partition never used has no ledger yet
    return Response.json(result)


async def last_message_id(call: Call) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    await _not_partitioned(call, topic, "Get last message id")
    return Response.json(last_message_id_json(await call.backend.last_message_id(str(topic))))


async def _on_each_partition(call: Call, action: Callable[[str], Awaitable[Any]]) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    await on_topic_or_partitions(call, topic, action)
    return Response.no_content()


async def unload(call: Call) -> Response:
    return await _on_each_partition(call, call.backend.unload_topic)


async def trigger_compaction(call: Call) -> Response:
    return await _on_each_partition(call, call.backend.trigger_compaction)


async def trim(call: Call) -> Response:
    return await _on_each_partition(call, call.backend.trim_topic)


async def compaction_status(call: Call) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    await _not_partitioned(call, topic, "Compaction status")
    return Response.json(compaction_status_json(call.backend.compaction_status(str(topic))))


def register(router: Router) -> None:
    router.add("GET", TOPIC + "/stats", stats)
    router.add("GET", TOPIC + "/partitioned-stats", partitioned_stats)
    router.add("GET", TOPIC + "/internalStats", internal_stats)
    router.add("GET", TOPIC + "/partitioned-internalStats", partitioned_internal_stats)
    router.add("GET", TOPIC + "/lastMessageId", last_message_id)
    router.add("PUT", TOPIC + "/unload", unload)
    router.add("PUT", TOPIC + "/compaction", trigger_compaction)
    router.add("GET", TOPIC + "/compaction", compaction_status)
    router.add("POST", TOPIC + "/trim", trim)
