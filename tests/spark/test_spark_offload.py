"""The Spark source over a mostly offloaded topic (TS-1, TS-4): with offloadPath, each offloaded
ledger is a task that reads its Parquet file in the executor (no broker read of it), the local tail
comes through the broker, and the DataFrame is exactly what the broker path gives (same message
ids, keys, values, times, properties), for a whole topic and for a range that starts and ends
inside offloaded batches; Spark's own Parquet reader counts what was offloaded."""

from __future__ import annotations

import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import admin, create_partitioned, produce, source_options
from wait_helpers import wait_until

from velamq.storage.offload._store import topic_dir
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(600)

COLUMNS = ["key", "value", "topic", "partition", "messageId", "publishTime", "eventTime", "properties"]


def metric(broker: BrokerProcess, name: str) -> float:
    text = urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def row_groups_read(broker: BrokerProcess) -> float:
    return metric(broker, "velamq_storage_offload_row_groups_read_total")


def offloaded(broker: BrokerProcess, partition: str) -> list[dict[str, Any]]:
    stats = admin(broker.admin_url, "GET", f"/admin/v2/persistent/public/default/{partition}/internalStats")
    return [ledger for ledger in stats["ledgers"] if ledger["offloaded"]]


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] if c != "properties" else sorted((r[c] or {}).items()) for c in COLUMNS)
                  for r in df.collect())


def test_offloaded_ledgers_are_read_from_their_files(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "tier"
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "managedLedgerOffloadDriver=filesystem\n"
        f"fileSystemURI={root}\n"
        "managedLedgerOffloadThresholdInBytes=0\n"
        "managedLedgerOffloadDeletionLagMs=0\n"
        "managedLedgerOffloadCheckIntervalSeconds=0.2\n"
        "managedLedgerMaxEntriesPerLedger=40\n"
        "journalSyncPolicy=none\n"
        "defaultRetentionTimeInMinutes=-1\n"  # keep what no subscription holds
        "defaultRetentionSizeInMB=-1\n"
    )
    topic = f"offloaded-{uuid.uuid4().hex[:8]}"
    n = 20_000
    with run_broker(tmp_path / "data", config_file=conf) as broker:
        create_partitioned(broker.admin_url, topic, 2)
        produce(broker.service_url, topic, range(n), batch=100, properties=True)
        partitions = [f"{topic}-partition-{i}" for i in range(2)]
        for p in partitions:
            wait_until(lambda p=p: len(offloaded(broker, p)) >= 2, timeout_s=120)
        # Every offloaded ledger's local copy gone: a broker read of them reads row groups.
        total = sum(len(offloaded(broker, p)) for p in partitions)
        wait_until(lambda: metric(broker, "velamq_storage_offload_local_deleted_total") >= total, timeout_s=120)
        through_broker = spark.read.format("velamq").options(**source_options(broker, topic=topic)).load()
        expected = rows(through_broker)
        assert len(expected) == n and row_groups_read(broker) > 0
        before = row_groups_read(broker)
        from_files = spark.read.format("velamq").options(
            **source_options(broker, topic=topic, offloadPath=str(root))).load()
        assert from_files.rdd.getNumPartitions() > 2  # a task per offloaded ledger, and the tails
        assert rows(from_files) == expected
        assert row_groups_read(broker) == before  # not one offloaded row group through the broker
        # A range that starts and ends inside offloaded batches (start and end: message ids).
        ledgers = offloaded(broker, partitions[0])
        first, last = ledgers[0], ledgers[-1]
        start = {"ledgerId": first["ledgerId"], "entryId": 3, "batchIndex": 41}
        end = {"ledgerId": last["ledgerId"], "entryId": 5, "batchIndex": 17}
        offsets = {"starting": json.dumps({partitions[0]: start, partitions[1]: "latest"}),
                   "ending": json.dumps({partitions[0]: end, partitions[1]: "latest"})}
        options = {"topic": topic, "startingOffsets": offsets["starting"], "endingOffsets": offsets["ending"]}
        part_broker = rows(spark.read.format("velamq").options(**source_options(broker, **options)).load())
        part_files = rows(spark.read.format("velamq").options(
            **source_options(broker, offloadPath=str(root), **options)).load())
        assert part_files == part_broker and 0 < len(part_files) < n
        offloaded_messages = sum(
            spark.read.parquet(str(root / topic_dir(f"persistent://public/default/{p}"))).count() for p in partitions)
        assert offloaded_messages > n // 2


def test_the_spark_source_serializes_message_ids_as_the_client_does() -> None:
    from velamq.client import MessageId
    from velamq.spark._offloaded import _message_ids

    cases = [(7, -1, 3, 5, 100), (123_456, 2, 99_999, 0, 1), (1, -1, 0, 999, 1000), (9, 3, 4, -1, 0)]
    for ledger_id, partition, entry_id, index, size in cases:
        expected = (MessageId(ledger_id, entry_id, partition, index, size) if index >= 0
                    else MessageId(ledger_id, entry_id, partition)).serialize()
        assert _message_ids(ledger_id, partition, [entry_id], [index], [size]) == [expected]
