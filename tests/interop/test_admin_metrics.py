"""OP-3: Prometheus metrics with Pulsar's names, as the official tests' start-up probe and dashboards use."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from interop_helpers import full_name, http
from wait_helpers import wait_until

from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """This module reads per-topic and per-subscription samples: topic-level metrics on (by
    default /metrics sums the topics of each namespace)."""
    config = tmp_path_factory.mktemp("conf") / "broker.conf"
    config.write_text("exposeTopicLevelMetricsInPrometheus=true\n")
    with run_broker(extra_args=["--config", str(config)]) as b:
        yield b

sample_re = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
label_re = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = sample_re.match(line)
        if m and m.group("name") == name:
            labels = dict(label_re.findall(m.group("labels") or ""))
            out.append((labels, float(m.group("value"))))
    return out


def topic_value(admin_url: str, name: str, topic: str) -> float | None:
    status, text = http("GET", f"{admin_url}/metrics")
    assert status == 200
    for labels, value in samples(text, name):
        if labels.get("topic") == full_name(topic):
            return value
    return None


def test_metrics_endpoint_answers(broker: BrokerProcess) -> None:
    status, text = http("GET", f"{broker.admin_url}/metrics")
    assert status == 200
    assert text.strip(), "empty metrics page"


def test_in_messages_total_for_topic(broker: BrokerProcess, client: Any, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    n = 7
    for i in range(n):
        producer.send(b"metric-%d" % i)

    def counted() -> bool:
        v = topic_value(broker.admin_url, "pulsar_in_messages_total", topic)
        return v is not None and v >= n

    wait_until(counted, lambda: f"pulsar_in_messages_total >= {n} for {full_name(topic)} (got "
               f"{topic_value(broker.admin_url, 'pulsar_in_messages_total', topic)})")
    assert topic_value(broker.admin_url, "pulsar_in_messages_total", topic) == n


def test_in_messages_total_counts_batched_messages(broker: BrokerProcess, client: Any, topic: str) -> None:
    """Pulsar counts messages, not entries: a batch of 10 adds 10."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1000)
    for i in range(10):
        producer.send_async(b"b-%d" % i, None)
    producer.flush()

    def counted() -> bool:
        v = topic_value(broker.admin_url, "pulsar_in_messages_total", topic)
        return v is not None and v >= 10

    wait_until(counted, "pulsar_in_messages_total >= 10")
    assert topic_value(broker.admin_url, "pulsar_in_messages_total", topic) == 10
