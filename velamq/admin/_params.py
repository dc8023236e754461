"""Turning path parameters, query parameters and bodies into checked values, for every route module.

Each helper raises HttpError with Pulsar's status for bad input: 400 for a body or parameter that
does not parse, 412 (via InvalidTopicNameError) for names, 404 for a namespace that does not exist.
"""

from __future__ import annotations

import re
from typing import Any, Final

from velamq._errors import InvalidTopicNameError
from velamq._topic_name import TopicName
from velamq.admin._http import HttpError
from velamq.admin._router import Call

_INT_RE: Final = re.compile(r"-?[0-9]{1,18}")


def _part(call: Call, key: str) -> str:
    # A percent-encoded "/" decodes inside one segment; joined into a name it would shift the
    # parts (".../x%2Fy" would read as a V1 name in namespace "default/x"), so refuse it here.
    value = call.params[key]
    if "/" in value:
        raise InvalidTopicNameError(value, f"'/' in the {key} part")
    return value


def namespace_of(call: Call) -> str:
    """"tenant/namespace" from the path; the store checks the name when it is used."""
    return f"{_part(call, 'tenant')}/{_part(call, 'namespace')}"


def topic_of(call: Call) -> TopicName:
    """The full topic name from {domain}/{tenant}/{namespace}/{topic}; InvalidTopicNameError -> 412."""
    return TopicName.parse(f"{call.params['domain']}://{namespace_of(call)}/{_part(call, 'topic')}")


async def require_namespace(call: Call, ns: str) -> None:
    if not await call.backend.metadata.namespace_exists(ns):
        raise HttpError(404, "Namespace does not exist")


async def partitions_of(call: Call, topic: TopicName) -> int:
    """Partitions of a partitioned topic, 0 for anything else (a partition, a plain topic, nothing)."""
    if topic.partition_index >= 0:
        return 0
    return await call.backend.metadata.get_partitions(str(topic))


async def require_topic(call: Call, topic: TopicName) -> None:
    """404 unless the namespace exists and the topic does: as a topic, a partitioned topic, or a
    partition within its partitioned topic's count (partitions are created when first used)."""
    await require_namespace(call, topic.namespace)
    metadata = call.backend.metadata
    if await metadata.topic_exists(str(topic)) or await partitions_of(call, topic) > 0:
        return
    parent = topic.partitioned_parent
    if topic.partition_index >= 0 and await metadata.get_partitions(str(parent)) > topic.partition_index:
        return
    raise HttpError(404, f"Topic {topic} not found")


async def notify_policies_changed(call: Call, namespace: str, topic: str | None) -> None:
    """Tell the broker to re-read the policies of its live topics."""
    await call.backend.policies_changed(namespace, topic)


def bool_param(call: Call, name: str, default: bool = False) -> bool:
    value = call.request.query_param(name)
    if value is None or value == "":
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise HttpError(400, f"Query parameter {name} must be true or false")


def json_body(call: Call, default: Any = None) -> Any:
    """The body as JSON, or `default` if there is none."""
    if not call.request.body.strip():
        return default
    return call.request.json()


def int_body(call: Call) -> int:
    """An integer body: a JSON number (10) or a JSON string of digits ("10"), as Jackson accepts."""
    value = json_body(call)
    if isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise HttpError(400, "Request body must be an integer")


def bool_body(call: Call) -> bool:
    """A boolean body: true/false, or the strings "true"/"false"."""
    value = json_body(call)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, bool):
        return value
    raise HttpError(400, "Request body must be true or false")


def string_body(call: Call) -> str:
    """A string body: a JSON string ("FORWARD") or, leniently, the bare text (FORWARD)."""
    text = call.request.body.strip()
    if text.startswith(b'"'):
        value = call.request.json()
        if isinstance(value, str):
            return value
        raise HttpError(400, "Request body must be a string")
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(400, "Request body must be UTF-8 text") from None


def object_body(call: Call) -> dict[str, Any] | None:
    """A JSON object body, or None if the body is empty."""
    value = json_body(call)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise HttpError(400, "Request body must be a JSON object")
    return value
