"""The pulsar-admin verbs added for parity (docs/admin.md's table), each through `velamq admin`
(in-process) and the REST API of a real in-process broker: lookups, create-missed-partitions,
clear-backlog, trim-topic, reading messages by id / position / time, topic and namespace
properties, namespace unload / clear-backlog / unsubscribe, tenant update keeping what is omitted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_harness import Admin, start_admin
from wait_helpers import wait_until

from velamq.broker import BrokerConfig
from velamq.cli._admin_messages import parse_datetime_ms
from velamq.cli._admin_properties import parse_properties
from velamq.cli._main import main

NS = "public/default"
P = "/admin/v2/persistent/public/default"


def cli(admin: Admin, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["admin", "--admin-url", f"http://127.0.0.1:{admin.port}", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(admin: Admin, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = cli(admin, capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def ok(admin: Admin, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = cli(admin, capsys, *argv)
    assert code == 0, err
    return out


def backlog(admin: Admin, topic: str, subscription: str) -> int:
    return int(admin.request("GET", f"{P}/{topic}/stats").json()["subscriptions"][subscription]["msgBacklog"])


def test_parsers() -> None:
    assert parse_properties(["a=1,b=2", "c=x=y"]) == {"a": "1", "b": "2", "c": "x=y"}
    with pytest.raises(ValueError):
        parse_properties(["novalue"])
    assert parse_datetime_ms("1970-01-01T00:00:01Z") == 1000
    assert parse_datetime_ms("1970-01-01T02:00:01.5+02:00") == 1500
    assert parse_datetime_ms("1970-01-01 00:00:02") == 2000  # no zone: UTC
    with pytest.raises(ValueError):
        parse_datetime_ms("yesterday")


def test_lookups_and_missed_partitions(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    service_url = admin.broker.service_url
    ok(admin, capsys, "topics", "create", "plain")
    assert ok(admin, capsys, "topics", "lookup", "plain") == f"{service_url}\n"
    ok(admin, capsys, "topics", "create-partitioned-topic", "parts", "-p", "3")
    assert cli_json(admin, capsys, "topics", "partitioned-lookup", "parts") == {
        f"persistent://public/default/parts-partition-{i}": service_url for i in range(3)
    }
    assert admin.run(admin.metadata.list_topics(NS)) == ["persistent://public/default/plain"]
    ok(admin, capsys, "topics", "create-missed-partitions", "parts")
    assert admin.run(admin.metadata.list_topics(NS)) == [
        *(f"persistent://public/default/parts-partition-{i}" for i in range(3)), "persistent://public/default/plain"
    ]
    ok(admin, capsys, "topics", "create-missed-partitions", "parts")  # again: nothing to do
    code, _, err = cli(admin, capsys, "topics", "create-missed-partitions", "plain")
    assert code == 1 and "404" in err


def test_clear_backlog_of_a_subscription(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    ok(admin, capsys, "topics", "create", "cb")
    ok(admin, capsys, "topics", "create-subscription", "cb", "-s", "sub", "-m", "earliest")
    producer = admin.client().create_producer("persistent://public/default/cb")
    for i in range(4):
        producer.send(b"%d" % i)
    assert backlog(admin, "cb", "sub") == 4
    ok(admin, capsys, "topics", "clear-backlog", "cb", "-s", "sub")
    assert backlog(admin, "cb", "sub") == 0


def test_messages_by_id_by_position_and_by_time(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    producer = admin.client().create_producer("persistent://public/default/m", batching_enabled=False)
    ids = [producer.send(f"message {i}".encode()) for i in range(3)]
    stored = [f"{m.ledger_id}:{m.entry_id}" for m in ids]

    by_id = cli_json(admin, capsys, "topics", "get-message-by-id", "m", "-l", str(ids[1].ledger_id),
                     "-e", str(ids[1].entry_id))
    assert [(m["messageId"], m["payload"]) for m in by_id] == [(stored[1], "message 1")]
    out = ok(admin, capsys, "topics", "get-message-by-id", "m", "-l", str(ids[0].ledger_id), "-e", str(ids[0].entry_id))
    assert out.startswith(f"Message ID: {stored[0]}") and "payload (utf-8): message 0" in out
    code, _, err = cli(admin, capsys, "topics", "get-message-by-id", "m", "-l", str(ids[0].ledger_id), "-e", "99")
    assert code == 1 and "404" in err

    def examine(*args: str) -> str:
        found = cli_json(admin, capsys, "topics", "examine-messages", "m", *args)
        assert len(found) == 1
        return f"{found[0]['messageId']} {found[0]['payload']}"

    assert examine() == f"{stored[2]} message 2"  # the newest
    assert examine("-i", "earliest") == f"{stored[0]} message 0"
    assert examine("-i", "earliest", "-m", "2") == f"{stored[1]} message 1"
    assert examine("-i", "latest", "-m", "3") == f"{stored[0]} message 0"
    assert cli(admin, capsys, "topics", "examine-messages", "m", "-m", "4")[0] == 1  # 404: only 3

    reply = admin.request("GET", f"{P}/m/ledger/{ids[2].ledger_id}/entry/{ids[2].entry_id}")
    assert reply.body == b"message 2" and reply.headers["x-pulsar-message-id"] == stored[2]
    before_all = cli_json(admin, capsys, "topics", "get-message-id", "m", "-d", "2000-01-01T00:00:00Z")
    assert (before_all["ledgerId"], before_all["entryId"]) == (ids[0].ledger_id, ids[0].entry_id)
    after_all = cli_json(admin, capsys, "topics", "get-message-id", "m", "-d", "2999-01-01T00:00:00Z")
    assert (after_all["ledgerId"], after_all["entryId"]) == (ids[2].ledger_id, ids[2].entry_id + 1)

    ok(admin, capsys, "topics", "create-partitioned-topic", "mp", "-p", "2")
    assert admin.request("GET", f"{P}/mp/examinemessage").status == 405
    assert admin.request("GET", f"{P}/mp/messageid/0").status == 405
    assert admin.request("GET", f"{P}/m/examinemessage?initialPosition=middle").status == 400


def test_topic_properties(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    ok(admin, capsys, "topics", "create-partitioned-topic", "props", "-p", "2")
    ok(admin, capsys, "topics", "update-properties", "props", "-p", "a=1,b=2", "-p", "c=<3>")
    assert cli_json(admin, capsys, "topics", "get-properties", "props") == {"a": "1", "b": "2", "c": "<3>"}
    # A partition answers with its partitioned topic's.
    assert cli_json(admin, capsys, "topics", "get-properties", "props-partition-1")["c"] == "<3>"
    ok(admin, capsys, "topics", "update-properties", "props", "-p", "a=one")
    ok(admin, capsys, "topics", "remove-properties", "props", "-k", "b")
    assert cli_json(admin, capsys, "topics", "get-properties", "props") == {"a": "one", "c": "<3>"}
    assert admin.request("PUT", f"{P}/props/properties", '{"n": 1}').status == 400
    assert cli(admin, capsys, "topics", "get-properties", "ghost")[0] == 1
    # Properties go with the topic.
    ok(admin, capsys, "topics", "delete-partitioned-topic", "props")
    ok(admin, capsys, "topics", "create-partitioned-topic", "props", "-p", "2")
    assert cli_json(admin, capsys, "topics", "get-properties", "props") == {}


def test_namespace_properties(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    ok(admin, capsys, "namespaces", "set-property", NS, "-k", "owner", "-v", "team a")
    assert ok(admin, capsys, "namespaces", "get-property", NS, "-k", "owner") == "team a\n"
    ok(admin, capsys, "namespaces", "set-properties", NS, "-p", "tier=gold,region=eu")
    assert cli_json(admin, capsys, "namespaces", "get-properties", NS) == {
        "owner": "team a", "tier": "gold", "region": "eu"
    }
    assert cli_json(admin, capsys, "namespaces", "policies", NS)["properties"]["tier"] == "gold"
    ok(admin, capsys, "namespaces", "remove-property", NS, "-k", "owner")
    assert ok(admin, capsys, "namespaces", "get-property", NS, "-k", "owner") == "null\n"
    ok(admin, capsys, "namespaces", "clear-properties", NS)
    assert cli_json(admin, capsys, "namespaces", "get-properties", NS) == {}
    assert cli(admin, capsys, "namespaces", "get-properties", "public/ghost")[0] == 1


def test_namespace_unload_clear_backlog_and_unsubscribe(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    client = admin.client()
    for topic in ("n1", "n2"):
        ok(admin, capsys, "topics", "create", topic)
        for sub in ("s1", "s2"):
            ok(admin, capsys, "topics", "create-subscription", topic, "-s", sub, "-m", "earliest")
        producer = client.create_producer(f"persistent://public/default/{topic}")
        producer.send(b"x")
        producer.send(b"y")
        producer.close()
    ok(admin, capsys, "namespaces", "clear-backlog", NS, "-s", "s1")
    assert [backlog(admin, t, s) for t in ("n1", "n2") for s in ("s1", "s2")] == [0, 2, 0, 2]
    ok(admin, capsys, "namespaces", "clear-backlog", NS, "--force")
    assert [backlog(admin, t, "s2") for t in ("n1", "n2")] == [0, 0]

    consumer = client.subscribe("persistent://public/default/n1", "s2")
    code, _, err = cli(admin, capsys, "namespaces", "unsubscribe", NS, "-s", "s2")
    assert code == 1 and "412" in err  # n1's s2 has a consumer
    consumer.close()
    ok(admin, capsys, "namespaces", "unsubscribe", NS, "-s", "s2")
    for topic in ("n1", "n2"):
        assert ok(admin, capsys, "topics", "subscriptions", topic) == "s1\n"

    loaded = admin.broker.server.broker.topics
    assert {"persistent://public/default/n1", "persistent://public/default/n2"} <= set(loaded)
    ok(admin, capsys, "namespaces", "unload", NS)
    wait_until(lambda: not any(name.startswith("persistent://public/default/n") for name in list(loaded)))
    assert ok(admin, capsys, "namespaces", "destinations", NS).split() == [
        "persistent://public/default/n1", "persistent://public/default/n2"
    ]
    assert cli(admin, capsys, "namespaces", "unload", "public/ghost")[0] == 1


def test_tenant_update_keeps_what_is_not_given(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    ok(admin, capsys, "tenants", "create", "acme", "--admin-roles", "ops,dev")
    ok(admin, capsys, "tenants", "update", "acme", "--admin-roles", "ops")
    assert cli_json(admin, capsys, "tenants", "get", "acme") == {"adminRoles": ["ops"],
                                                                 "allowedClusters": ["standalone"]}
    ok(admin, capsys, "tenants", "update", "acme", "--allowed-clusters", "standalone")
    assert cli_json(admin, capsys, "tenants", "get", "acme")["adminRoles"] == ["ops"]


@pytest.fixture
def small_ledgers(tmp_path: Path) -> Iterator[Admin]:
    """Ledgers of two entries, and no periodic policy check: only trim-topic trims here."""
    config = BrokerConfig(ledger_entries_max=2, policy_check_interval_s=3600)
    yield from start_admin(tmp_path, config=config)


def test_trim_topic_deletes_consumed_ledgers(small_ledgers: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    admin = small_ledgers
    ok(admin, capsys, "topics", "create", "tt")
    ok(admin, capsys, "topics", "create-subscription", "tt", "-s", "sub", "-m", "earliest")
    producer = admin.client().create_producer("persistent://public/default/tt", batching_enabled=False)
    for i in range(6):
        producer.send(b"%d" % i)

    def ledgers() -> int:
        return len(cli_json(admin, capsys, "topics", "stats-internal", "tt")["ledgers"])

    wait_until(lambda: ledgers() >= 3)
    before = ledgers()
    ok(admin, capsys, "topics", "trim-topic", "tt")
    assert ledgers() == before  # nothing consumed: retention keeps everything
    ok(admin, capsys, "topics", "clear-backlog", "tt", "-s", "sub")
    ok(admin, capsys, "topics", "trim-topic", "tt")
    assert ledgers() < before  # the consumed, closed ledgers are gone (default retention: none)
    assert cli(admin, capsys, "topics", "trim-topic", "ghost")[0] == 1
