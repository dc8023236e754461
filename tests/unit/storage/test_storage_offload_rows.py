"""Stored entries as Parquet rows and back (velamq/broker/log/_offload_rows, storage/offload/_parquet):
byte for byte (TS-1, TS-4)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from _offload_entries import CODECS, ROWS, batch_entry, chunk_entries, encrypted_entry, mixed_entries, single_entry

from velamq._errors import StorageError
from velamq.broker.log._offload_rows import add_entry
from velamq.protocol import pb
from velamq.storage import RowColumns
from velamq.storage.offload._parquet import LedgerFileWriter, WriteLimits, read_row_group


def write(path: Path, entries: list[bytes], limits: WriteLimits) -> list[tuple[int, bytes]]:
    fs = pafs.LocalFileSystem()
    writer = LedgerFileWriter(fs, str(path), ledger_id=9, topic="persistent://t/n/x-partition-2", partition=2,
                              limits=limits, codec=ROWS)
    writer.add(list(enumerate(entries))[:3])
    writer.add(list(enumerate(entries))[3:])
    writer.close()
    got: list[tuple[int, bytes]] = []
    for index in range(len(writer.groups)):
        got += read_row_group(fs, str(path), index, ROWS)
    return got


@pytest.mark.parametrize("rows", [1, 5, 1000])
def test_every_kind_of_entry_comes_back_byte_for_byte(tmp_path: Path, rows: int) -> None:
    entries = mixed_entries(60)
    got = write(tmp_path / "l.parquet", entries, WriteLimits(row_group_rows=rows))
    assert [entry_id for entry_id, _ in got] == list(range(len(entries)))
    assert [data for _, data in got] == entries


def test_the_columns_hold_the_messages_as_published(tmp_path: Path) -> None:
    entries = [batch_entry(4, codec=pb.ZSTD, seq=100), single_entry(b"lone", codec=pb.LZ4, seq=5),
               encrypted_entry(b"\x00secret"), *chunk_entries(b"abcdefghij", 2)]
    write(tmp_path / "l.parquet", entries, WriteLimits())
    table = pq.read_table(tmp_path / "l.parquet")
    rows = table.to_pylist()
    assert table.num_rows == 4 + 1 + 1 + 2
    assert {r["ledger_id"] for r in rows} == {9} and {r["partition"] for r in rows} == {2}
    batch = rows[:4]
    assert [(r["entry_id"], r["batch_index"], r["batch_size"]) for r in batch] == [(0, i, 4) for i in range(4)]
    assert [r["value"] for r in batch] == [f"m-{100 + i}-".encode() * 3 for i in range(4)]
    assert [r["key"] for r in batch] == [None, "key-1", None, "key-3"]
    assert [r["properties"] for r in batch] == [[("i", str(i))] for i in range(4)]
    assert [r["sequence_id"] for r in batch] == [100, 101, 102, 103]
    assert batch[0]["event_time"].timestamp() == 1.0 and batch[0]["producer_name"] == "producer-a"
    assert batch[0]["entry_metadata"] is not None and batch[1]["entry_metadata"] is None
    lone = rows[4]
    assert (lone["batch_index"], lone["value"], lone["key"], lone["ordering_key"], lone["schema_version"]) == (
        -1, b"lone", "single", b"order", b"\x00\x01")
    secret = rows[5]
    assert secret["encrypted"] and secret["value"] == b"\x00secret"
    assert secret["encryption_keys"] == [{"key": "client-key", "value": b"\x01\x02wrapped"}]
    assert [(r["chunk_uuid"], r["chunk_id"], r["num_chunks"], r["value"]) for r in rows[6:]] == [
        ("producer-d-9", 0, 2, b"abcde"), ("producer-d-9", 1, 2, b"fghij")]
    assert table.column("entry_payload").null_count == table.num_rows  # every rebuild was exact
    assert pq.read_schema(tmp_path / "l.parquet").metadata[b"velamq.topic"] == b"persistent://t/n/x-partition-2"


def test_a_payload_that_does_not_rebuild_exactly_is_kept_as_stored() -> None:
    # zlib at another level than ours: decompresses to the same batch, compresses differently.
    import zlib

    from velamq.protocol import build_batch, build_entry

    single = pb.SingleMessageMetadata(sequence_id=1)
    plain = build_batch([(single, b"x" * 300)])
    other = zlib.compress(plain, 1)
    assert other != zlib.compress(plain)
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=1,
                                  compression=pb.ZLIB, uncompressed_size=len(plain))
    entry = build_entry(metadata, other)
    rows = RowColumns(-1)
    add_entry(rows, 1, 0, entry)
    assert rows.messages["value"] == [b"x" * 300] and rows.messages["entry_payload"] == [other]


@pytest.mark.parametrize("codec", CODECS)
def test_each_codec_rebuilds_without_keeping_the_payload(codec: int) -> None:
    rows = RowColumns(-1)
    add_entry(rows, 1, 0, batch_entry(9, codec=codec))
    add_entry(rows, 1, 1, single_entry(b"v" * 500, codec=codec))
    assert rows.messages["entry_payload"] == [None] * 10


def test_an_entry_that_is_not_a_message_is_refused() -> None:
    with pytest.raises(StorageError, match="cannot offload"):
        add_entry(RowColumns(-1), 1, 0, b"\x0e\x01garbage-entry")

