"""Each policy as the REST API shows it: its paths, how a request value is checked, where it is stored.

One `PolicySpec` per policy serves the namespace routes (/admin/v2/namespaces/{t}/{ns}/<ns_path>),
the topic routes (/admin/v2/{domain}/{t}/{ns}/{topic}/<topic_path>) and the check of a policies
body given when a namespace is created. Stored names are those of velamq.metadata._policies.

Values that do not parse are 400 (as Jackson refuses them in Pulsar); values that parse but are out
of range are 412, with Pulsar's reasons.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from velamq._limits import MIB
from velamq.admin._http import HttpError
from velamq.metadata import BacklogQuota, Policies, partitions_max
from velamq.metadata import _policies as P
from velamq.metadata._auto_creation import NS_AUTO_TOPIC_CREATION, auto_topic_creation_error

_INT_RE: Final = re.compile(r"-?[0-9]{1,18}")


def as_int(value: Any, what: str) -> int:
    """A JSON integer, or a string of digits ("10"), as Jackson accepts for an int; else 400."""
    if isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise HttpError(400, f"{what} must be an integer")


def as_bool(value: Any, what: str) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if isinstance(value, bool):
        return value
    raise HttpError(400, f"{what} must be true or false")


def as_object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise HttpError(400, f"{what} must be a JSON object")
    return value


# ---------------------------------------------------------------------------- per-policy checks


def parse_retention(value: Any) -> dict[str, Any]:
    """Pulsar's RetentionPolicies, checked as Pulsar's validateRetentionPolicies does."""
    body = as_object(value, "RetentionPolicies")
    minutes = as_int(body.get("retentionTimeInMinutes", 0), "retentionTimeInMinutes")
    size_mb = as_int(body.get("retentionSizeInMB", 0), "retentionSizeInMB")
    if size_mb < -1:
        raise HttpError(412, "Invalid retention policy: size limit must be >= -1")
    if minutes < -1:
        raise HttpError(412, "Invalid retention policy: time limit must be >= -1")
    if (minutes == 0) != (size_mb == 0):
        raise HttpError(
            412,
            "Invalid retention policy: Setting a single time or size limit to 0 is invalid when one of the "
            "limits has a non-zero value. Use the value of -1 instead of 0 to ignore a specific limit. To "
            "disable retention both limits must be set to 0.",
        )
    return P.retention_json(minutes, size_mb)


def parse_backlog_quota(value: Any) -> dict[str, Any]:
    """Pulsar's BacklogQuota {limitSize (or the older limit), limitTime, policy}."""
    body = as_object(value, "BacklogQuota")
    size = body.get("limitSize", body.get("limit", -1))
    limit_bytes = as_int(-1 if size is None else size, "limitSize")
    limit_time = body.get("limitTime", -1)
    limit_time_s = as_int(-1 if limit_time is None else limit_time, "limitTime")
    policy = body.get("policy", P.BACKLOG_POLICIES[0])
    if policy not in P.BACKLOG_POLICIES:
        raise HttpError(400, f"policy must be one of {', '.join(P.BACKLOG_POLICIES)}")
    if limit_bytes < -1 or limit_time_s < -1:
        raise HttpError(412, "Backlog quota limits must be -1 (no limit) or more")
    return P.backlog_quota_json(limit_bytes, limit_time_s, policy)


def _non_negative(what: str, reason: str) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        number = as_int(value, what)
        if number < 0:
            raise HttpError(412, reason)
        return number

    return parse


def parse_delayed_delivery(value: Any) -> dict[str, Any]:
    """Pulsar's DelayedDeliveryPolicies {active, tickTime, maxDeliveryDelayInMillis}."""
    body = as_object(value, "DelayedDeliveryPolicies")
    active = as_bool(body.get("active", False), "active")
    tick_ms = as_int(body.get("tickTime", P.delayed_delivery_tick_ms_default), "tickTime")
    max_delay_ms = as_int(body.get("maxDeliveryDelayInMillis", 0), "maxDeliveryDelayInMillis")
    if tick_ms < 0 or max_delay_ms < 0:
        raise HttpError(412, "tickTime and maxDeliveryDelayInMillis must be 0 or more")
    return P.delayed_delivery_json(active, tick_ms, max_delay_ms)


def check_retention_against_quota(retention: Mapping[str, Any], quota: BacklogQuota | None) -> None:
    """Pulsar refuses a retention smaller than the backlog quota it would have to keep."""
    if quota is None:
        return
    minutes, size_mb = retention["retentionTimeInMinutes"], retention["retentionSizeInMB"]
    if (size_mb > 0 and quota.limit_bytes >= size_mb * MIB) or (minutes > 0 and quota.limit_time_s >= minutes * 60):
        raise HttpError(412, "Retention Quota must exceed configured backlog quota for namespace.")


def check_quota_against_retention(quota: Mapping[str, Any], effective: Policies) -> None:
    minutes, size_mb = effective.retention_time_minutes, effective.retention_size_mb
    if (size_mb > 0 and quota["limitSize"] >= size_mb * MIB) or (minutes > 0 and quota["limitTime"] >= minutes * 60):
        raise HttpError(
            412,
            "Backlog Quota exceeds configured retention quota for namespace. Please increase retention quota and retry",
        )


def parse_auto_topic_creation(value: Any) -> dict[str, Any]:
    """Pulsar's AutoTopicCreationOverride, checked as NamespacesBase.internalSetAutoTopicCreation
    does (412 with its reasons); stored as given, defaultNumPartitions only where it applies."""
    error = auto_topic_creation_error(value, partitions_max)
    if error is not None:
        raise HttpError(412, f"Invalid configuration for autoTopicCreationOverride. the detail is {error}")
    body = {"allowAutoTopicCreation": value["allowAutoTopicCreation"]}
    for key in ("topicType", "defaultNumPartitions"):
        if value.get(key) is not None:
            body[key] = value[key]
    return body


# ---------------------------------------------------------------------------- the table


def _one_key(key: str) -> Callable[[Any], dict[str, Any]]:
    return lambda value: {key: value}


def _read_key(key: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda stored: stored.get(key)


_TOPIC_DELAYED_MAX_MS: Final = "delayedDeliveryMaxDelayInMillis"  # TopicPolicies' name; velamq keeps it only


def _delayed_from_topic(stored: Mapping[str, Any]) -> Any:
    active = stored.get(P.TOPIC_DELAYED_DELIVERY_ENABLED)
    if active is None:
        return None
    tick = stored.get(P.TOPIC_DELAYED_DELIVERY_TICK_MS, P.delayed_delivery_tick_ms_default)
    return P.delayed_delivery_json(active, tick, stored.get(_TOPIC_DELAYED_MAX_MS, 0))


def _delayed_to_topic(value: Mapping[str, Any]) -> dict[str, Any]:
    return {
        P.TOPIC_DELAYED_DELIVERY_ENABLED: value["active"],
        P.TOPIC_DELAYED_DELIVERY_TICK_MS: value["tickTime"],
        _TOPIC_DELAYED_MAX_MS: value["maxDeliveryDelayInMillis"],
    }


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """One policy: REST path segments, stored keys, and its value's check and conversions.

    The REST value is what GET returns and POST takes (a RetentionPolicies object, an int, ...).
    At namespace level it is stored as it is under `ns_key`; at topic level `to_topic` gives the
    TopicPolicies keys to set and `from_topic` reads them back (None: not set).
    """

    name: str  # for messages and docs
    ns_path: str | None
    topic_path: str | None
    ns_key: str | None
    topic_keys: tuple[str, ...]  # every TopicPolicies key it sets (DELETE unsets them all)
    parse: Callable[[Any], Any]
    to_topic: Callable[[Any], dict[str, Any]]
    from_topic: Callable[[Mapping[str, Any]], Any]
    applied: Callable[[Policies], Any]  # the effective value, for GET ...?applied=true


def _int_spec(name: str, ns_path: str | None, topic_path: str, ns_key: str | None, topic_key: str,
              reason: str, applied: Callable[[Policies], Any]) -> PolicySpec:
    return PolicySpec(name, ns_path, topic_path, ns_key, (topic_key,), _non_negative(name, reason),
                      _one_key(topic_key), _read_key(topic_key), applied)


SPECS: Final[tuple[PolicySpec, ...]] = (
    PolicySpec(
        "retention", "retention", "retention", P.NS_RETENTION, (P.TOPIC_RETENTION,), parse_retention,
        _one_key(P.TOPIC_RETENTION), _read_key(P.TOPIC_RETENTION),
        lambda p: P.retention_json(p.retention_time_minutes, p.retention_size_mb),
    ),
    _int_spec("messageTTL", "messageTTL", "messageTTL", P.NS_MESSAGE_TTL, P.TOPIC_MESSAGE_TTL,
              "Invalid value for message TTL, message TTL must >= 0", lambda p: p.message_ttl_s),
    PolicySpec(
        "deduplication", "deduplication", "deduplicationEnabled", P.NS_DEDUPLICATION, (P.TOPIC_DEDUPLICATION,),
        lambda v: as_bool(v, "deduplication"), _one_key(P.TOPIC_DEDUPLICATION), _read_key(P.TOPIC_DEDUPLICATION),
        lambda p: p.deduplication,
    ),
    PolicySpec(
        "delayedDelivery", "delayedDelivery", "delayedDelivery", P.NS_DELAYED_DELIVERY,
        (P.TOPIC_DELAYED_DELIVERY_ENABLED, P.TOPIC_DELAYED_DELIVERY_TICK_MS, _TOPIC_DELAYED_MAX_MS),
        parse_delayed_delivery, _delayed_to_topic, _delayed_from_topic,
        lambda p: P.delayed_delivery_json(p.delayed_delivery, P.delayed_delivery_tick_ms_default),
    ),
    _int_spec("maxMessageSize", None, "maxMessageSize", None, P.TOPIC_MAX_MESSAGE_SIZE,
              "topic-level maxMessageSize must be 0 (the broker's) or more", lambda p: p.max_message_bytes),
    _int_spec("maxProducers", "maxProducersPerTopic", "maxProducers", P.NS_MAX_PRODUCERS, P.TOPIC_MAX_PRODUCERS,
              "maxProducersPerTopic must be 0 or more", lambda p: p.max_producers),
    _int_spec("maxConsumers", "maxConsumersPerTopic", "maxConsumers", P.NS_MAX_CONSUMERS, P.TOPIC_MAX_CONSUMERS,
              "maxConsumersPerTopic must be 0 or more", lambda p: p.max_consumers),
    _int_spec("maxConsumersPerSubscription", "maxConsumersPerSubscription", "maxConsumersPerSubscription",
              P.NS_MAX_CONSUMERS_PER_SUBSCRIPTION, P.TOPIC_MAX_CONSUMERS_PER_SUBSCRIPTION,
              "maxConsumersPerSubscription must be 0 or more", lambda p: p.max_consumers_per_subscription),
    PolicySpec(
        "autoTopicCreation", "autoTopicCreation", None, NS_AUTO_TOPIC_CREATION, (), parse_auto_topic_creation,
        _one_key(NS_AUTO_TOPIC_CREATION), _read_key(NS_AUTO_TOPIC_CREATION), lambda p: None,
    ),
    _int_spec("ackHoleRedelivery", "ackHoleRedelivery", "ackHoleRedelivery", P.NS_ACK_HOLE_REDELIVERY,
              P.TOPIC_ACK_HOLE_REDELIVERY, "ackHoleRedelivery must be 0 (off) or more milliseconds",
              lambda p: p.ack_hole_redelivery_ms),
)


def check_namespace_body(policies: Mapping[str, Any]) -> dict[str, Any]:
    """A Policies body given to PUT namespace: every policy velamq knows is checked like its own
    endpoint would check it (and normalised); other Pulsar fields are kept as they are."""
    checked = dict(policies)
    for spec in SPECS:
        if spec.ns_key is not None and checked.get(spec.ns_key) is not None:
            checked[spec.ns_key] = spec.parse(checked[spec.ns_key])
    quota_map = checked.get(P.NS_BACKLOG_QUOTA_MAP)
    if quota_map is not None:
        body = as_object(quota_map, P.NS_BACKLOG_QUOTA_MAP)
        unknown = set(body) - set(P.BACKLOG_QUOTA_TYPES)
        if unknown:
            raise HttpError(400, f"Unknown backlog quota type {sorted(unknown)[0]!r}")
        checked[P.NS_BACKLOG_QUOTA_MAP] = {k: parse_backlog_quota(v) for k, v in body.items()}
    return checked
