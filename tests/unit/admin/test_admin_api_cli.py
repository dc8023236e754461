"""`velamq admin`: units, output, and every verb group against the admin server (OP-2).

The CLI runs in-process here (velamq.cli._main.main) against the test server; the integration tests
run it as a subprocess against a real broker.
"""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest
from admin_harness import Admin

import velamq.cli
from velamq.cli._admin_output import parse_size_bytes, parse_time_s, render
from velamq.cli._admin_policies import parse_duration_ms, topic_path
from velamq.cli._main import main


def cli(admin: Admin, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["admin", "--admin-url", f"http://127.0.0.1:{admin.port}", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(admin: Admin, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = cli(admin, capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(("text", "seconds"), [("30", 30), ("30s", 30), ("10m", 600), ("1h", 3600), ("2d", 172800),
                                                ("1w", 604800), ("1y", 31536000), ("-1", -1), ("0", 0)])
def test_time_units(text: str, seconds: int) -> None:
    assert parse_time_s(text) == seconds


@pytest.mark.parametrize(("text", "size"), [("4096", 4096), ("10K", 10240), ("10k", 10240), ("16M", 16 << 20),
                                             ("1G", 1 << 30), ("3T", 3 << 40), ("-1", -1)])
def test_size_units(text: str, size: int) -> None:
    assert parse_size_bytes(text) == size


@pytest.mark.parametrize("bad", ["", "1.5h", "ten", "10x", "1 h"])
def test_bad_units(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_time_s(bad)
    with pytest.raises(ValueError):
        parse_size_bytes(bad)


def test_duration_ms_and_topic_paths() -> None:
    assert parse_duration_ms("500ms") == 500 and parse_duration_ms("2s") == 2000 and parse_duration_ms("0") == 0
    assert topic_path("t") == "/admin/v2/persistent/public/default/t"
    assert topic_path("non-persistent://a/b/c d", "stats") == "/admin/v2/non-persistent/a/b/c%20d/stats"


def test_render() -> None:
    assert render(["a", "b"]) == "a\nb"
    assert render(None) == "null" and render(True) == "true" and render(5) == "5"
    table = render({"msgRateIn": 1.5, "subscriptions": {"s": {"msgBacklog": 3}}, "publishers": []})
    assert table.splitlines() == ["KEY                         VALUE", "msgRateIn                   1.5",
                                  "subscriptions.s.msgBacklog  3", "publishers"]
    assert render([{"a": 1, "b": "x"}, {"a": 22}]).splitlines() == ["A   B", "1   x", "22"]
    assert render({}) == "{}"


# ----------------------------------------------------------------------------- against the server


def test_clusters_and_tenants(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(admin, capsys, "clusters", "list") == (0, "standalone\n", "")
    assert cli(admin, capsys, "tenants", "create", "acme", "--admin-roles", "ops")[0] == 0
    assert cli_json(admin, capsys, "tenants", "get", "acme") == {"adminRoles": ["ops"],
                                                                 "allowedClusters": ["standalone"]}
    assert cli(admin, capsys, "tenants", "list")[1] == "acme\npublic\n"
    code, out, err = cli(admin, capsys, "tenants", "create", "acme")
    assert (code, out) == (1, "") and "Tenant already exists (HTTP 409)" in err
    assert cli(admin, capsys, "tenants", "delete", "acme") == (0, "", "")


def test_namespace_policies(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    ns = "public/default"
    assert cli(admin, capsys, "namespaces", "set-retention", ns, "--time", "10h", "--size", "20G") == (0, "", "")
    assert cli_json(admin, capsys, "namespaces", "get-retention", ns) == {"retentionTimeInMinutes": 600,
                                                                         "retentionSizeInMB": 20480}
    assert cli(admin, capsys, "namespaces", "set-message-ttl", ns, "--ttl", "1h")[0] == 0
    assert cli(admin, capsys, "namespaces", "set-message-ttl", ns, "-ttl", "2h")[0] == 0
    assert cli(admin, capsys, "namespaces", "get-message-ttl", ns)[1] == "7200\n"
    assert cli(admin, capsys, "namespaces", "set-backlog-quota", ns, "--limit", "10G", "--limitTime", "1h",
               "--policy", "producer_exception")[0] == 0
    quotas = cli_json(admin, capsys, "namespaces", "get-backlog-quotas", ns)
    assert quotas["destination_storage"]["limitSize"] == 10 << 30
    assert quotas["destination_storage"]["limitTime"] == 3600
    assert cli(admin, capsys, "namespaces", "set-deduplication", ns, "--enable")[0] == 0
    assert cli(admin, capsys, "namespaces", "get-deduplication", ns)[1] == "true\n"
    assert cli(admin, capsys, "namespaces", "set-delayed-delivery", ns, "--disable", "--time", "500ms")[0] == 0
    assert cli_json(admin, capsys, "namespaces", "get-delayed-delivery", ns)["tickTime"] == 500
    for verb, flag, value in [("max-producers-per-topic", "-p", "3"), ("max-consumers-per-topic", "-c", "4"),
                              ("max-consumers-per-subscription", "-c", "5")]:
        assert cli(admin, capsys, "namespaces", f"set-{verb}", ns, flag, value)[0] == 0
        assert cli(admin, capsys, "namespaces", f"get-{verb}", ns)[1] == f"{value}\n"
    assert cli(admin, capsys, "namespaces", "set-ack-hole-redelivery", ns, "--time", "30s")[0] == 0
    policies = cli_json(admin, capsys, "namespaces", "policies", ns)
    assert policies["velamq_ack_hole_redelivery_ms"] == 30000
    assert policies["message_ttl_in_seconds"] == 7200
    assert cli(admin, capsys, "namespaces", "remove-message-ttl", ns)[0] == 0
    assert cli(admin, capsys, "namespaces", "get-message-ttl", ns)[1] == "null\n"
    assert cli(admin, capsys, "namespaces", "remove-backlog-quota", ns)[0] == 0
    assert cli_json(admin, capsys, "namespaces", "get-backlog-quotas", ns) == {}


def test_bad_arguments_exit_2(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(admin, capsys, "namespaces", "set-message-ttl", "public/default", "--ttl", "soon")
    assert code == 2 and "bad time" in err
    code, _, err = cli(admin, capsys, "namespaces", "get-retention", "no-slash")
    assert code == 2 and "tenant/namespace" in err
    with pytest.raises(SystemExit) as exit_info:
        cli(admin, capsys, "namespaces", "set-deduplication", "public/default")  # --enable or --disable
    assert exit_info.value.code == 2


def test_server_errors_exit_1(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(admin, capsys, "namespaces", "set-retention", "public/default", "--time", "10m", "--size", "0")
    assert code == 1 and "Invalid retention policy" in err and "412" in err
    code, _, err = cli(admin, capsys, "topics", "stats", "ghost")
    assert code == 1 and "404" in err


def test_unreachable_broker(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["admin", "--admin-url", "http://127.0.0.1:9", "clusters", "list"])
    assert code == 1 and "cannot reach http://127.0.0.1:9" in capsys.readouterr().err


def test_topics_and_subscriptions(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(admin, capsys, "topics", "create", "t")[0] == 0
    assert cli(admin, capsys, "topics", "create-partitioned-topic", "pt", "-p", "2")[0] == 0
    assert cli(admin, capsys, "topics", "update-partitioned-topic", "pt", "-p", "3")[0] == 0
    assert cli_json(admin, capsys, "topics", "get-partitioned-topic-metadata", "pt") == {"partitions": 3}
    listed = cli(admin, capsys, "topics", "list", "public/default")[1].split()
    assert "persistent://public/default/t" in listed and "persistent://public/default/pt-partition-2" in listed
    assert cli(admin, capsys, "topics", "list-partitioned-topics", "public/default")[1] == \
        "persistent://public/default/pt\n"
    full = "persistent://public/default/t"
    client = admin.client()
    producer = client.create_producer(full)
    first = producer.send(b"hello")
    batcher = client.create_producer(full, batching_enabled=True, batching_max_publish_delay_ms=60_000)
    batcher.send_async(b"b0")
    batcher.send_async(b"\xff\x00")
    batcher.flush()
    producer.close()  # gone before the topic is unloaded and deleted below (a live one reconnects)
    batcher.close()
    assert cli(admin, capsys, "topics", "create-subscription", "t", "-s", "sub", "-m", "earliest")[0] == 0
    assert cli(admin, capsys, "topics", "subscriptions", "t")[1] == "sub\n"
    peeked = cli_json(admin, capsys, "topics", "peek-messages", "t", "-s", "sub", "-n", "5")
    first_id = f"{first.ledger_id}:{first.entry_id}"
    batch_id = f"{first.ledger_id}:{first.entry_id + 1}"
    assert [(m["messageId"], m["payload"]) for m in peeked] == [
        (first_id, "hello"), (f"{batch_id}:0", "b0"), (f"{batch_id}:1", "/wA=")
    ]
    assert peeked[2]["payloadEncoding"] == "base64"
    code, out, _ = cli(admin, capsys, "topics", "peek-messages", "t", "-s", "sub")
    assert code == 0 and out.startswith(f"Message ID: {first_id}") and "payload (utf-8): hello" in out

    def backlog() -> int:
        return int(cli_json(admin, capsys, "topics", "stats", "t")["subscriptions"]["sub"]["msgBacklog"])

    assert cli(admin, capsys, "topics", "skip", "t", "-s", "sub", "-n", "1")[0] == 0
    assert backlog() == 1
    assert cli(admin, capsys, "topics", "expire-messages", "t", "-s", "sub", "-t", "1h")[0] == 0
    assert backlog() == 1  # nothing is an hour old
    assert cli(admin, capsys, "topics", "reset-cursor", "t", "-s", "sub", "--messageId", first_id)[0] == 0
    assert backlog() == 2
    assert cli(admin, capsys, "topics", "skip-all", "t", "-s", "sub")[0] == 0
    assert backlog() == 0
    assert cli(admin, capsys, "topics", "reset-cursor", "t", "-s", "sub", "--time", "10m")[0] == 0
    assert backlog() == 2  # published within the last ten minutes
    assert cli(admin, capsys, "topics", "reset-cursor", "t", "-s", "sub")[0] == 2
    assert cli(admin, capsys, "topics", "skip-all", "t", "-s", "sub")[0] == 0
    assert backlog() == 0
    assert "cursors.sub.markDeletePosition" in cli(admin, capsys, "topics", "stats-internal", "t")[1]
    assert cli_json(admin, capsys, "topics", "last-message-id", "t")["entryId"] == first.entry_id + 1
    assert cli(admin, capsys, "topics", "compact", "t")[0] == 0
    assert cli_json(admin, capsys, "topics", "compaction-status", "t")["status"] in ("RUNNING", "SUCCESS")
    assert cli(admin, capsys, "topics", "unload", "t")[0] == 0
    assert cli(admin, capsys, "topics", "unsubscribe", "t", "-s", "sub")[0] == 0
    assert cli(admin, capsys, "topics", "delete", "t")[0] == 0
    assert cli(admin, capsys, "topics", "delete-partitioned-topic", "pt")[0] == 0


def test_topic_policies(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(admin, capsys, "topics", "create", "t")[0] == 0
    assert cli(admin, capsys, "namespaces", "set-max-producers-per-topic", "public/default", "-p", "9")[0] == 0
    assert cli(admin, capsys, "topics", "get-max-producers", "t")[1] == "null\n"
    assert cli(admin, capsys, "topics", "get-max-producers", "t", "--applied")[1] == "9\n"
    assert cli(admin, capsys, "topics", "set-max-producers", "t", "-p", "2")[0] == 0
    assert cli(admin, capsys, "topics", "set-message-ttl", "t", "-t", "90")[0] == 0
    assert cli(admin, capsys, "topics", "set-max-message-size", "t", "-m", "1M")[0] == 0
    assert cli(admin, capsys, "topics", "set-retention", "t", "--time", "-1", "--size", "-1")[0] == 0
    assert cli(admin, capsys, "topics", "set-backlog-quota", "t", "--limitTime", "1h", "-p",
               "consumer_backlog_eviction", "-t", "message_age")[0] == 0
    stored = admin.run(admin.metadata.get_topic_policies("persistent://public/default/t"))
    assert stored["maxProducerPerTopic"] == 2 and stored["messageTTLInSeconds"] == 90
    assert stored["maxMessageSize"] == 1 << 20
    assert stored["retentionPolicies"] == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    assert stored["backLogQuotaMap"]["message_age"]["limitTime"] == 3600
    assert cli(admin, capsys, "topics", "remove-max-producers", "t")[0] == 0
    assert cli(admin, capsys, "topics", "get-max-producers", "t", "-ap")[1] == "9\n"


def test_storage_check_hook(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    # `from velamq.cli import _storage_check` finds a package attribute before sys.modules.
    monkeypatch.delattr(velamq.cli, "_storage_check", raising=False)
    module = types.ModuleType("velamq.cli._storage_check")
    module.main = lambda argv: seen.append(argv) or 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "velamq.cli._storage_check", module)
    assert main(["admin", "storage", "check", "--data-dir", "/d", "--delete"]) == 3
    assert seen == [["--data-dir", "/d", "--delete"]]

