"""Namespace offload policies through a real broker (TS-1, TS-7): pulsar-admin's verbs and routes
(offloadThreshold, offloadThresholdInSeconds, offloadDeletionLagMs, offloadPolicies), set while the
broker runs and applied at its next check, to a topic that is not loaded: its sealed ledgers are
offloaded, its local copies deleted once the namespace's lag is cleared back to the broker's, and
a reader after a restart reads everything as published. Offload policies naming another store
than the broker's are refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from limits_helpers import http, metrics
from offload_helpers import offload_conf, read_all
from wait_helpers import wait_until

from velamq.cli._main import main as cli_main
from velamq.storage.offload._store import topic_dir
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(240)

NS = "public/offloaded"


def cli(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code = cli_main(["admin", "--admin-url", broker.admin_url, *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out) if out.strip() else None


def ns_url(broker: BrokerProcess, what: str) -> str:
    return f"{broker.admin_url}/admin/v2/namespaces/{NS}/{what}"


def test_namespace_policies_offload_a_topic_that_is_not_loaded(tmp_path: Path, topic: str, make_client: Any,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    full = f"persistent://{NS}/{topic}-b"
    own = f"persistent://{NS}/{topic}-a"  # a policy of its own; checked before the other (name order)
    files = tmp_path / "tier" / topic_dir(full)
    own_files = tmp_path / "tier" / topic_dir(own)
    # Broker-wide: no automatic offload, local copies deleted at once.
    conf = offload_conf(tmp_path)
    with run_broker(tmp_path / "data", config_file=conf) as broker:
        assert http("PUT", f"{broker.admin_url}/admin/v2/namespaces/{NS}", {})[0] == 204
        client = make_client(broker.service_url)
        producer = client.create_producer(full, batching_enabled=False)
        for i in range(100):  # 20 entries a ledger: 4 sealed ledgers and the current one
            producer.send(f"m-{i}".encode() * (1 + i % 7), properties={"i": str(i)}, partition_key=f"k{i % 3}")
        producer.close()
        before = read_all(client, full, 100)
        producer = client.create_producer(own, batching_enabled=False)
        for i in range(50):  # 2 sealed ledgers
            producer.send(f"own-{i}".encode())
        producer.close()
        for name in (full, own):
            assert http("PUT", f"{broker.admin_url}/admin/v2/persistent/{NS}/{name.rsplit('/', 1)[1]}/unload")[0] == 204
        assert cli(broker, capsys, "topics", "get-offload-policies", own) is None
        cli(broker, capsys, "topics", "set-offload-policies", own, "-d", "filesystem", "-oat", "-2")  # not by size
        assert cli(broker, capsys, "topics", "get-offload-policies", own)["managedLedgerOffloadThresholdInBytes"] == -2

        assert cli(broker, capsys, "namespaces", "get-offload-threshold", NS) == {
            "offloadThresholdInBytes": -1, "offloadThresholdInSeconds": -1}
        assert http("GET", ns_url(broker, "offloadDeletionLagMs"))[0] == 204
        assert http("GET", ns_url(broker, "offloadPolicies"))[0] == 204
        cli(broker, capsys, "namespaces", "set-offload-deletion-lag", NS, "-l", "1h")
        assert http("GET", ns_url(broker, "offloadDeletionLagMs")) == (200, 3_600_000)
        cli(broker, capsys, "namespaces", "set-offload-threshold", NS, "-s", "0")
        wait_until(lambda: len(list(files.glob("*.parquet"))) == 4 and (files / "_manifests").exists()
                   and len(list((files / "_manifests").glob("*.json"))) == 4)
        wait_until(lambda: metrics(broker.admin_url).get("velamq_storage_offload_ledgers_total") == 4)
        assert metrics(broker.admin_url)["velamq_topics_loaded"] == 0  # offloaded without loading it
        assert not list(own_files.glob("*.parquet"))  # its own policy over the namespace's
        cli(broker, capsys, "namespaces", "clear-offload-deletion-lag", NS)  # the broker's lag: 0
        wait_until(lambda: metrics(broker.admin_url).get("velamq_storage_offload_local_deleted_total") == 4)
        assert cli(broker, capsys, "namespaces", "get-offload-threshold", NS)["offloadThresholdInBytes"] == 0
        cli(broker, capsys, "topics", "remove-offload-policies", own)  # now the namespace's applies
        wait_until(lambda: len(list(own_files.glob("*.parquet"))) == 2)

        # offloadPolicies: the threshold set alone is one setting with its field.
        cli(broker, capsys, "namespaces", "set-offload-policies", NS, "-d", "filesystem", "-oat", "10M", "-oae", "2h")
        policies = cli(broker, capsys, "namespaces", "get-offload-policies", NS)
        assert policies["managedLedgerOffloadDriver"] == "filesystem"
        assert policies["managedLedgerOffloadThresholdInBytes"] == 10 << 20
        assert policies["managedLedgerOffloadDeletionLagInMillis"] == 7_200_000
        assert http("GET", ns_url(broker, "offloadThreshold")) == (200, 10 << 20)
        assert http("PUT", ns_url(broker, "offloadThreshold"), 1024)[0] == 204
        assert cli(broker, capsys, "namespaces", "get-offload-policies", NS)[
            "managedLedgerOffloadThresholdInBytes"] == 1024
        status, body = http("POST", ns_url(broker, "offloadPolicies"), {
            "managedLedgerOffloadDriver": "aws-s3", "managedLedgerOffloadBucket": "b",
            "managedLedgerOffloadRegion": "us-east-1"})
        assert status == 412 and "filesystem driver" in str(body), body
        status, body = http("POST", ns_url(broker, "offloadPolicies"), {"managedLedgerOffloadDriver": "tape"})
        assert status == 412 and "driver is not supported" in str(body), body
        status, body = http("POST", ns_url(broker, "offloadPolicies"), {"managedLedgerOffloadDriver": "aws-s3"})
        assert status == 412 and "bucket must be specified" in str(body), body
        cli(broker, capsys, "namespaces", "remove-offload-policies", NS)
        assert http("GET", ns_url(broker, "offloadPolicies"))[0] == 204
        assert http("PUT", ns_url(broker, "offloadThreshold"), "many")[0] == 400
        assert http("GET", f"{broker.admin_url}/admin/v2/namespaces/public/none/offloadThreshold")[0] == 404
    with run_broker(tmp_path / "data", config_file=conf) as broker:  # every cache empty
        client = make_client(broker.service_url)
        assert read_all(client, full, 100) == before
        assert metrics(broker.admin_url)["velamq_storage_offload_row_groups_read_total"] >= 4
        flags = [ledger["offloaded"] for ledger in
                 http("GET", f"{broker.admin_url}/admin/v2/persistent/{NS}/{topic}-b/internalStats")[1]["ledgers"]]
        assert flags == [True, True, True, True, False]
