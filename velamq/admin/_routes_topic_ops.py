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
from velamq.admin._routing import by_owner, no_result, on_partition
from velamq.admin._stats_json import (
    compaction_status_json,
    internal_stats_json,
    last_message_id_json,
)

T = TypeVar("T")

TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"


async def on_topic_or_partitions(
    call: Call, topic: TopicName, action: Callable[[str], Awaitable[T]], *, from_json: Callable[[Any], T]
) -> list[T]:
    """Run `action` on the topic, or on each partition of a partitioned topic, as Pulsar fans admin
    calls out; a partition another worker owns is asked there with the same request (`on_partition`,
    whose JSON reply `from_json` turns into the action's result). Partitions that say NotFoundError
    are skipped unless all of them do; one that says AlreadyExistsError is reported after the others
    have run (so a retry converges)."""
    partitions = await partitions_of(call, topic)
    if partitions == 0:
        return [await action(str(topic))]
    results: list[T] = []
    not_found: NotFoundError | None = None
    exists: AlreadyExistsError | None = None
    for index in range(partitions):
        try:
            results.append(await on_partition(call, topic.partition(index), action, from_json))
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


async def _each_partition_json(
    call: Call, topic: TopicName, partitions: int, local: Callable[[str], Awaitable[dict[str, Any]]], suffix: str
) -> dict[str, Any]:
    """{partition name: its JSON} for the partitions that have something to show; a partition
    another worker owns answers GET <partition>/<suffix> there."""
    found: dict[str, Any] = {}
    for index in range(partitions):
        partition = topic.partition(index)
        try:
            found[str(partition)] = await on_partition(call, partition, local, _json_object, suffix=(suffix,),
                                                       keep_query=False)
        except NotFoundError:
            continue  # a partition never used has no ledger yet
    return found


def _json_object(reply: Any) -> dict[str, Any]:
    if not isinstance(reply, dict):
        raise HttpError(502, "a worker answered a partition's stats with something that is not an object")
    return reply


async def _partition_stats(call: Call, name: str) -> dict[str, Any]:
    return any_stats_json(await call.backend.topic_stats(name))


async def partitioned_stats(call: Call) -> Response:
    topic = topic_of(call)
    per_partition = bool_param(call, "perPartition", default=True)
    await require_namespace(call, topic.namespace)
    partitions = await partitions_of(call, topic)
    if partitions == 0:
        raise HttpError(404, f"Partitioned Topic not found: {topic} is not a partitioned topic")
    found = await _each_partition_json(call, topic, partitions, lambda name: _partition_stats(call, name), "stats")
    result = any_partitioned_stats_json(partitions, found)
    if not per_partition:
        result["partitions"] = {}
    return Response.json(result)


async def internal_stats(call: Call) -> Response:
    stats = await call.backend.topic_internal_stats(str(await _existing_topic(call)))
    return Response.json(internal_stats_json(stats))


async def _partition_internal_stats(call: Call, name: str) -> dict[str, Any]:
    return internal_stats_json(await call.backend.topic_internal_stats(name))


async def partitioned_internal_stats(call: Call) -> Response:
    topic = topic_of(call)
    await require_namespace(call, topic.namespace)
    partitions = await partitions_of(call, topic)
    if partitions == 0:
        raise HttpError(404, f"Partitioned Topic not found: {topic} is not a partitioned topic")
    found = await _each_partition_json(
        call, topic, partitions, lambda name: _partition_internal_stats(call, name), "internalStats"
    )
    return Response.json({"metadata": {"partitions": partitions}, "partitions": found})


async def last_message_id(call: Call) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    await _not_partitioned(call, topic, "Get last message id")
    return Response.json(last_message_id_json(await call.backend.last_message_id(str(topic))))


async def _on_each_partition(call: Call, action: Callable[[str], Awaitable[Any]]) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    await on_topic_or_partitions(call, topic, action, from_json=no_result)
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
    router.add("GET", TOPIC + "/stats", by_owner(stats))
    router.add("GET", TOPIC + "/partitioned-stats", by_owner(partitioned_stats))
    router.add("GET", TOPIC + "/internalStats", by_owner(internal_stats))
    router.add("GET", TOPIC + "/partitioned-internalStats", by_owner(partitioned_internal_stats))
    router.add("GET", TOPIC + "/lastMessageId", by_owner(last_message_id))
    router.add("PUT", TOPIC + "/unload", by_owner(unload))
    router.add("PUT", TOPIC + "/compaction", by_owner(trigger_compaction))
    router.add("GET", TOPIC + "/compaction", by_owner(compaction_status))
    router.add("POST", TOPIC + "/trim", by_owner(trim))
