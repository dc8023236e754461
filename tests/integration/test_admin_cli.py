"""`velamq admin` as a user runs it: a subprocess against a real broker (OP-2).

Each call is `python -m velamq admin --admin-url … GROUP VERB …`; the test reads stdout, stderr and the
exit code, and checks what the broker stored through the REST API.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with run_broker() as b:
        yield b


def admin(broker: BrokerProcess, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "velamq", "admin", "--admin-url", broker.admin_url, *argv],
        capture_output=True, text=True, timeout=60,
    )


def ok(broker: BrokerProcess, *argv: str) -> str:
    done = admin(broker, *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout


def rest(broker: BrokerProcess, path: str) -> Any:
    with urllib.request.urlopen(broker.admin_url + path, timeout=30) as response:
        body = response.read()
    return json.loads(body) if body else None


def test_tenants_namespaces_and_partitioned_topics(broker: BrokerProcess) -> None:
    tenant = f"cli-{uuid.uuid4().hex[:8]}"
    assert ok(broker, "clusters", "list") == "standalone\n"
    ok(broker, "tenants", "create", tenant)
    ok(broker, "namespaces", "create", f"{tenant}/ns")
    assert ok(broker, "namespaces", "list", tenant) == f"{tenant}/ns\n"
    topic = f"persistent://{tenant}/ns/orders"
    ok(broker, "topics", "create-partitioned-topic", topic, "-p", "2")
    ok(broker, "topics", "update-partitioned-topic", topic, "-p", "3")
    assert json.loads(ok(broker, "topics", "get-partitioned-topic-metadata", topic, "--json")) == {"partitions": 3}
    assert ok(broker, "topics", "list-partitioned-topics", f"{tenant}/ns") == f"{topic}\n"
    assert ok(broker, "topics", "list", f"{tenant}/ns").split() == [f"{topic}-partition-{i}" for i in range(3)]
    failed = admin(broker, "namespaces", "delete", f"{tenant}/ns")
    assert failed.returncode == 1 and "409" in failed.stderr
    ok(broker, "topics", "delete-partitioned-topic", topic)
    ok(broker, "namespaces", "delete", f"{tenant}/ns")
    ok(broker, "tenants", "delete", tenant)
    missing = admin(broker, "tenants", "get", tenant)
    assert missing.returncode == 1 and "Tenant does not exist (HTTP 404)" in missing.stderr


def test_namespace_policies_through_the_cli(broker: BrokerProcess) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:8]}"
    ok(broker, "namespaces", "create", ns)
    ok(broker, "namespaces", "set-retention", ns, "--time", "10h", "--size", "20G")
    ok(broker, "namespaces", "set-message-ttl", ns, "--ttl", "1h")
    ok(broker, "namespaces", "set-backlog-quota", ns, "--limit", "10G", "--limitTime", "1h",
       "--policy", "producer_exception")
    ok(broker, "namespaces", "set-deduplication", ns, "--enable")
    ok(broker, "namespaces", "set-max-producers-per-topic", ns, "-p", "4")
    ok(broker, "namespaces", "set-ack-hole-redelivery", ns, "--time", "30s")
    assert ok(broker, "namespaces", "get-message-ttl", ns) == "3600\n"
    table = [line.split() for line in ok(broker, "namespaces", "get-retention", ns).splitlines()]
    assert ["retentionSizeInMB", "20480"] in table and ["retentionTimeInMinutes", "600"] in table
    stored = rest(broker, f"/admin/v2/namespaces/{ns}")
    assert stored["retention_policies"] == {"retentionTimeInMinutes": 600, "retentionSizeInMB": 20480}
    assert stored["message_ttl_in_seconds"] == 3600
    assert stored["backlog_quota_map"]["destination_storage"]["limitSize"] == 10 << 30
    assert stored["backlog_quota_map"]["destination_storage"]["policy"] == "producer_exception"
    assert stored["deduplicationEnabled"] is True
    assert stored["max_producers_per_topic"] == 4
    assert stored["velamq_ack_hole_redelivery_ms"] == 30000
    ok(broker, "namespaces", "remove-message-ttl", ns)
    assert ok(broker, "namespaces", "get-message-ttl", ns) == "null\n"
    bad = admin(broker, "namespaces", "set-retention", ns, "--time", "10m", "--size", "0")
    assert bad.returncode == 1 and "Invalid retention policy" in bad.stderr


def test_topic_policies_through_the_cli(broker: BrokerProcess) -> None:
    topic = f"cli-topic-{uuid.uuid4().hex[:8]}"
    ok(broker, "topics", "create", topic)
    ok(broker, "topics", "set-message-ttl", topic, "--ttl", "90")
    ok(broker, "topics", "set-max-message-size", topic, "-m", "1M")
    ok(broker, "topics", "set-delayed-delivery", topic, "--disable")
    assert ok(broker, "topics", "get-message-ttl", topic) == "90\n"
    assert ok(broker, "topics", "get-max-producers", topic) == "null\n"
    assert ok(broker, "topics", "get-max-producers", topic, "--applied") == "0\n"
    path = f"/admin/v2/persistent/public/default/{topic}"
    assert rest(broker, f"{path}/maxMessageSize") == 1 << 20
    assert rest(broker, f"{path}/delayedDelivery")["active"] is False
    ok(broker, "topics", "delete", topic)
    gone = admin(broker, "topics", "get-message-ttl", topic)
    assert gone.returncode == 1 and "404" in gone.stderr
