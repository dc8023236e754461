"""Prometheus text exposition (format 0.0.4) of a BrokerMetrics snapshot (OP-3).

Pulsar's metric names are used where Pulsar has one, so that Pulsar dashboards work unchanged;
figures Pulsar has no name for are `velamq_*`. Every sample carries cluster="standalone"; topic
samples add namespace and topic, subscription samples add subscription, as Pulsar labels them.

    pulsar_active_connections{cluster}                       gauge
    pulsar_connection_created_total_count{cluster}           counter
    velamq_policy_checks_total{cluster}                      counter (rounds of the policy checker)
    pulsar_topics_count{cluster,namespace}                   gauge   (topics loaded in the broker)
    velamq_topics_loaded{cluster}, velamq_topics_unloaded_total{cluster}   idle unloading (issue 10)
    per namespace {cluster,namespace} (exposeTopicLevelMetricsInPrometheus=false, or over its cap):
    pulsar_subscriptions_count / producers / consumers_count, pulsar_in/out_messages_total,
    pulsar_in/out_bytes_total, pulsar_storage_size, pulsar_msg_backlog, velamq_topic_entries,
    pulsar_rate_in/out, pulsar_throughput_in/out, pulsar_storage_backlog_size
                                                              the loaded topics of the namespace, summed
    per topic {cluster,namespace,topic} (exposeTopicLevelMetricsInPrometheus=true, the default), instead:
    pulsar_subscriptions_count / producers / consumers_count gauge
    pulsar_in_messages_total, pulsar_in_bytes_total           counter
    pulsar_storage_size                                       gauge   bytes
    pulsar_msg_backlog                                        gauge   entries, sum over subscriptions
    velamq_topic_entries                                      gauge
    pulsar_rate_in/out, pulsar_throughput_in/out, pulsar_storage_backlog_size,
    pulsar_storage_backlog_quota_limit[_time]                 gauge   when the snapshot carries them
    per subscription {cluster,namespace,topic,subscription}:
    pulsar_subscription_back_log                              gauge   entries
    pulsar_subscription_unacked_messages                      gauge
    pulsar_subscription_consumers_count                       gauge
    pulsar_out_messages_total, pulsar_out_bytes_total         counter (per subscription, as in Pulsar)
    pulsar_subscription_delayed, _msg_rate_out, _msg_throughput_out, _msg_rate_redeliver,
    _msg_rate_expired, _total_msg_expired                     gauge   when the snapshot carries them
    <every key of BrokerMetrics.storage>{cluster}             counter if it ends in _total, else gauge
    <every key of BrokerMetrics.limits>{cluster}              the same (docs/operations.md)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from velamq._errors import InvalidTopicNameError
from velamq._topic_name import TopicName
from velamq.broker import BrokerMetrics, NamespaceMetrics, SubscriptionMetrics, TopicMetrics

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

_NAME_RE: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_NAME_BAD_CHAR_RE: Final = re.compile(r"[^a-zA-Z0-9_:]")

Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class _Family:
    name: str
    type: str  # counter | gauge
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)


def escape_label_value(value: str) -> str:
    """Backslash, double quote and line feed are the three characters the format escapes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def sanitize_metric_name(name: str) -> str:
    if _NAME_RE.match(name):
        return name
    cleaned = _NAME_BAD_CHAR_RE.sub("_", name) or "_"
    return "_" + cleaned if cleaned[0].isdigit() else cleaned


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _namespace(topic: str) -> str:
    try:
        return TopicName.parse(topic).namespace
    except InvalidTopicNameError:
        return ""


# (name, type, help, figure): one sample per topic, labels cluster, namespace, topic.
_TOPIC_FAMILIES: Final[tuple[tuple[str, str, str, Callable[[TopicMetrics], float]], ...]] = (
    ("pulsar_subscriptions_count", "gauge", "Subscriptions of the topic", lambda t: len(t.subscriptions)),
    ("pulsar_producers_count", "gauge", "Producers connected to the topic", lambda t: t.producers),
    ("pulsar_consumers_count", "gauge", "Consumers connected to the topic", lambda t: t.consumers),
    ("pulsar_in_messages_total", "counter", "Messages published to the topic", lambda t: t.msg_in_total),
    ("pulsar_in_bytes_total", "counter", "Bytes published to the topic", lambda t: t.bytes_in_total),
    ("pulsar_storage_size", "gauge", "Bytes the topic's ledgers occupy", lambda t: t.storage_size_bytes),
    # Pulsar's topic backlog is the sum over its subscriptions (NamespaceStatsAggregator).
    ("pulsar_msg_backlog", "gauge", "Entries not yet acknowledged, summed over the topic's subscriptions",
     lambda t: sum(s.backlog_entries for s in t.subscriptions)),
    ("velamq_topic_entries", "gauge", "Entries stored for the topic", lambda t: t.entries_total),
)

# Pulsar figures the broker's snapshot may carry (attribute name on TopicMetrics / SubscriptionMetrics):
# rendered when present, so they appear as soon as the broker reports them.
_OPTIONAL_TOPIC_FAMILIES: Final = (
    ("pulsar_rate_in", "gauge", "Messages per second published to the topic", "msg_rate_in"),
    ("pulsar_rate_out", "gauge", "Messages per second dispatched from the topic", "msg_rate_out"),
    ("pulsar_throughput_in", "gauge", "Bytes per second published to the topic", "msg_throughput_in"),
    ("pulsar_throughput_out", "gauge", "Bytes per second dispatched from the topic", "msg_throughput_out"),
    ("pulsar_storage_backlog_size", "gauge", "Bytes of the topic's backlog", "backlog_size_bytes"),
    ("pulsar_storage_backlog_quota_limit", "gauge", "Backlog quota size limit in bytes", "backlog_quota_limit_bytes"),
    ("pulsar_storage_backlog_quota_limit_time", "gauge", "Backlog quota time limit in seconds",
     "backlog_quota_limit_time_s"),
)

# One sample per subscription, labels cluster, namespace, topic, subscription. Like Pulsar, the out
# counters are per subscription (sum them by topic for the topic's).
_SUBSCRIPTION_FAMILIES: Final[tuple[tuple[str, str, str, Callable[[SubscriptionMetrics], float]], ...]] = (
    ("pulsar_subscription_back_log", "gauge", "Entries not yet acknowledged by the subscription",
     lambda s: s.backlog_entries),
    ("pulsar_subscription_unacked_messages", "gauge", "Messages delivered but not acknowledged",
     lambda s: s.unacked_messages),
    ("pulsar_subscription_consumers_count", "gauge", "Consumers attached to the subscription",
     lambda s: s.consumers),
    ("pulsar_out_messages_total", "counter", "Messages dispatched to the subscription", lambda s: s.msg_out_total),
    ("pulsar_out_bytes_total", "counter", "Bytes dispatched to the subscription", lambda s: s.bytes_out_total),
)

_OPTIONAL_SUBSCRIPTION_FAMILIES: Final = (
    ("pulsar_subscription_delayed", "gauge", "Delayed messages not yet due", "delayed_messages"),
    ("pulsar_subscription_msg_rate_out", "gauge", "Messages per second dispatched", "msg_rate_out"),
    ("pulsar_subscription_msg_throughput_out", "gauge", "Bytes per second dispatched", "msg_throughput_out"),
    ("pulsar_subscription_msg_rate_redeliver", "gauge", "Messages per second redelivered", "msg_rate_redeliver"),
    ("pulsar_subscription_msg_rate_expired", "gauge", "Messages per second expired by TTL", "msg_rate_expired"),
    ("pulsar_subscription_total_msg_expired", "gauge", "Messages expired by TTL", "total_msg_expired"),
)


# One sample per namespace, labels cluster, namespace: its loaded topics summed.
_NAMESPACE_FAMILIES: Final[tuple[tuple[str, str, str, Callable[[NamespaceMetrics], float]], ...]] = (
    ("pulsar_subscriptions_count", "gauge", "Subscriptions of the loaded topics", lambda n: n.subscriptions),
    ("pulsar_producers_count", "gauge", "Producers connected", lambda n: n.producers),
    ("pulsar_consumers_count", "gauge", "Consumers connected", lambda n: n.consumers),
    ("pulsar_in_messages_total", "counter", "Messages published to the loaded topics", lambda n: n.msg_in_total),
    ("pulsar_in_bytes_total", "counter", "Bytes published to the loaded topics", lambda n: n.bytes_in_total),
    ("pulsar_out_messages_total", "counter", "Messages dispatched", lambda n: n.msg_out_total),
    ("pulsar_out_bytes_total", "counter", "Bytes dispatched", lambda n: n.bytes_out_total),
    ("pulsar_storage_size", "gauge", "Bytes the loaded topics' ledgers occupy", lambda n: n.storage_size_bytes),
    ("pulsar_msg_backlog", "gauge", "Entries not yet acknowledged, summed over every subscription",
     lambda n: n.backlog_entries),
    ("velamq_topic_entries", "gauge", "Entries stored for the loaded topics", lambda n: n.entries_total),
    ("pulsar_rate_in", "gauge", "Messages per second published", lambda n: n.msg_rate_in),
    ("pulsar_rate_out", "gauge", "Messages per second dispatched", lambda n: n.msg_rate_out),
    ("pulsar_throughput_in", "gauge", "Bytes per second published", lambda n: n.msg_throughput_in),
    ("pulsar_throughput_out", "gauge", "Bytes per second dispatched", lambda n: n.msg_throughput_out),
    ("pulsar_storage_backlog_size", "gauge", "Bytes of the backlog", lambda n: n.backlog_size_bytes),
)


def _optional(
    families: tuple[tuple[str, str, str, str], ...], items: Iterable[object]
) -> list[tuple[str, str, str, Callable[[object], float]]]:
    """The optional families whose attribute every item has (a snapshot type has it or not)."""
    items = list(items)
    present = []
    for name, kind, text, attr in families:
        if items and all(isinstance(getattr(i, attr, None), int | float) for i in items):
            present.append((name, kind, text, _getter(attr)))
    return present


def _getter(attr: str) -> Callable[[object], float]:
    return lambda item: float(getattr(item, attr))


def render(metrics: BrokerMetrics, cluster: str = "standalone") -> str:
    """The whole /metrics page."""
    base: Labels = (("cluster", cluster),)
    families: list[_Family] = [
        _Family("pulsar_active_connections", "gauge", "Open client connections",
                [(base, metrics.connections_active)]),
        _Family("pulsar_connection_created_total_count", "counter", "Client connections opened since start",
                [(base, metrics.connections_opened_total)]),
        _Family("velamq_policy_checks_total", "counter",
                "Rounds of the broker's policy checks (TTL, retention, backlog quota, ack holes, rates)",
                [(base, metrics.policy_checks_total)]),
    ]
    families += [
        _Family("velamq_topics_loaded", "gauge", "Topics loaded in the broker", [(base, metrics.topics_loaded)]),
        _Family("velamq_topics_unloaded_total", "counter", "Topics unloaded after being idle",
                [(base, metrics.topics_unloaded_total)]),
    ]
    if metrics.namespaces:
        per_namespace = Counter({n.namespace: n.topics for n in metrics.namespaces})
    else:
        per_namespace = Counter(_namespace(t.topic) for t in metrics.topics)
    families.append(_Family(
        "pulsar_topics_count", "gauge", "Topics loaded in the broker, per namespace",
        [((*base, ("namespace", ns)), n) for ns, n in sorted(per_namespace.items())],
    ))
    if metrics.topics:
        families += _topic_families(metrics.topics, base)
    else:
        families += _namespace_families(metrics.namespaces, base)

    taken = {f.name for f in families}
    for figures, help_text in ((metrics.storage, "Storage layer figure"), (metrics.limits, "Broker limit figure")):
        for key in sorted(figures):
            name = sanitize_metric_name(key)
            if name in taken:
                continue  # a key that collides with one of ours must not make the page invalid
            taken.add(name)
            kind = "counter" if name.endswith("_total") else "gauge"
            families.append(_Family(name, kind, help_text, [(base, figures[key])]))

    rendered: dict[int, str] = {}  # a topic's labels are one tuple shared by its families: rendered once
    return "".join(_render_family(f, rendered) for f in families)


def _namespace_families(namespaces: Iterable[NamespaceMetrics], base: Labels) -> list[_Family]:
    families = [_Family(name, kind, text) for name, kind, text, _ in _NAMESPACE_FAMILIES]
    for ns in sorted(namespaces, key=lambda n: n.namespace):
        labels: Labels = (*base, ("namespace", ns.namespace))
        for family, (_, _, _, get) in zip(families, _NAMESPACE_FAMILIES, strict=True):
            family.samples.append((labels, get(ns)))
    return families


def _topic_families(all_topics: Iterable[TopicMetrics], base: Labels) -> list[_Family]:
    topics = sorted(all_topics, key=lambda t: t.topic)
    subscriptions = [s for t in topics for s in t.subscriptions]
    topic_specs: list[tuple[str, str, str, Callable[[Any], float]]] = [
        *_TOPIC_FAMILIES, *_optional(_OPTIONAL_TOPIC_FAMILIES, topics)
    ]
    sub_specs: list[tuple[str, str, str, Callable[[Any], float]]] = [
        *_SUBSCRIPTION_FAMILIES, *_optional(_OPTIONAL_SUBSCRIPTION_FAMILIES, subscriptions)
    ]
    topic_families = [_Family(name, kind, text) for name, kind, text, _ in topic_specs]
    sub_families = [_Family(name, kind, text) for name, kind, text, _ in sub_specs]
    for topic in topics:
        labels: Labels = (*base, ("namespace", _namespace(topic.topic)), ("topic", topic.topic))
        for family, (_, _, _, get) in zip(topic_families, topic_specs, strict=True):
            family.samples.append((labels, get(topic)))
        for sub in sorted(topic.subscriptions, key=lambda s: s.name):
            sub_labels: Labels = (*labels, ("subscription", sub.name))
            for family, (_, _, _, get_sub) in zip(sub_families, sub_specs, strict=True):
                family.samples.append((sub_labels, get_sub(sub)))
    return topic_families + sub_families


def _render_family(family: _Family, rendered_labels: dict[int, str]) -> str:
    """`rendered_labels`: label sets already rendered in this page, by id (the tuples stay alive in
    their families while the page is rendered)."""
    lines = [f"# HELP {family.name} {_escape_help(family.help)}", f"# TYPE {family.name} {family.type}"]
    name = family.name
    for labels, value in family.samples:
        rendered = rendered_labels.get(id(labels))
        if rendered is None:
            rendered = rendered_labels[id(labels)] = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels)
        lines.append(f"{name}{{{rendered}}} {format_value(value)}")
    return "\n".join(lines) + "\n"
