"""The aws-s3 offload driver through a real broker (TS-6): Pulsar's s3ManagedLedgerOffload* keys,
credentials from the environment as the AWS SDK takes them, moto's S3 server started by the test;
the official client reads across offloaded and local ledgers, after a restart, what it read before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from offload_helpers import NS, internal_stats, offload_conf, read_all, wait_offloaded
from s3_server import CREDENTIALS, REGION, s3_server

from velamq.testing import run_broker

pytestmark = pytest.mark.timeout(240)

BUCKET = "velamq-tier"


def test_threshold_offload_to_s3_reads_back_the_same(tmp_path: Path, topic: str, make_client: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)  # the broker process inherits them
    full = f"{NS}/{topic}"
    with s3_server() as server:
        server.create_bucket(BUCKET)
        conf = offload_conf(tmp_path, managedLedgerOffloadDriver="aws-s3", s3ManagedLedgerOffloadBucket=BUCKET,
                            s3ManagedLedgerOffloadServiceEndpoint=server.endpoint,
                            s3ManagedLedgerOffloadRegion=REGION, managedLedgerOffloadThresholdInBytes=0)
        with run_broker(tmp_path / "data", config_file=conf) as broker:
            client = make_client(broker.service_url)
            producer = client.create_producer(full, batching_enabled=True, batching_max_messages=7,
                                              batching_max_publish_delay_ms=10)
            for i in range(300):
                producer.send_async(f"s3-{i}".encode(), None, properties={"i": str(i)}, partition_key=f"k{i % 4}")
            producer.flush()
            before = read_all(client, full, 300)
            sealed = len(internal_stats(broker, topic)["ledgers"]) - 1
            assert sealed >= 2
            wait_offloaded(broker, topic, sealed)
        with run_broker(tmp_path / "data", config_file=conf) as broker:
            assert read_all(make_client(broker.service_url), full, 300) == before
        keys = server.keys(BUCKET)
    assert sum(k.endswith(".parquet") for k in keys) == sealed
