"""Subscriptions of a topic: list, create, delete, skip, expire, reset cursor, peek (WC-4).

Under /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}:

    GET    /subscriptions                                   ["sub", ...]
    PUT    /subscription/{sub}   [body MessageId]           204; 409 exists. No body: latest;
                                                            {ledgerId, entryId}: that position;
                                                            (-1, -1) earliest, (2^63-1, 2^63-1) latest
    DELETE /subscription/{sub}?force=true|false             204; 404; 412 with consumers, not forced
    POST   /subscription/{sub}/skip/{n}                     204; 405 on a partitioned topic
    POST   /subscription/{sub}/skip_all                     204
    POST   /subscription/{sub}/expireMessages/{seconds}     204
    POST   /all_subscription/expireMessages/{seconds}       204, every subscription of the topic
    POST   /subscription/{sub}/resetcursor/{timestamp_ms}   204
    POST   /subscription/{sub}/resetcursor   body MessageId 204; 405 on a partitioned topic
    GET    /subscription/{sub}/position/{n}[?batchIndex=i]  the n-th entry of the backlog (n >= 1),
                                                            see _peek.py; 404 past the end;
                                                            405 on a partitioned topic

On a partitioned topic, the calls without a 405 above act on every partition, as in Pulsar.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, Final

from velamq._topic_name import TopicName
from velamq.admin._http import HttpError, Response
from velamq.admin._params import bool_param, json_body, partitions_of, require_topic, topic_of
from velamq.admin._peek import peek_response
from velamq.admin._policy_specs import as_int
from velamq.admin._router import Call, Router
from velamq.admin._routes_topic_ops import on_topic_or_partitions
from velamq.admin._routing import by_owner, no_result

TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
SUBSCRIPTION = TOPIC + "/subscription/{subscription}"

# MessageId.latest and .earliest as the Java admin client serialises them.
_LATEST: Final = (2**63 - 1, 2**63 - 1)
_EARLIEST: Final = (-1, -1)
_UINT_RE: Final = re.compile(r"[0-9]{1,18}")
# Peeking is a walk from the mark-delete position: bound how far one call may go.
peek_position_max: Final = 100_000


def _path_int(call: Call, name: str) -> int:
    value = call.params[name]
    if not _UINT_RE.fullmatch(value):
        raise HttpError(400, f"{name} must be a non-negative integer, not {value[:40]!r}")
    return int(value)


def message_id_body(value: Any) -> tuple[int, int] | str | None:
    """A MessageIdImpl / ResetCursorData body -> "earliest", "latest", (ledger, entry), or None if
    there is no body. 400 if it does not parse; 501 for isExcluded=true, which velamq lacks."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise HttpError(400, "Request body must be a MessageId object {ledgerId, entryId}")
    if value.get("isExcluded") is True or value.get("excluded") is True:
        raise HttpError(501, "isExcluded is not supported by velamq: reset to the following message instead")
    ledger = as_int(value.get("ledgerId"), "ledgerId")
    entry = as_int(value.get("entryId"), "entryId")
    if (ledger, entry) == _LATEST:
        return "latest"
    if (ledger, entry) == _EARLIEST:
        return "earliest"
    if ledger < 0 or entry < 0:
        raise HttpError(400, "ledgerId and entryId must be >= 0 (or -1/-1 for earliest)")
    return ledger, entry


async def _topic(call: Call) -> TopicName:
    topic = topic_of(call)
    await require_topic(call, topic)
    return topic


async def _refuse_partitioned(call: Call, what: str) -> TopicName:
    topic = await _topic(call)
    if await partitions_of(call, topic) > 0:
        raise HttpError(405, f"{what} on a partitioned topic is not allowed")
    return topic


def _names(reply: Any) -> list[str]:
    """A partition owner's reply to GET .../subscriptions."""
    return [str(name) for name in reply] if isinstance(reply, list) else []


async def list_subscriptions(call: Call) -> Response:
    topic = await _topic(call)
    names: set[str] = set()
    for found in await on_topic_or_partitions(call, topic, call.backend.list_subscriptions, from_json=_names):
        names.update(found)
    return Response.json(sorted(names))


async def _on_subscription(call: Call, action: Callable[[str, str], Awaitable[object]]) -> Response:
    """Run action(topic name, subscription) on the topic, or on each partition of a partitioned one."""
    topic = await _topic(call)
    subscription = call.params["subscription"]

    async def run(name: str) -> None:
        await action(name, subscription)

    await on_topic_or_partitions(call, topic, run, from_json=no_result)
    return Response.no_content()


async def create_subscription(call: Call) -> Response:
    start = message_id_body(json_body(call))
    position = "latest" if start is None else start
    return await _on_subscription(call, lambda name, sub: call.backend.create_subscription(name, sub, position))


async def delete_subscription(call: Call) -> Response:
    force = bool_param(call, "force")
    return await _on_subscription(call, lambda name, sub: call.backend.delete_subscription(name, sub, force))


async def skip(call: Call) -> Response:
    count = _path_int(call, "count")
    topic = await _refuse_partitioned(call, "Skip messages")
    await call.backend.skip_messages(str(topic), call.params["subscription"], count)
    return Response.no_content()


async def skip_all(call: Call) -> Response:
    return await _on_subscription(call, lambda name, sub: call.backend.skip_messages(name, sub, None))


async def expire(call: Call) -> Response:
    seconds = _path_int(call, "seconds")
    return await _on_subscription(call, lambda name, sub: call.backend.expire_messages(name, sub, seconds))


async def expire_all_subscriptions(call: Call) -> Response:
    seconds = _path_int(call, "seconds")
    topic = await _topic(call)

    async def expire_every(name: str) -> None:
        for subscription in await call.backend.list_subscriptions(name):
            await call.backend.expire_messages(name, subscription, seconds)

    await on_topic_or_partitions(call, topic, expire_every, from_json=no_result)
    return Response.no_content()


async def reset_cursor_to_time(call: Call) -> Response:
    timestamp_ms = _path_int(call, "timestamp")
    topic = await _topic(call)
    subscription = call.params["subscription"]

    async def reset(name: str) -> None:
        await call.backend.reset_cursor(name, subscription, timestamp_ms, None)

    await on_topic_or_partitions(call, topic, reset, from_json=no_result)
    return Response.no_content()


async def reset_cursor_to_id(call: Call) -> Response:
    start = message_id_body(json_body(call))
    if start is None:
        raise HttpError(400, "Request body must be a MessageId object {ledgerId, entryId}")
    topic = await _refuse_partitioned(call, "Reset-cursor at position")
    subscription = call.params["subscription"]
    if start == "earliest":
        await call.backend.reset_cursor(str(topic), subscription, 0, None)  # before the first publish time
    elif start == "latest":
        await call.backend.skip_messages(str(topic), subscription, None)  # past the last message
    else:
        assert isinstance(start, tuple)
        await call.backend.reset_cursor(str(topic), subscription, None, start)
    return Response.no_content()


async def peek(call: Call) -> Response:
    position = _path_int(call, "position")
    batch_param = call.request.query_param("batchIndex")
    batch_index = None if batch_param is None else as_int(batch_param, "batchIndex")
    if position < 1 or position > peek_position_max:
        raise HttpError(412, f"Message position must be between 1 and {peek_position_max}")
    topic = await _refuse_partitioned(call, "Peek messages")
    entries = await call.backend.peek_messages(str(topic), call.params["subscription"], position)
    if len(entries) < position:
        raise HttpError(404, f"Could not find message at position {position}")
    found, entry = entries[position - 1]
    return peek_response(found, entry, batch_index)


def register(router: Router) -> None:
    router.add("GET", TOPIC + "/subscriptions", by_owner(list_subscriptions))
    router.add("PUT", SUBSCRIPTION, by_owner(create_subscription))
    router.add("DELETE", SUBSCRIPTION, by_owner(delete_subscription))
    router.add("POST", SUBSCRIPTION + "/skip/{count}", by_owner(skip))
    router.add("POST", SUBSCRIPTION + "/skip_all", by_owner(skip_all))
    router.add("POST", SUBSCRIPTION + "/expireMessages/{seconds}", by_owner(expire))
    router.add("POST", TOPIC + "/all_subscription/expireMessages/{seconds}", by_owner(expire_all_subscriptions))
    router.add("POST", SUBSCRIPTION + "/resetcursor/{timestamp}", by_owner(reset_cursor_to_time))
    router.add("POST", SUBSCRIPTION + "/resetcursor", by_owner(reset_cursor_to_id))
    router.add("GET", SUBSCRIPTION + "/position/{position}", by_owner(peek))
