"""Prometheus text exposition (format 0.0.4) of a BrokerMetrics snapshot (OP-3).

Pulsar's metric names are used where Pulsar has one, so that Pulsar dashboards work unchanged;
figures Pulsar has no name for are `velamq_*`. Every sample carries cluster="standalone"; topic
samples add namespace and topic, subscription samples add subscription, as Pulsar labels them.

    pulsar_active_connections{cluster}                       gauge
    pulsar_connection_created_total_count{cluster}           counter
    pulsar_topics_count{cluster,namespace}                   gauge   (topics loaded in the broker)
    pulsar_subscriptions_count / producers / consumers_count gauge   per topic
    pulsar_in_messages_total, pulsar_in_bytes_total           counter per topic
    pulsar_out_messages_total, pulsar_out_bytes_total         counter per topic
    pulsar_storage_size                                       gauge   per topic, bytes
    pulsar_msg_backlog                                        gauge   per topic, entries
    velamq_topic_entries                                      gauge   per topic
    pulsar_subscription_back_log                              gauge   per subscription
    pulsar_subscription_unacked_messages                      gauge   per subscription
    velamq_subscription_consumers                             gauge   per subscription
    velamq_subscription_out_messages_total / _bytes_total     counter per subscription
    <every key of BrokerMetrics.storage>{cluster}             counter if it ends in _total, else gauge
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from velamq._errors import InvalidTopicNameError
from velamq._topic_name import TopicName

if TYPE_CHECKING:
    from velamq.broker._stats import BrokerMetrics, SubscriptionMetrics, TopicMetrics

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


_TOPIC_FAMILIES: Final[tuple[tuple[str, str, str, Callable[[TopicMetrics], float]], ...]] = (
    ("pulsar_subscriptions_count", "gauge", "Subscriptions of the topic", lambda t: len(t.subscriptions)),
    ("pulsar_producers_count", "gauge", "Producers connected to the topic", lambda t: t.producers),
    ("pulsar_consumers_count", "gauge", "Consumers connected to the topic", lambda t: t.consumers),
    ("pulsar_in_messages_total", "counter", "Messages published to the topic", lambda t: t.msg_in_total),
    ("pulsar_in_bytes_total", "counter", "Bytes published to the topic", lambda t: t.bytes_in_total),
    ("pulsar_out_messages_total", "counter", "Messages dispatched from the topic", lambda t: t.msg_out_total),
    ("pulsar_out_bytes_total", "counter", "Bytes dispatched from the topic", lambda t: t.bytes_out_total),
    ("pulsar_storage_size", "gauge", "Bytes the topic's ledgers occupy", lambda t: t.storage_size_bytes),
    ("pulsar_msg_backlog", "gauge", "Largest backlog among the topic's subscriptions", lambda t: t.backlog_entries),
    ("velamq_topic_entries", "gauge", "Entries stored for the topic", lambda t: t.entries_total),
)

_SUBSCRIPTION_FAMILIES: Final[tuple[tuple[str, str, str, Callable[[SubscriptionMetrics], float]], ...]] = (
    ("pulsar_subscription_back_log", "gauge", "Entries not yet acknowledged by the subscription",
     lambda s: s.backlog_entries),
    ("pulsar_subscription_unacked_messages", "gauge", "Messages delivered but not acknowledged",
     lambda s: s.unacked_messages),
    ("velamq_subscription_consumers", "gauge", "Consumers attached to the subscription", lambda s: s.consumers),
    ("velamq_subscription_out_messages_total", "counter", "Messages dispatched to the subscription",
     lambda s: s.msg_out_total),
    ("velamq_subscription_out_bytes_total", "counter", "Bytes dispatched to the subscription",
     lambda s: s.bytes_out_total),
)


def render(metrics: BrokerMetrics, cluster: str = "standalone") -> str:
    """The whole /metrics page."""
    base: Labels = (("cluster", cluster),)
    families: list[_Family] = [
        _Family("pulsar_active_connections", "gauge", "Open client connections",
                [(base, metrics.connections_active)]),
        _Family("pulsar_connection_created_total_count", "counter", "Client connections opened since start",
                [(base, metrics.connections_opened_total)]),
    ]
    per_namespace = Counter(_namespace(t.topic) for t in metrics.topics)
    families.append(_Family(
        "pulsar_topics_count", "gauge", "Topics loaded in the broker, per namespace",
        [((*base, ("namespace", ns)), n) for ns, n in sorted(per_namespace.items())],
    ))

    topic_families = [_Family(name, kind, text) for name, kind, text, _ in _TOPIC_FAMILIES]
    sub_families = [_Family(name, kind, text) for name, kind, text, _ in _SUBSCRIPTION_FAMILIES]
    for topic in sorted(metrics.topics, key=lambda t: t.topic):
        labels: Labels = (*base, ("namespace", _namespace(topic.topic)), ("topic", topic.topic))
        for family, (_, _, _, get) in zip(topic_families, _TOPIC_FAMILIES, strict=True):
            family.samples.append((labels, get(topic)))
        for sub in sorted(topic.subscriptions, key=lambda s: s.name):
            sub_labels: Labels = (*labels, ("subscription", sub.name))
            for family, (_, _, _, get_sub) in zip(sub_families, _SUBSCRIPTION_FAMILIES, strict=True):
                family.samples.append((sub_labels, get_sub(sub)))
    families += topic_families + sub_families

    taken = {f.name for f in families}
    for key in sorted(metrics.storage):
        name = sanitize_metric_name(key)
        if name in taken:
            continue  # a storage key that collides with one of ours must not make the page invalid
        taken.add(name)
        kind = "counter" if name.endswith("_total") else "gauge"
        families.append(_Family(name, kind, "Storage layer figure", [(base, metrics.storage[key])]))

    return "".join(_render_family(f) for f in families)


def _render_family(family: _Family) -> str:
    lines = [f"# HELP {family.name} {_escape_help(family.help)}", f"# TYPE {family.name} {family.type}"]
    for labels, value in family.samples:
        rendered = ",".join(f'{key}="{escape_label_value(val)}"' for key, val in labels)
        lines.append(f"{family.name}{{{rendered}}} {format_value(value)}")
    return "\n".join(lines) + "\n"
