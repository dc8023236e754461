"""Namespace and topic policies: GET / POST / DELETE per policy, as Pulsar's admin API has them (WC-4).

Namespace level, under /admin/v2/namespaces/{tenant}/{namespace}/:

    retention                    RetentionPolicies {retentionTimeInMinutes, retentionSizeInMB}
    messageTTL                   int seconds
    deduplication                true|false
    delayedDelivery              DelayedDeliveryPolicies {active, tickTime, maxDeliveryDelayInMillis}
    maxProducersPerTopic         int, 0 = unlimited
    maxConsumersPerTopic         int
    maxConsumersPerSubscription  int
    ackHoleRedelivery            int milliseconds, 0 = off (velamq's own, BR-4)
    autoTopicCreation            AutoTopicCreationOverride {allowAutoTopicCreation, topicType,
                                 defaultNumPartitions} (stored as autoTopicCreationOverride)
    backlogQuotaMap              GET: {"destination_storage": BacklogQuota, "message_age": ...}
    backlogQuota                 POST (body BacklogQuota) / DELETE, ?backlogQuotaType=destination_storage
                                 (default) | message_age

Topic level, under /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/: retention,
messageTTL (POST takes ?messageTTL=N, as Pulsar's client sends it, or a body), deduplicationEnabled,
delayedDelivery, maxMessageSize, maxProducers, maxConsumers, maxConsumersPerSubscription,
ackHoleRedelivery, backlogQuotaMap, backlogQuota. GET takes ?applied=true for the effective value
(topic, else namespace, else broker default).

GET answers 204 (no body) when the policy is not set, as Pulsar does for a null value; POST and
DELETE answer 204. Unknown namespace or topic: 404. A topic's policies live on its partitioned topic
(see velamq.metadata._policies). After every write the broker is told (policies_changed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from velamq._topic_name import TopicName
from velamq.admin._http import HttpError, Response
from velamq.admin._params import (
    bool_param,
    json_body,
    namespace_of,
    notify_policies_changed,
    require_topic,
    topic_of,
)
from velamq.admin._policy_specs import (
    SPECS,
    PolicySpec,
    as_int,
    check_quota_against_retention,
    check_retention_against_quota,
    parse_backlog_quota,
)
from velamq.admin._router import Call, Router
from velamq.metadata import Policies, resolve_policies
from velamq.metadata import _policies as P

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"

Handler = Callable[[Call], Awaitable[Response]]


def _value_or_204(value: Any) -> Response:
    return Response.no_content() if value is None else Response.json(value)


def _request_value(call: Call) -> Any:
    value = json_body(call)
    if value is None:
        raise HttpError(400, "Request body is required")
    return value


def broker_defaults(call: Call) -> Policies:
    """The broker's default policies (under namespace and topic policies)."""
    return call.backend.default_policies


def _broker_max_message_bytes(call: Call) -> int:
    limit = broker_defaults(call).max_message_bytes
    return limit if limit is not None else call.backend.max_message_bytes


async def _effective(call: Call, topic: TopicName | None, ns: str) -> Policies:
    namespace = await call.backend.metadata.get_policies(ns)
    stored = await call.backend.metadata.get_topic_policies(str(topic)) if topic is not None else None
    return resolve_policies(namespace, stored, broker_defaults(call))


async def _applied(call: Call, spec: PolicySpec, ns: str) -> Any:
    """The value in force for a topic that sets none itself: the namespace's, else the broker's."""
    if spec.ns_key is not None:
        value = (await call.backend.metadata.get_policies(ns)).get(spec.ns_key)
        if value is not None:
            return value
    defaults = broker_defaults(call)
    if defaults.max_message_bytes is None:
        defaults = replace(defaults, max_message_bytes=_broker_max_message_bytes(call))
    return spec.applied(defaults)


async def _check(call: Call, spec: PolicySpec, value: Any, topic: TopicName | None, ns: str) -> None:
    """Checks that involve other policies or the broker's configuration."""
    if spec.name == "retention":
        check_retention_against_quota(value, (await _effective(call, topic, ns)).backlog_quota)
    elif spec.name == "maxMessageSize":
        limit = _broker_max_message_bytes(call)
        if value > limit:
            raise HttpError(412, f"topic-level maxMessageSize must be between 0 and the broker's ({limit})")


# ---------------------------------------------------------------------------- namespace level


def _namespace_handlers(spec: PolicySpec) -> tuple[Handler, Handler, Handler]:
    key = spec.ns_key
    assert key is not None

    async def get(call: Call) -> Response:
        return _value_or_204((await call.backend.metadata.get_policies(namespace_of(call))).get(key))

    async def set_(call: Call) -> Response:
        ns = namespace_of(call)
        value = spec.parse(_request_value(call))
        await call.backend.metadata.get_policies(ns)  # 404 before any other check
        await _check(call, spec, value, None, ns)
        await call.backend.metadata.set_policy(ns, key, value)
        await notify_policies_changed(call, ns, None)
        return Response.no_content()

    async def remove(call: Call) -> Response:
        ns = namespace_of(call)
        await call.backend.metadata.set_policy(ns, key, None)
        await notify_policies_changed(call, ns, None)
        return Response.no_content()

    return get, set_, remove


# ---------------------------------------------------------------------------- topic level


def _topic_request_value(call: Call, spec: PolicySpec) -> Any:
    if spec.name == "messageTTL":
        query = call.request.query_param("messageTTL")
        if query is not None:
            return as_int(query, "messageTTL")
    return _request_value(call)


def _topic_handlers(spec: PolicySpec) -> tuple[Handler, Handler, Handler]:
    async def get(call: Call) -> Response:
        topic = topic_of(call)
        await require_topic(call, topic)
        value = spec.from_topic(await call.backend.metadata.get_topic_policies(str(topic)))
        if value is None and bool_param(call, "applied"):
            value = await _applied(call, spec, topic.namespace)
        return _value_or_204(value)

    async def set_(call: Call) -> Response:
        topic = topic_of(call)
        value = spec.parse(_topic_request_value(call, spec))
        await require_topic(call, topic)
        await _check(call, spec, value, topic, topic.namespace)
        for key, stored in spec.to_topic(value).items():
            await call.backend.metadata.set_topic_policy(str(topic), key, stored)
        await notify_policies_changed(call, topic.namespace, str(topic.partitioned_parent))
        return Response.no_content()

    async def remove(call: Call) -> Response:
        topic = topic_of(call)
        await require_topic(call, topic)
        for key in spec.topic_keys:
            await call.backend.metadata.set_topic_policy(str(topic), key, None)
        await notify_policies_changed(call, topic.namespace, str(topic.partitioned_parent))
        return Response.no_content()

    return get, set_, remove


# ---------------------------------------------------------------------------- backlog quota


def _quota_type(call: Call) -> str:
    quota_type = call.request.query_param("backlogQuotaType") or P.DESTINATION_STORAGE
    if quota_type not in P.BACKLOG_QUOTA_TYPES:
        raise HttpError(400, f"backlogQuotaType must be one of {', '.join(P.BACKLOG_QUOTA_TYPES)}")
    return quota_type


def _quota_map(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _without(quota_map: Any, quota_type: str) -> dict[str, Any] | None:
    """The map less one quota type; None (the policy removed) when nothing is left."""
    rest = {k: v for k, v in _quota_map(quota_map).items() if k != quota_type}
    return rest or None


def _applied_quota_map(policies: Policies) -> dict[str, Any]:
    quota = policies.backlog_quota
    if quota is None or quota.unlimited:
        return {}
    return {P.DESTINATION_STORAGE: P.backlog_quota_json(quota.limit_bytes, quota.limit_time_s, quota.policy)}


async def get_namespace_quota_map(call: Call) -> Response:
    policies = await call.backend.metadata.get_policies(namespace_of(call))
    return Response.json(_quota_map(policies.get(P.NS_BACKLOG_QUOTA_MAP)))


async def set_namespace_quota(call: Call) -> Response:
    ns = namespace_of(call)
    quota_type = _quota_type(call)
    quota = parse_backlog_quota(_request_value(call))
    await call.backend.metadata.get_policies(ns)  # 404 before any other check
    check_quota_against_retention(quota, await _effective(call, None, ns))
    # One step in the store: quotas of other types set at once (by any worker) are kept.
    await call.backend.metadata.update_policy(
        ns, P.NS_BACKLOG_QUOTA_MAP, lambda current: {**_quota_map(current), quota_type: quota}
    )
    await notify_policies_changed(call, ns, None)
    return Response.no_content()


async def remove_namespace_quota(call: Call) -> Response:
    ns = namespace_of(call)
    quota_type = _quota_type(call)
    await call.backend.metadata.update_policy(ns, P.NS_BACKLOG_QUOTA_MAP, lambda current: _without(current, quota_type))
    await notify_policies_changed(call, ns, None)
    return Response.no_content()


async def get_topic_quota_map(call: Call) -> Response:
    topic = topic_of(call)
    await require_topic(call, topic)
    if bool_param(call, "applied"):
        return Response.json(_applied_quota_map(await _effective(call, topic, topic.namespace)))
    stored = await call.backend.metadata.get_topic_policies(str(topic))
    return Response.json(_quota_map(stored.get(P.TOPIC_BACKLOG_QUOTA_MAP)))


async def set_topic_quota(call: Call) -> Response:
    topic = topic_of(call)
    quota_type = _quota_type(call)
    quota = parse_backlog_quota(_request_value(call))
    await require_topic(call, topic)
    check_quota_against_retention(quota, await _effective(call, topic, topic.namespace))
    await call.backend.metadata.update_topic_policy(
        str(topic), P.TOPIC_BACKLOG_QUOTA_MAP, lambda current: {**_quota_map(current), quota_type: quota}
    )
    await notify_policies_changed(call, topic.namespace, str(topic.partitioned_parent))
    return Response.no_content()


async def remove_topic_quota(call: Call) -> Response:
    topic = topic_of(call)
    quota_type = _quota_type(call)
    await require_topic(call, topic)
    await call.backend.metadata.update_topic_policy(
        str(topic), P.TOPIC_BACKLOG_QUOTA_MAP, lambda current: _without(current, quota_type)
    )
    await notify_policies_changed(call, topic.namespace, str(topic.partitioned_parent))
    return Response.no_content()


def register(router: Router) -> None:
    for spec in SPECS:
        if spec.ns_path is not None:
            get, set_, remove = _namespace_handlers(spec)
            router.add("GET", f"{NAMESPACE}/{spec.ns_path}", get)
            router.add("POST", f"{NAMESPACE}/{spec.ns_path}", set_)
            router.add("DELETE", f"{NAMESPACE}/{spec.ns_path}", remove)
        if spec.topic_path is not None:
            get, set_, remove = _topic_handlers(spec)
            router.add("GET", f"{TOPIC}/{spec.topic_path}", get)
            router.add("POST", f"{TOPIC}/{spec.topic_path}", set_)
            router.add("DELETE", f"{TOPIC}/{spec.topic_path}", remove)
    router.add("GET", f"{NAMESPACE}/backlogQuotaMap", get_namespace_quota_map)
    router.add("POST", f"{NAMESPACE}/backlogQuota", set_namespace_quota)
    router.add("DELETE", f"{NAMESPACE}/backlogQuota", remove_namespace_quota)
    router.add("GET", f"{TOPIC}/backlogQuotaMap", get_topic_quota_map)
    router.add("POST", f"{TOPIC}/backlogQuota", set_topic_quota)
    router.add("DELETE", f"{TOPIC}/backlogQuota", remove_topic_quota)
