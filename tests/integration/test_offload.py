"""Tiered storage with the filesystem driver, through a real broker and the official client
(TS-1 to TS-5): offload by an admin call and by threshold, the local copies deleted after the lag,
then consumers and readers from earliest read across offloaded and local ledgers exactly what a
reader saw before the offload (ids, bytes, keys, properties, event and publish times), after a
restart that empties every cache; an encrypted topic and a chunked message survive; pyarrow reads
the files with no velamq code; kill -9 during an offload leaves the ledgers local and readable and
the offload is done again after the restart; compaction reads offloaded ledgers."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pulsar
import pyarrow.dataset as ds
import pytest
from interop_helpers import read_to_end
from limits_helpers import http, metrics
from offload_helpers import (
    NS,
    consume_all,
    internal_stats,
    offload_conf,
    offload_status,
    read_all,
    rsa_key_files,
    seen,
    wait_offloaded,
)
from wait_helpers import wait_until

from velamq.storage.offload._store import topic_dir
from velamq.testing import run_broker

pytestmark = pytest.mark.timeout(240)


def produce_mixed(client: Any, topic: str) -> int:
    """60 unbatched messages with keys, properties and event times, then 150 in LZ4 batches."""
    plain = client.create_producer(topic, batching_enabled=False)
    for i in range(60):
        plain.send(f"plain-{i}".encode() * (1 + i % 4), properties={"i": str(i)}, partition_key=f"k{i % 5}",
                   event_timestamp=1_000 + i)
    batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                     batching_max_publish_delay_ms=20, compression_type=pulsar.CompressionType.LZ4)
    for i in range(150):
        batched.send_async(f"batched-{i}".encode(), None, properties={"b": str(i)},
                           partition_key=f"key-{i % 3}" if i % 2 else None)
    batched.flush()
    plain.close()
    batched.close()
    return 210


def test_offload_by_admin_call_then_everything_reads_back_as_published(tmp_path: Path, topic: str,
                                                                        make_client: Any) -> None:
    full = f"{NS}/{topic}"
    conf = offload_conf(tmp_path)
    with run_broker(tmp_path / "data", config_file=conf) as broker:
        client = make_client(broker.service_url)
        count = produce_mixed(client, full)
        before = read_all(client, full, count)
        assert offload_status(broker, topic)["status"] == "NOT_RUN"
        ledgers = internal_stats(broker, topic)["ledgers"]
        current = ledgers[-1]["ledgerId"]
        url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/offload"
        assert http("PUT", url, {"ledgerId": current, "entryId": 0, "partitionIndex": -1})[0] == 204
        wait_until(lambda: offload_status(broker, topic)["status"] == "SUCCESS")
        status = offload_status(broker, topic)
        assert status["lastError"] == "" and status["firstUnoffloadedMessage"]["ledgerId"] == current
        wait_offloaded(broker, topic, len(ledgers) - 1)
        flags = [ledger["offloaded"] for ledger in internal_stats(broker, topic)["ledgers"]]
        assert flags == [True] * (len(ledgers) - 1) + [False]
        assert http("PUT", url, {"entryId": 0})[0] == 400
    with run_broker(tmp_path / "data", config_file=conf) as broker:  # every cache empty
        client = make_client(broker.service_url)
        assert read_all(client, full, count) == before
        assert metrics(broker.admin_url)["velamq_storage_offload_row_groups_read_total"] >= len(ledgers) - 1
        assert consume_all(client, full, count, "after-offload") == before
        # A reader that starts in the middle of an offloaded ledger, at a batched message.
        middle = before[100][0]
        reader = client.create_reader(full, pulsar.MessageId(-1, middle[0], middle[1], middle[2]),
                                      start_message_id_inclusive=True)
        assert reader.read_next(20_000).data() == before[100][1]
        # A seek by publish time lands in an offloaded ledger.
        reader.seek(before[30][5])
        assert seen(reader.read_next(20_000))[5] >= before[30][5]
        reader.close()
        # The admin API's get-message-by-id reads an offloaded entry (an unbatched one: its payload).
        first = before[0][0]
        url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/ledger/{first[0]}/entry/{first[1]}"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.read() == before[0][1]
    table = ds.dataset(str(tmp_path / "tier" / topic_dir(full)), format="parquet").to_table()
    offloaded_rows = [row for row in before if row[0][0] != current]
    assert table.num_rows == len(offloaded_rows)
    assert sorted(table.column("value").to_pylist()) == sorted(row[1] for row in offloaded_rows)


def test_threshold_offload_of_an_encrypted_topic_and_a_chunked_message(tmp_path: Path, topic: str,
                                                                       make_client: Any) -> None:
    full = f"{NS}/{topic}"
    public, private = rsa_key_files(tmp_path)
    keys = pulsar.CryptoKeyReader(str(public), str(private))
    conf = offload_conf(tmp_path, managedLedgerOffloadThresholdInBytes=0, maxMessageSize=65536,
                        managedLedgerMaxEntriesPerLedger=4)
    big = bytes(range(256)) * 800  # 204 800 bytes: chunked into 4 by a producer limited to 64 KiB
    with run_broker(tmp_path / "data", config_file=conf) as broker:
        client = make_client(broker.service_url)
        secret = client.create_producer(full, encryption_key="offload-key", crypto_key_reader=keys,
                                        batching_enabled=False)
        for i in range(10):
            secret.send(f"secret-{i}".encode(), properties={"i": str(i)})
        chunker = client.create_producer(full, chunking_enabled=True, batching_enabled=False)
        chunker.send(big, partition_key="big")
        for i in range(8):
            chunker.send(f"after-{i}".encode())
        count = 10 + 1 + 8
        before = read_all(client, full, count, crypto_key_reader=keys)
        sealed = len(internal_stats(broker, topic)["ledgers"]) - 1
        wait_offloaded(broker, topic, sealed)
    with run_broker(tmp_path / "data", config_file=conf) as broker:
        client = make_client(broker.service_url)
        after = consume_all(client, full, count, "decrypting", crypto_key_reader=keys)
        assert after == before
        assert [row[1] for row in after[:10]] == [f"secret-{i}".encode() for i in range(10)]
        assert after[10][1] == big and after[10][2] == "big"
    table = ds.dataset(str(tmp_path / "tier" / topic_dir(full)), format="parquet").to_table()
    encrypted = table.filter(ds.field("encrypted")).to_pylist()
    assert len(encrypted) == 10 and all(b"secret" not in row["value"] for row in encrypted)
    assert {row["encryption_keys"][0]["key"] for row in encrypted} == {"offload-key"}
    chunks = table.filter(ds.field("num_chunks") > 0).to_pylist()
    assert b"".join(row["value"] for row in sorted(chunks, key=lambda r: r["chunk_id"])) == big


def test_kill_9_during_an_offload_leaves_ledgers_local_and_it_is_done_again(tmp_path: Path, topic: str,
                                                                           make_client: Any) -> None:
    full = f"{NS}/{topic}"
    asked = offload_conf(tmp_path, managedLedgerMaxEntriesPerLedger=5)
    with run_broker(tmp_path / "data", config_file=asked) as broker:
        client = make_client(broker.service_url)
        producer = client.create_producer(full, batching_enabled=False)
        for i in range(400):
            producer.send_async(b"kill-%d-" % i * 200, None)
        producer.flush()
        count = 400
        before = read_all(client, full, count)
        out = subprocess.run(
            [sys.executable, "-m", "velamq", "admin", "--admin-url", broker.admin_url, "topics", "offload", "-s", "0",
             full], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "Offload triggered" in out.stdout, out.stdout + out.stderr
        broker.kill()  # mid-offload: 79 ledgers to write
        by_threshold = offload_conf(tmp_path, managedLedgerMaxEntriesPerLedger=5,
                                    managedLedgerOffloadThresholdInBytes=0)
        broker.extra_args = ["--config", str(by_threshold)]
        broker.start()
        client = make_client(broker.service_url)
        assert read_all(client, full, count) == before  # local, or offloaded and complete
        ledgers = internal_stats(broker, topic)["ledgers"]
        wait_offloaded(broker, topic, len(ledgers) - 1, local_deleted=False)  # some may have gone before
        assert offload_status(broker, topic)["status"] == "SUCCESS"
        status = subprocess.run(
            [sys.executable, "-m", "velamq", "admin", "--admin-url", broker.admin_url, "topics", "offload-status",
             "-w", full, "--json"], capture_output=True, text=True, timeout=60)
        assert '"SUCCESS"' in status.stdout, status.stdout + status.stderr
    with run_broker(tmp_path / "data", config_file=asked) as broker:
        assert read_all(make_client(broker.service_url), full, count) == before
    # One file per sealed ledger, each whole: what was cut short was written again, not added to.
    table = ds.dataset(str(tmp_path / "tier" / topic_dir(full)), format="parquet").to_table(columns=["entry_id"])
    assert table.num_rows == sum(ledger["entries"] for ledger in ledgers[:-1])


def test_compaction_reads_offloaded_ledgers(tmp_path: Path, topic: str, make_client: Any) -> None:
    full = f"{NS}/{topic}"
    conf = offload_conf(tmp_path, managedLedgerOffloadThresholdInBytes=0, managedLedgerMaxEntriesPerLedger=5)
    with run_broker(tmp_path / "data", config_file=conf) as broker:
        client = make_client(broker.service_url)
        producer = client.create_producer(full, batching_enabled=False)
        for i in range(60):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 7}")
        producer.send(b"", partition_key="k0")  # a tombstone: k0 is gone after compaction
        ledgers = internal_stats(broker, topic)["ledgers"]
        wait_offloaded(broker, topic, len(ledgers) - 1)  # every value but the newest few offloaded
        url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/compaction"
        assert http("PUT", url)[0] == 204
        wait_until(lambda: http("GET", url)[1]["status"] == "SUCCESS")
        assert metrics(broker.admin_url)["velamq_storage_offload_row_groups_read_total"] >= len(ledgers) - 1
        reader = client.create_reader(full, pulsar.MessageId.earliest, is_read_compacted=True)
        latest = {message.partition_key(): message.data() for message in read_to_end(reader)}
        reader.close()
    assert latest == {f"k{k}": f"v{max(i for i in range(60) if i % 7 == k)}".encode() for k in range(1, 7)}
