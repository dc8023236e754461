"""/metrics parses as Prometheus text 0.0.4 with Pulsar's names (OP-3); the console is tested in test_admin_console.py.

The renderers are tested on a fixed snapshot (SNAPSHOT: data, every figure chosen), the endpoints
on a real broker with a topic, a producer and a consumer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from admin_harness import Admin, start_admin
from wait_helpers import wait_until

from velamq.admin import _metrics
from velamq.broker import BrokerConfig, BrokerMetrics, SubscriptionMetrics, TopicMetrics

SNAPSHOT = BrokerMetrics(
    connections_active=3,
    connections_opened_total=17,
    topics=(
        TopicMetrics(
            topic="persistent://public/default/orders",
            producers=2, consumers=1, msg_in_total=100, bytes_in_total=2048, msg_out_total=90,
            bytes_out_total=1800, storage_size_bytes=4096, entries_total=100, backlog_entries=10,
            subscriptions=(
                SubscriptionMetrics("sub-a", "Shared", 1, 10, 4, 90, 1800, "1:89"),
                SubscriptionMetrics('we"ird\\sub\nname', "Exclusive", 0, 0, 0, 0, 0, "1:99"),
            ),
        ),
        TopicMetrics(
            topic="non-persistent://acme/ns/<script>",
            producers=0, consumers=0, msg_in_total=0, bytes_in_total=0, msg_out_total=0,
            bytes_out_total=0, storage_size_bytes=0, entries_total=0, backlog_entries=0,
        ),
    ),
    storage={"velamq_storage_fsyncs_total": 42.0, "velamq_journal_bytes": 1.5e6, "bad name-1": 1.0},
    policy_checks_total=5,
)

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass
class Family:
    type: str | None = None
    help: str | None = None
    samples: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)


def _parse_labels(text: str, pos: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """Labels from just after "{" to just after "}"; the escapes are \\\\, \\" and \\n."""
    labels: list[tuple[str, str]] = []
    while text[pos] != "}":
        m = _LABEL.match(text, pos)
        assert m, f"bad label name at {text[pos:]!r}"
        name, pos = m.group(0), m.end()
        assert text[pos:pos + 2] == '="', text[pos:]
        pos += 2
        value = []
        while text[pos] != '"':
            if text[pos] == "\\":
                escaped = text[pos + 1]
                assert escaped in '\\"n', f"bad escape \\{escaped}"
                value.append("\n" if escaped == "n" else escaped)
                pos += 2
            else:
                assert text[pos] != "\n"
                value.append(text[pos])
                pos += 1
        pos += 1
        labels.append((name, "".join(value)))
        if text[pos] == ",":
            pos += 1
    return tuple(labels), pos + 1


def parse_prometheus(text: str) -> dict[str, Family]:
    """A strict reader of the text format: TYPE before samples, families contiguous, no duplicates."""
    families: dict[str, Family] = {}
    finished: set[str] = set()
    current: str | None = None
    assert text.endswith("\n")
    for line in text.split("\n"):  # the format's only line end (not \r or \x85)
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                assert _NAME.fullmatch(name), name
                assert name not in finished, f"family {name} is split"
                family = families.setdefault(name, Family())
                if parts[1] == "TYPE":
                    assert family.type is None and not family.samples, f"TYPE of {name} repeated or late"
                    assert parts[3] in ("counter", "gauge", "untyped", "summary", "histogram")
                    family.type = parts[3]
                else:
                    family.help = parts[3] if len(parts) > 3 else ""
                if current is not None and current != name:
                    finished.add(current)
                current = name
            continue
        m = _NAME.match(line)
        assert m, line
        name, pos = m.group(0), m.end()
        labels: tuple[tuple[str, str], ...] = ()
        if line[pos:pos + 1] == "{":
            labels, pos = _parse_labels(line, pos + 1)
        assert line[pos] == " ", line
        value_text = line[pos + 1:].split(" ")[0]
        value = float(value_text.replace("+Inf", "inf").replace("-Inf", "-inf"))
        assert name not in finished, f"samples of {name} are split"
        if current is not None and current != name:
            finished.add(current)
        current = name
        family = families.setdefault(name, Family())
        assert family.type is not None, f"{name} has samples before its TYPE"
        assert labels not in family.samples, f"duplicate series {name}{labels}"
        family.samples[labels] = value
    return families


def test_metrics_render_with_pulsar_names() -> None:
    families = parse_prometheus(_metrics.render(SNAPSHOT))
    c = (("cluster", "standalone"),)
    orders = (*c, ("namespace", "public/default"), ("topic", "persistent://public/default/orders"))

    assert families["pulsar_active_connections"].samples == {c: 3}
    assert families["pulsar_connection_created_total_count"].samples == {c: 17}
    assert families["pulsar_connection_created_total_count"].type == "counter"
    assert families["pulsar_topics_count"].samples == {
        (*c, ("namespace", "acme/ns")): 1,
        (*c, ("namespace", "public/default")): 1,
    }
    expected = {
        "pulsar_producers_count": 2, "pulsar_consumers_count": 1, "pulsar_subscriptions_count": 2,
        "pulsar_in_messages_total": 100, "pulsar_in_bytes_total": 2048,
        "pulsar_storage_size": 4096, "pulsar_msg_backlog": 10, "velamq_topic_entries": 100,
    }
    for name, value in expected.items():
        assert families[name].samples[orders] == value, name
        assert len(families[name].samples) == 2  # both topics
    assert families["pulsar_in_messages_total"].type == "counter"
    assert families["pulsar_storage_size"].type == "gauge"

    backlog = families["pulsar_subscription_back_log"].samples
    assert backlog[(*orders, ("subscription", "sub-a"))] == 10
    # The label value survives escaping: quote, backslash and newline.
    assert backlog[(*orders, ("subscription", 'we"ird\\sub\nname'))] == 0
    assert families["pulsar_subscription_unacked_messages"].samples[(*orders, ("subscription", "sub-a"))] == 4
    sub_a = (*orders, ("subscription", "sub-a"))
    assert families["pulsar_subscription_consumers_count"].samples[sub_a] == 1
    # Out counters are per subscription, as Pulsar exposes them (no topic-level series to double count).
    assert families["pulsar_out_messages_total"].samples[sub_a] == 90
    assert families["pulsar_out_bytes_total"].samples[sub_a] == 1800
    assert families["pulsar_out_messages_total"].type == "counter"
    assert all(("subscription" in dict(labels)) for labels in families["pulsar_out_messages_total"].samples)
    # Rates the broker has not sampled yet read as zero.
    assert families["pulsar_rate_in"].samples[orders] == 0.0
    assert families["pulsar_subscription_delayed"].samples[sub_a] == 0

    # Storage counters, under their own names; a name Prometheus can't take is made valid.
    assert families["velamq_storage_fsyncs_total"].samples == {c: 42}
    assert families["velamq_storage_fsyncs_total"].type == "counter"
    assert families["velamq_journal_bytes"].samples == {c: 1.5e6}
    assert families["velamq_journal_bytes"].type == "gauge"
    assert families["bad_name_1"].samples == {c: 1}
    assert families["velamq_policy_checks_total"].samples == {c: 5}


@pytest.fixture
def topic_level_admin(tmp_path: Path) -> Iterator[Admin]:
    yield from start_admin(tmp_path, config=BrokerConfig(expose_topic_level_metrics=True))


def test_metrics_endpoint_shows_each_topic_with_expose_topic_level_metrics(topic_level_admin: Admin) -> None:
    admin = topic_level_admin
    topic = "persistent://public/default/orders"
    client = admin.client()
    consumer = client.subscribe(topic, "sub-a", subscription_type="shared")
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(b"m%d" % i)
    consumer.acknowledge(consumer.receive(10_000))

    def scrape() -> dict[str, Family]:
        reply = admin.request("GET", "/metrics")
        assert reply.status == 200
        assert reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        return parse_prometheus(reply.body.decode())

    c = (("cluster", "standalone"),)
    orders = (*c, ("namespace", "public/default"), ("topic", topic))
    sub_a = (*orders, ("subscription", "sub-a"))
    # The consumer got the other two as well (receiver queue): they are unacked, not backlog-free.
    wait_until(lambda: scrape()["pulsar_subscription_unacked_messages"].samples.get(sub_a) == 2)
    families = scrape()
    assert families["pulsar_active_connections"].samples[c] >= 1
    assert families["pulsar_topics_count"].samples[(*c, ("namespace", "public/default"))] == 1
    assert families["pulsar_producers_count"].samples[orders] == 1
    assert families["pulsar_consumers_count"].samples[orders] == 1
    assert families["pulsar_in_messages_total"].samples[orders] == 3
    assert families["pulsar_in_messages_total"].type == "counter"
    assert families["velamq_topic_entries"].samples[orders] == 3
    assert families["pulsar_subscription_back_log"].samples[sub_a] == 2
    assert families["pulsar_out_messages_total"].samples[sub_a] == 3
    assert families["velamq_policy_checks_total"].type == "counter"
    assert any(name.startswith("velamq_storage") or name.startswith("velamq_journal") for name in families)


@pytest.fixture
def namespace_level_admin(tmp_path: Path) -> Iterator[Admin]:
    yield from start_admin(tmp_path, config=BrokerConfig(expose_topic_level_metrics=False))


def test_metrics_endpoint_sums_topics_per_namespace_when_topic_level_is_off(namespace_level_admin: Admin) -> None:
    """Pulsar's exposeTopicLevelMetricsInPrometheus=false: the loaded topics of a namespace summed,
    no topic or subscription label, whatever the number of topics."""
    admin = namespace_level_admin
    client = admin.client()
    consumers = [client.subscribe(f"orders-{i}", "sub-a", subscription_type="shared") for i in range(3)]
    producer = client.create_producer("orders-0")
    for i in range(4):
        producer.send(b"m%d" % i)
    consumers[0].acknowledge(consumers[0].receive(10_000))

    def scrape() -> dict[str, Family]:
        reply = admin.request("GET", "/metrics")
        assert reply.status == 200
        return parse_prometheus(reply.body.decode())

    c = (("cluster", "standalone"),)
    ns = (*c, ("namespace", "public/default"))
    def settled() -> bool:
        families = scrape()  # everything dispatched, the ack applied
        return families["pulsar_out_messages_total"].samples.get(ns) == 4 and \
            families["pulsar_msg_backlog"].samples.get(ns) == 3

    wait_until(settled)
    families = scrape()
    assert families["pulsar_topics_count"].samples == {ns: 3}
    assert families["velamq_topics_loaded"].samples == {c: 3}
    assert families["pulsar_subscriptions_count"].samples == {ns: 3}
    assert families["pulsar_producers_count"].samples == {ns: 1}
    assert families["pulsar_consumers_count"].samples == {ns: 3}
    assert families["pulsar_in_messages_total"].samples == {ns: 4}
    assert families["pulsar_msg_backlog"].samples == {ns: 3}  # one of the four acknowledged
    assert families["velamq_topic_entries"].samples == {ns: 4}
    assert "pulsar_subscription_back_log" not in families
    assert all("topic" not in dict(labels) for f in families.values() for labels in f.samples)


def test_metrics_with_no_topics_and_special_values() -> None:
    snapshot = BrokerMetrics(0, 0, (), {"x_total": float("nan"), "y": float("inf"), "z": -float("inf"),
                                        "pulsar_active_connections": 9, "1st": 2})
    families = parse_prometheus(_metrics.render(snapshot))
    assert math.isnan(families["x_total"].samples[(("cluster", "standalone"),)])
    assert families["y"].samples[(("cluster", "standalone"),)] == math.inf
    assert families["z"].samples[(("cluster", "standalone"),)] == -math.inf
    assert families["_1st"].samples[(("cluster", "standalone"),)] == 2
    # A storage key that collides with a broker metric is dropped, not duplicated.
    assert families["pulsar_active_connections"].samples == {(("cluster", "standalone"),): 0}
    assert families["pulsar_topics_count"].samples == {}


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [("plain", "plain"), ('a"b', 'a\\"b'), ("a\\b", "a\\\\b"), ("a\nb", "a\\nb"), ("\\n", "\\\\n")],
)
def test_label_escaping(raw: str, escaped: str) -> None:
    assert _metrics.escape_label_value(raw) == escaped


def test_value_format() -> None:
    assert _metrics.format_value(3) == "3"
    assert _metrics.format_value(True) == "1"
    assert _metrics.format_value(0.5) == "0.5"
    assert _metrics.format_value(float("nan")) == "NaN"
    assert _metrics.format_value(float("-inf")) == "-Inf"


def test_metrics_is_answered_with_trailing_slash(admin: Admin) -> None:
    assert admin.request("GET", "/metrics/").status == 200


@dataclass(frozen=True)
class _RichSubscription(SubscriptionMetrics):
    delayed_messages: int = 0
    msg_rate_out: float = 0.0


@dataclass(frozen=True)
class _RichTopic(TopicMetrics):
    msg_rate_in: float = 0.0
    backlog_size_bytes: int = 0


def test_optional_pulsar_figures_appear_when_the_snapshot_has_them() -> None:
    subs = (
        _RichSubscription("a", "Shared", 1, 5, 0, 0, 0, "1:1", delayed_messages=2, msg_rate_out=1.5),
        _RichSubscription("b", "Shared", 0, 7, 0, 0, 0, "1:1", delayed_messages=0, msg_rate_out=0.0),
    )
    topic = _RichTopic("persistent://public/default/r", 0, 0, 0, 0, 0, 0, 0, 0, 7, subs,
                       msg_rate_in=12.5, backlog_size_bytes=300)
    families = parse_prometheus(_metrics.render(BrokerMetrics(0, 0, (topic,))))
    labels = (("cluster", "standalone"), ("namespace", "public/default"), ("topic", "persistent://public/default/r"))
    assert families["pulsar_rate_in"].samples == {labels: 12.5}
    assert families["pulsar_storage_backlog_size"].samples == {labels: 300}
    assert families["pulsar_msg_backlog"].samples == {labels: 12}  # 5 + 7: summed, as Pulsar does
    assert families["pulsar_subscription_delayed"].samples[(*labels, ("subscription", "a"))] == 2
    assert families["pulsar_subscription_msg_rate_out"].samples[(*labels, ("subscription", "a"))] == 1.5
    assert families["pulsar_throughput_in"].samples == {labels: 0.0}
