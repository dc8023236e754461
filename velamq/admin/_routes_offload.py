"""Tiered storage's admin routes (docs/offload.md), as Pulsar has them.

Under /admin/v2/persistent/{tenant}/{namespace}/{topic}:

    PUT /offload    body a message id {"ledgerId", "entryId", ...}: offload, in the background,
                    every sealed ledger before it; 204; 409 while an offload of the topic runs;
                    412 when no offload driver is configured; 405 on a partitioned topic
    GET /offload    OffloadProcessStatus {"status": NOT_RUN | RUNNING | SUCCESS | ERROR,
                    "lastError", "firstUnoffloadedMessage": {"ledgerId", "entryId", "partitionIndex"}}
"""

from __future__ import annotations

from typing import Any

from velamq._topic_name import TopicName
from velamq.admin._http import HttpError, Response
from velamq.admin._params import json_body, partitions_of, require_topic, topic_of
from velamq.admin._router import Call, Router
from velamq.admin._routing import by_owner
from velamq.storage import OffloadStatus, Position

TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"


async def _offloadable_topic(call: Call, what: str) -> TopicName:
    topic = topic_of(call)
    if not topic.persistent:
        raise HttpError(405, f"{what} is for persistent topics only")
    await require_topic(call, topic)
    if await partitions_of(call, topic) > 0:
        raise HttpError(405, f"{what} on a partitioned topic is not allowed: offload each partition")
    return topic


def _message_id(body: Any) -> Position:
    if not isinstance(body, dict):
        raise HttpError(400, 'Request body must be a message id: {"ledgerId": ..., "entryId": ...}')
    try:
        ledger_id, entry_id = int(body["ledgerId"]), int(body["entryId"])
    except (KeyError, TypeError, ValueError):
        raise HttpError(400, "A message id needs integer ledgerId and entryId") from None
    return Position(ledger_id, entry_id)


async def trigger_offload(call: Call) -> Response:
    topic = await _offloadable_topic(call, "Offload")
    up_to = _message_id(json_body(call))
    if not await call.backend.trigger_offload(str(topic), up_to):
        raise HttpError(409, "Offload already running")
    return Response.no_content()


def offload_status_json(status: OffloadStatus, partition: int) -> dict[str, Any]:
    ledger_id, entry_id = status.first_unoffloaded
    return {
        "status": status.status,
        "lastError": status.last_error,
        "firstUnoffloadedMessage": {"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": partition},
    }


async def offload_status(call: Call) -> Response:
    topic = await _offloadable_topic(call, "Offload status")
    return Response.json(offload_status_json(call.backend.offload_status(str(topic)), topic.partition_index))


def register(router: Router) -> None:
    router.add("PUT", TOPIC + "/offload", by_owner(trigger_offload))
    router.add("GET", TOPIC + "/offload", by_owner(offload_status))
