"""Reading stored messages without a subscription: by id, by position from either end, by time
(pulsar-admin topics get-message-by-id | examine-messages | get-message-id).

Under /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}:

    GET /ledger/{ledgerId}/entry/{entryId}[?batchIndex=i]   the entry as peek answers it (_peek.py);
                                                            404 if there is none
    GET /examinemessage?initialPosition=earliest|latest&messagePosition=n
                                                            the n-th entry (n >= 1, default 1) from
                                                            the oldest or back from the newest
                                                            (default latest); 404 past the end
    GET /messageid/{timestamp_ms}                           {"ledgerId", "entryId", "partitionIndex"}
                                                            of the first message published at or
                                                            after the time (past the end: the next
                                                            position, as Pulsar answers)

A partitioned topic answers 405 (ask a partition), as Pulsar does for these calls.
"""

from __future__ import annotations

from velamq._topic_name import TopicName
from velamq.admin._http import HttpError, Response
from velamq.admin._params import partitions_of, require_topic, topic_of
from velamq.admin._peek import peek_response
from velamq.admin._policy_specs import as_int
from velamq.admin._router import Call, Router
from velamq.admin._routing import by_owner

TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
# Examining walks ledger metadata only, but the position still gets a sane bound.
examine_position_max = 10_000_000


def _uint(value: str | None, what: str, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    number = as_int(value, what)
    if number < 0:
        raise HttpError(400, f"{what} must not be negative")
    return number


async def _single_topic(call: Call, what: str) -> TopicName:
    topic = topic_of(call)
    await require_topic(call, topic)
    if await partitions_of(call, topic) > 0:
        raise HttpError(405, f"{what} on a partitioned topic is not allowed: ask one of its partitions")
    return topic


def _batch_index(call: Call) -> int | None:
    value = call.request.query_param("batchIndex")
    return None if value is None else _uint(value, "batchIndex")


async def get_message_by_id(call: Call) -> Response:
    message_id = (_uint(call.params["ledger"], "ledgerId"), _uint(call.params["entry"], "entryId"))
    topic = await _single_topic(call, "Get message by id")
    entry = await call.backend.read_entry(str(topic), message_id)
    return peek_response(message_id, entry, _batch_index(call))


async def examine_message(call: Call) -> Response:
    initial = (call.request.query_param("initialPosition") or "latest").lower()
    if initial not in ("earliest", "latest"):
        raise HttpError(400, "initialPosition must be earliest or latest")
    n = _uint(call.request.query_param("messagePosition"), "messagePosition", 1)
    if not 1 <= n <= examine_position_max:
        raise HttpError(412, f"messagePosition must be between 1 and {examine_position_max}")
    topic = await _single_topic(call, "Examine message")
    position, entry = await call.backend.examine_entry(str(topic), initial == "latest", n)
    return peek_response(position, entry, _batch_index(call))


async def get_message_id_by_time(call: Call) -> Response:
    timestamp_ms = _uint(call.params["timestamp"], "timestamp")
    topic = await _single_topic(call, "Get message id by timestamp")
    ledger_id, entry_id = await call.backend.message_id_at(str(topic), timestamp_ms)
    return Response.json({"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": topic.partition_index})


def register(router: Router) -> None:
    router.add("GET", TOPIC + "/ledger/{ledger}/entry/{entry}", by_owner(get_message_by_id))
    router.add("GET", TOPIC + "/examinemessage", by_owner(examine_message))
    router.add("GET", TOPIC + "/messageid/{timestamp}", by_owner(get_message_id_by_time))
