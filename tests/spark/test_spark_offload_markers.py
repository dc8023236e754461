"""The Spark source's offloaded path skips the broker's replicated-subscription markers (RP-10), as
the broker path does (the broker never delivers them): a ledger file written by the offloader with
a marker between two messages yields the two messages only. No Spark session: the task's reader
runs on its own, over a real Parquet file."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs  # type: ignore[import-untyped]

from velamq.broker.log._offload_rows import PulsarEntryRows
from velamq.protocol import build_entry, pb
from velamq.replication._markers import request_entry, update_entry
from velamq.spark._offloaded import OffloadedRange, ledger_file, read_task
from velamq.spark._offsets import PartitionOffset
from velamq.spark._read import ReadSettings, TopicRange
from velamq.storage.offload._parquet import LedgerFileWriter, WriteLimits

TOPIC = "persistent://public/geo/with-markers"


def _message(producer: str, sequence_id: int, value: bytes) -> bytes:
    return build_entry(pb.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1), value)


def test_markers_in_an_offloaded_ledger_are_not_rows(tmp_path: Path) -> None:
    root = str(tmp_path / "tier")
    path = ledger_file(root, TOPIC, 7)
    fs = pafs.LocalFileSystem()
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    writer = LedgerFileWriter(fs, path, ledger_id=7, topic=TOPIC, partition=-1, limits=WriteLimits(),
                              codec=PulsarEntryRows())
    writer.add([(0, _message("app", 0, b"first")), (1, request_entry("snap", "east")),
                (2, _message("pulsar.marker", 5, b"a producer so named, not a marker")),
                (3, update_entry("sub", {"west": (3, 4)})), (4, _message("app", 1, b"last"))])
    writer.close()
    settings = ReadSettings(service_url="pulsar://unused:6650", admin_url="http://unused:8080",
                            fail_on_data_loss=True, include_properties=False)
    whole = TopicRange(TOPIC, -1, TOPIC, PartitionOffset(7, -1, -1), PartitionOffset(7, 4, -1), settings)
    batches = list(read_task(OffloadedRange(whole, 7, root)))
    values = [v for batch in batches for v in batch.column(batch.schema.get_field_index("value")).to_pylist()]
    assert values == [b"first", b"a producer so named, not a marker", b"last"]
