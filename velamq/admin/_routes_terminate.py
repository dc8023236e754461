"""Terminating topics (WC-4), as Pulsar's admin API has it:

    POST /admin/v2/persistent/{t}/{ns}/{topic}/terminate              MessageId of the last message
    POST /admin/v2/persistent/{t}/{ns}/{topic}/terminate/partitions   {"<partition index>": MessageId}

The first is 405 on a partitioned topic (Pulsar: "Termination of a partitioned topic is not
allowed"), the second terminates each of its partitions. Non-persistent topics cannot be terminated
(405), as in Pulsar. The MessageId carries partitionIndex -1, as Pulsar's does. What terminating
does to producers and consumers is the broker's (velamq/broker/_terminate.py).
"""

from __future__ import annotations

from typing import Any

from velamq._topic_name import TopicName
from velamq.admin._http import HttpError, Response
from velamq.admin._params import partitions_of, require_topic, topic_of
from velamq.admin._router import Call, Router
from velamq.admin._routing import by_owner, on_partition
from velamq.admin._stats_json import last_message_id_json
from velamq.broker import LastMessageId

TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"


async def _persistent_topic(call: Call) -> TopicName:
    topic = topic_of(call)
    if topic.domain != "persistent":
        raise HttpError(405, "Termination of a non-persistent topic is not allowed")
    await require_topic(call, topic)
    return topic


def _message_id(reply: Any) -> dict[str, int]:
    """A partition owner's reply to POST <partition>/terminate."""
    if not isinstance(reply, dict):
        raise HttpError(502, "a worker answered a terminate with something that is not a message id")
    return {str(k): int(v) for k, v in reply.items()}


async def _terminate(call: Call, topic: str) -> dict[str, int]:
    ledger_id, entry_id = await call.backend.terminate_topic(topic)
    return last_message_id_json(LastMessageId(ledger_id, entry_id, -1))


async def terminate(call: Call) -> Response:
    topic = await _persistent_topic(call)
    if await partitions_of(call, topic) > 0:
        raise HttpError(405, "Termination of a partitioned topic is not allowed")
    return Response.json(await _terminate(call, str(topic)))


async def terminate_partitions(call: Call) -> Response:
    topic = await _persistent_topic(call)
    partitions = await partitions_of(call, topic)
    if partitions == 0:
        raise HttpError(404, f"{topic} is not a partitioned topic")
    ids = {
        str(i): await on_partition(call, topic.partition(i), lambda name: _terminate(call, name), _message_id,
                                   suffix=("terminate",), keep_query=False)
        for i in range(partitions)
    }
    return Response.json(ids)


def register(router: Router) -> None:
    router.add("POST", TOPIC + "/terminate", by_owner(terminate))
    router.add("POST", TOPIC + "/terminate/partitions", by_owner(terminate_partitions))
