"""The admin REST API of a real broker: tenants, namespaces, partitioned topics, policies, /metrics (WC-4, OP-3).

One broker for the module; a second one for the restart test.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from wait_helpers import wait_until

from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # Per-topic samples on /metrics (Pulsar's default is per namespace): the metrics test reads them.
    config = tmp_path_factory.mktemp("admin-rest") / "broker.conf"
    config.write_text("exposeTopicLevelMetricsInPrometheus=true\n")
    with run_broker(extra_args=["--config", str(config)]) as b:
        yield b


def call(broker: BrokerProcess, method: str, path: str, body: Any = None, raw: bytes | None = None
         ) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(broker.admin_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        text, status = exc.read(), exc.code
    if not text:
        return status, None
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode("utf-8", "replace")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ----------------------------------------------------------------------------- tenants, namespaces


def test_tenant_and_namespace_lifecycle(broker: BrokerProcess) -> None:
    tenant = unique("tenant")
    assert call(broker, "GET", "/admin/v2/clusters") == (200, ["standalone"])
    assert call(broker, "PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone"]})[0] == 204
    assert call(broker, "PUT", f"/admin/v2/tenants/{tenant}", {})[0] == 409
    assert call(broker, "PUT", f"/admin/v2/namespaces/{tenant}/ns")[0] == 204
    assert call(broker, "GET", f"/admin/v2/namespaces/{tenant}") == (200, [f"{tenant}/ns"])
    assert call(broker, "DELETE", f"/admin/v2/tenants/{tenant}")[0] == 409  # still has a namespace
    assert call(broker, "PUT", f"/admin/v2/persistent/{tenant}/ns/t")[0] == 204
    assert call(broker, "DELETE", f"/admin/v2/namespaces/{tenant}/ns")[0] == 409  # still has a topic
    assert call(broker, "DELETE", f"/admin/v2/persistent/{tenant}/ns/t")[0] == 204
    assert call(broker, "DELETE", f"/admin/v2/namespaces/{tenant}/ns")[0] == 204
    assert call(broker, "DELETE", f"/admin/v2/tenants/{tenant}")[0] == 204
    assert call(broker, "GET", f"/admin/v2/tenants/{tenant}")[0] == 404


def test_partitioned_topics(broker: BrokerProcess) -> None:
    name = unique("pt")
    base = f"/admin/v2/persistent/public/default/{name}"
    assert call(broker, "PUT", f"{base}/partitions", 2)[0] == 204
    assert call(broker, "PUT", f"{base}/partitions", 2)[0] == 409
    assert call(broker, "POST", f"{base}/partitions", 4)[0] == 204
    assert call(broker, "POST", f"{base}/partitions", 1)[0] == 422
    assert call(broker, "GET", f"{base}/partitions")[1]["partitions"] == 4
    status, partitioned = call(broker, "GET", "/admin/v2/persistent/public/default/partitioned")
    assert status == 200 and f"persistent://public/default/{name}" in partitioned
    topics = call(broker, "GET", "/admin/v2/namespaces/public/default/topics")[1]
    assert {f"persistent://public/default/{name}-partition-{i}" for i in range(4)} <= set(topics)
    assert call(broker, "DELETE", base)[0] == 409  # delete-partitioned-topic is the verb for it
    assert call(broker, "DELETE", f"{base}/partitions")[0] == 204
    assert call(broker, "GET", f"{base}/partitions")[1]["partitions"] == 0


# ----------------------------------------------------------------------------- policies


NS_POLICIES: list[tuple[str, Any]] = [
    ("retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}),
    ("messageTTL", 120),
    ("deduplication", True),
    ("delayedDelivery", {"active": False, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}),
    ("maxProducersPerTopic", 2),
    ("maxConsumersPerTopic", 3),
    ("maxConsumersPerSubscription", 4),
    ("ackHoleRedelivery", 30000),
]


@pytest.fixture
def namespace(broker: BrokerProcess) -> Iterator[str]:
    ns = f"public/{unique('ns')}"
    assert call(broker, "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    yield ns


def test_namespace_policies_set_get_remove(broker: BrokerProcess, namespace: str) -> None:
    base = f"/admin/v2/namespaces/{namespace}"
    for path, value in NS_POLICIES:
        assert call(broker, "GET", f"{base}/{path}")[0] == 204, path
        assert call(broker, "POST", f"{base}/{path}", value)[0] == 204, path
        assert call(broker, "GET", f"{base}/{path}") == (200, value), path
    quota = {"limitSize": 10 << 20, "limitTime": -1, "policy": "producer_exception"}
    assert call(broker, "POST", f"{base}/backlogQuota", quota)[0] == 204
    assert call(broker, "GET", f"{base}/backlogQuotaMap")[1]["destination_storage"]["policy"] == "producer_exception"
    policies = call(broker, "GET", base)[1]
    assert policies["message_ttl_in_seconds"] == 120
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert policies["velamq_ack_hole_redelivery_ms"] == 30000
    for path, _ in NS_POLICIES:
        assert call(broker, "DELETE", f"{base}/{path}")[0] == 204, path
        assert call(broker, "GET", f"{base}/{path}")[0] == 204, path
    assert call(broker, "POST", f"{base}/messageTTL", -5)[0] == 412
    assert call(broker, "POST", f"{base}/retention", {"retentionTimeInMinutes": 5, "retentionSizeInMB": 0})[0] == 412


def test_topic_policies_and_their_removal_with_the_topic(broker: BrokerProcess, namespace: str) -> None:
    topic = f"/admin/v2/persistent/{namespace}/t"
    assert call(broker, "GET", f"{topic}/messageTTL")[0] == 404
    assert call(broker, "PUT", topic)[0] == 204
    assert call(broker, "POST", f"/admin/v2/namespaces/{namespace}/messageTTL", 300)[0] == 204
    assert call(broker, "GET", f"{topic}/messageTTL?applied=true") == (200, 300)
    assert call(broker, "POST", f"{topic}/messageTTL?messageTTL=30", raw=b"")[0] == 204
    assert call(broker, "GET", f"{topic}/messageTTL") == (200, 30)
    assert call(broker, "POST", f"{topic}/maxMessageSize", 1 << 20)[0] == 204
    assert call(broker, "POST", f"{topic}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})[0] == 204
    assert call(broker, "POST", f"{topic}/maxMessageSize", 1 << 30)[0] == 412  # above the broker's limit
    assert call(broker, "DELETE", topic)[0] == 204
    assert call(broker, "PUT", topic)[0] == 204
    assert call(broker, "GET", f"{topic}/messageTTL")[0] == 204  # the old topic's policies went with it
    assert call(broker, "GET", f"{topic}/retention")[0] == 204


def test_policies_survive_a_restart(tmp_path: Any) -> None:
    with run_broker(tmp_path / "data") as b:
        assert call(b, "POST", "/admin/v2/namespaces/public/default/messageTTL", 77)[0] == 204
        assert call(b, "PUT", "/admin/v2/persistent/public/default/kept")[0] == 204
        assert call(b, "POST", "/admin/v2/persistent/public/default/kept/maxProducers", 3)[0] == 204
        b.stop()
        b.start()
        assert call(b, "GET", "/admin/v2/namespaces/public/default/messageTTL") == (200, 77)
        assert call(b, "GET", "/admin/v2/persistent/public/default/kept/maxProducers") == (200, 3)


# ----------------------------------------------------------------------------- topic operations, metrics


def test_subscriptions_stats_and_peek(broker: BrokerProcess) -> None:
    pulsar = pytest.importorskip("pulsar")
    name = unique("ops")
    base = f"/admin/v2/persistent/public/default/{name}"
    assert call(broker, "PUT", base)[0] == 204
    status, _ = call(broker, "PUT", f"{base}/subscription/sub", {"ledgerId": -1, "entryId": -1})
    assert status == 204
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(f"persistent://public/default/{name}", batching_enabled=False)
        for i in range(3):
            producer.send(b"m-%d" % i, properties={"i": str(i)})
    finally:
        client.close()
    assert call(broker, "GET", f"{base}/subscriptions") == (200, ["sub"])
    status, stats = call(broker, "GET", f"{base}/stats")
    assert status == 200 and stats["subscriptions"]["sub"]["msgBacklog"] == 3
    request = urllib.request.Request(broker.admin_url + f"{base}/subscription/sub/position/2")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.read() == b"m-1"
        assert json.loads(response.headers["X-Pulsar-Property"]) == {"i": "1"}
    assert call(broker, "POST", f"{base}/subscription/sub/skip/1")[0] == 204
    assert call(broker, "GET", f"{base}/stats")[1]["subscriptions"]["sub"]["msgBacklog"] == 2
    assert "cursors" in call(broker, "GET", f"{base}/internalStats")[1]
    assert call(broker, "DELETE", f"{base}/subscription/sub")[0] == 204


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$", line)
        if match and match.group(1) == name:
            out.append((dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2))), float(match.group(3))))
    return out


def test_metrics_have_pulsar_names_and_labels(broker: BrokerProcess) -> None:
    pulsar = pytest.importorskip("pulsar")
    name = unique("metrics")
    full = f"persistent://public/default/{name}"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = client.subscribe(full, "sub")
        producer = client.create_producer(full, batching_enabled=False)
        for i in range(4):
            producer.send(b"x-%d" % i)
        for _ in range(4):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))

        def page() -> str:
            return str(call(broker, "GET", "/metrics")[1])

        def value(metric: str, **labels: str) -> float | None:
            for found, v in _samples(page(), metric):
                if found.get("topic") == full and all(found.get(k) == w for k, w in labels.items()):
                    return v
            return None

        wait_until(lambda: value("pulsar_in_messages_total") == 4)
        wait_until(lambda: value("pulsar_out_messages_total", subscription="sub") == 4)
        wait_until(lambda: value("pulsar_subscription_back_log", subscription="sub") == 0)
        assert value("pulsar_producers_count") == 1 and value("pulsar_consumers_count") == 1
        assert value("pulsar_subscriptions_count") == 1
        assert value("pulsar_subscription_consumers_count", subscription="sub") == 1
        assert (value("pulsar_storage_size") or 0) > 0
        assert value("pulsar_msg_backlog") == 0
        labels = next(lab for lab, _ in _samples(page(), "pulsar_in_messages_total") if lab.get("topic") == full)
        assert labels == {"cluster": "standalone", "namespace": "public/default", "topic": full}
        assert any(lab.get("namespace") == "public/default" for lab, _ in _samples(page(), "pulsar_topics_count"))
    finally:
        client.close()
