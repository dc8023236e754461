"""Durability and recovery of the entry logs and their index: reopen, torn and stray log bytes,
corrupt records, ids never reused, no file per topic (ME-6)."""

from __future__ import annotations

import itertools
import logging
import os
import struct
import tempfile
from pathlib import Path

import pytest
from _storage_testing import NEVER_MS, TOPIC, payload, run, snapshot, started
from hypothesis import given, settings
from hypothesis import strategies as st

from velamq import CorruptEntryError
from velamq.storage import Position
from velamq.storage._layout import crc_of
from velamq.storage.formats._entry_log import LOG_HEADER_BYTES, encode_log_header, record_header
from velamq.storage.index._storage_db import StorageDb

RECORD = 28  # bytes of a record header in the journal and the entry logs


async def write_entries(data_dir: Path, sizes: list[int], **kwargs: int) -> list[Position]:
    async with started(data_dir, **kwargs) as storage:
        ml = await storage.open_ledger(TOPIC)
        return [await ml.append(payload(i, size)) for i, size in enumerate(sizes)]


async def read_all(data_dir: Path, **kwargs: int) -> list[tuple[Position, bytes]]:
    async with started(data_dir, **kwargs) as storage:
        ml = await storage.open_ledger(TOPIC)
        return [(e.position, e.data) for e in await ml.read_entries(Position(0, 0), 1_000_000)]


def only_log(data_dir: Path) -> Path:
    (log,) = (data_dir / "logs").iterdir()
    return log


def test_append_close_reopen_reads_everything_back(tmp_path: Path) -> None:
    sizes = [1 + (i * 37) % 900 for i in range(300)]

    async def main() -> None:
        positions = await write_entries(tmp_path, sizes, ledger_entries_max=64)
        assert await read_all(tmp_path) == [
            (p, payload(i, s)) for i, (p, s) in enumerate(zip(positions, sizes, strict=True))
        ]
        async with started(tmp_path, sync_policy="fsync", ledger_entries_max=64) as storage:
            ml = await storage.open_ledger(TOPIC)
            assert ml.last_confirmed == positions[-1]
            assert ml.entries_total == 300
            # The newest ledger was not full: appending continues in it.
            assert await ml.append(b"next") == Position(positions[-1].ledger_id, positions[-1].entry_id + 1)

    run(main())


@given(
    before=st.lists(st.integers(min_value=1, max_value=300), min_size=0, max_size=20),
    after=st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=20),
    entries_per_ledger=st.sampled_from([3, 1000]),
    damage=st.sampled_from(["torn", "garbled", "zeros", "stray log"]),
    where=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
@settings(max_examples=50, deadline=None)
def test_a_flush_cut_short_leaves_only_garbage_and_the_journal_refills_it(
    before: list[int], after: list[int], entries_per_ledger: int, damage: str, where: float
) -> None:
    """A crash between writing the entry log and committing the index: whatever the flush wrote
    past the committed length (torn, garbled, zeros, or a new log it rolled to) is cut off or
    removed, and the journal replays those entries: every append that resolved is there, once."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir, crash = Path(tmp) / "data", Path(tmp) / "crash"

        async def append_and_crash() -> list[Position]:
            async with started(data_dir, flush_interval_ms=NEVER_MS, ledger_entries_max=entries_per_ledger) as s:
                ml = await s.open_ledger(TOPIC)
                positions = [await ml.append(payload(i, n)) for i, n in enumerate(before)]
                await s.flush()  # committed
                positions += [await ml.append(payload(len(before) + i, n)) for i, n in enumerate(after)]
                snapshot(data_dir, crash)  # the rest is in the journal only
                return positions

        positions = run(append_and_crash())
        sizes = before + after
        logs = crash / "logs"
        committed = {p.name: p.stat().st_size for p in logs.iterdir()}
        # What the flush of `after` would have written (the records, back to back).
        ledger_ids = [p.ledger_id for p in positions[len(before) :]]
        entry_ids = [p.entry_id for p in positions[len(before) :]]
        written = b"".join(
            record_header(lid, eid, d, crc_of(d)) + d
            for lid, eid, d in zip(
                ledger_ids, entry_ids, [payload(len(before) + i, n) for i, n in enumerate(after)], strict=True
            )
        )
        cut = int(where * len(written))
        if damage == "stray log":  # the flush had rolled over to a new log, never committed
            (logs / "0000000099.log").write_bytes(encode_log_header(99, 0) + written[:cut])
        elif committed:
            (log,) = logs.iterdir()
            with open(log, "ab") as f:
                if damage == "torn":
                    f.write(written[:cut])
                elif damage == "garbled":
                    f.write(written[:cut] + bytes([written[cut] ^ 0x5A]) + written[cut + 1 :])
                else:
                    f.write(bytes(1 + cut % 4096))  # the file grew, the data never arrived

        assert run(read_all(crash)) == [(p, payload(i, sizes[i])) for i, p in enumerate(positions)]
        assert not (logs / "0000000099.log").exists()
        for name, size in committed.items():  # committed bytes are never touched
            assert (logs / name).stat().st_size >= size
        assert run(read_all(crash)) == [(p, payload(i, sizes[i])) for i, p in enumerate(positions)]


def test_uncommitted_log_bytes_are_cut_off_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run(write_entries(tmp_path, [10, 10, 10]))
    log = only_log(tmp_path)
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b"garbage of a flush that never committed")
    with caplog.at_level(logging.WARNING, logger="velamq.storage"):
        assert len(run(read_all(tmp_path))) == 3
    assert log.stat().st_size == size
    assert any("uncommitted bytes" in r.getMessage() for r in caplog.records)


def test_corrupt_record_in_a_sealed_ledger_raises_on_read(tmp_path: Path) -> None:
    positions = run(write_entries(tmp_path, [50] * 12, ledger_entries_max=4))
    sealed = positions[4].ledger_id  # the middle ledger: entries 4..7
    log = only_log(tmp_path)
    raw = bytearray(log.read_bytes())
    # One flush at close wrote the three ledgers back to back: entry 2 of the middle one is record 6.
    raw[LOG_HEADER_BYTES + 6 * (RECORD + 50) + RECORD + 10] ^= 0xFF  # inside its data
    log.write_bytes(raw)

    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=4) as storage:
            ml = await storage.open_ledger(TOPIC)
            assert ml.entries_total == 12  # nothing is scanned, nothing is dropped
            assert len(await ml.read_entries(Position(sealed, 0), 2)) == 2
            with pytest.raises(CorruptEntryError) as info:
                await ml.read_entries(Position(sealed, 0), 4)
            assert f"ledger {sealed}" in str(info.value) and "entry 2" in str(info.value)
            with pytest.raises(CorruptEntryError):
                await ml.read_entries(positions[0], 100)
            assert [e.position for e in await ml.read_entries(Position(sealed, 3), 100)] == positions[7:]

    run(main())


def test_a_record_where_the_index_expects_another_entry_is_refused(tmp_path: Path) -> None:
    positions = run(write_entries(tmp_path, [20] * 4))
    log = only_log(tmp_path)
    raw = bytearray(log.read_bytes())
    # Rewrite record 1 as if it were entry 7 (its CRCs are valid): the read must not take it.
    at = LOG_HEADER_BYTES + RECORD + 20
    data = bytes(raw[at + RECORD : at + RECORD + 20])
    raw[at : at + RECORD] = record_header(positions[1].ledger_id, 7, data, crc_of(data))
    log.write_bytes(raw)

    async def main() -> None:
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            with pytest.raises(CorruptEntryError, match="entry 1: the record is ledger"):
                await ml.read_entries(positions[0], 4)

    run(main())


def test_ledger_ids_are_never_handed_out_twice(tmp_path: Path) -> None:
    data_dir, crash = tmp_path / "data", tmp_path / "crash"

    async def main() -> list[Position]:
        async with started(data_dir, ledger_entries_max=3) as storage:
            ml = await storage.open_ledger(TOPIC)
            positions = [await ml.append(payload(i, 5)) for i in range(7)]
            await storage.delete_ledger(TOPIC)
        async with started(data_dir, ledger_entries_max=3, flush_interval_ms=NEVER_MS) as storage:
            ml = await storage.open_ledger(TOPIC)  # a new log: its ids come after the deleted one's
            positions.append(await ml.append(b"x"))
            assert positions[-1].ledger_id > positions[-2].ledger_id
            snapshot(data_dir, crash)  # only the journal knows that ledger
        return positions

    positions = run(main())

    async def new_topic(d: Path) -> int:
        async with started(d) as storage:
            return (await storage.open_ledger(TOPIC + "-2")).current_ledger_id

    assert run(new_topic(crash)) > positions[-1].ledger_id  # replay raised the counter
    assert run(new_topic(data_dir)) > positions[-1].ledger_id


def test_an_empty_topic_reopens_empty_and_costs_no_file(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, sync_policy="fsync") as storage:
            ml = await storage.open_ledger(TOPIC)
            ledger_id = ml.current_ledger_id
        async with started(tmp_path, sync_policy="fsync") as storage:
            ml = await storage.open_ledger(TOPIC)
            assert ml.current_ledger_id == ledger_id and ml.last_confirmed is None
            assert ml.ledgers()[0].entries == 0
            assert await ml.read_entries(Position(ledger_id, -1), 10) == []
            assert await ml.append(b"a") == Position(ledger_id, 0)
            for k in range(50):
                await (await storage.open_ledger(f"{TOPIC}-{k}")).append(b"b")
            files = {p.name for p in tmp_path.iterdir()}
            assert files <= {"LOCK", "journal", "logs", "storage.db", "storage.db-wal", "storage.db-shm"}
        assert len(list((tmp_path / "logs").iterdir())) == 1  # 51 topics, one entry log

    run(main())


def test_the_index_holds_one_row_per_run_not_per_entry(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, flush_interval_ms=NEVER_MS) as storage:
            mls = [await storage.open_ledger(f"{TOPIC}-{k}") for k in range(3)]
            for i in range(300):
                await mls[i % 3].append(payload(i))
            await storage.flush()
            for i in range(30):
                await mls[0].append(payload(i))

    run(main())
    db = StorageDb(tmp_path / "storage.db", sync=False)
    try:
        counts = db.counts()
        assert counts["entries"] == 4  # three ledgers in the first flush, one in the second
        runs = sorted(db.runs_in_log(1), key=lambda r: r.offset)
        # Sorted by ledger in the log: each ledger's entries of one flush lie back to back.
        assert [(r.ledger_id, r.count) for r in runs[:3]] == [(r.ledger_id, 100) for r in runs[:3]]
        assert all(a.offset + a.size_bytes == b.offset for a, b in itertools.pairwise(runs[:3]))
        raw = (tmp_path / "logs" / "0000000001.log").read_bytes()
        first = runs[0]
        assert struct.unpack_from("<IIQQ", raw, first.offset)[2:] == (first.ledger_id, 0)
    finally:
        db.close()


def test_a_missing_entry_log_is_reported_on_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    positions = run(write_entries(tmp_path, [10, 10]))
    os.unlink(only_log(tmp_path))

    async def main() -> None:
        with caplog.at_level(logging.ERROR, logger="velamq.storage"):
            async with started(tmp_path) as storage:
                ml = await storage.open_ledger(TOPIC)
                with pytest.raises(Exception, match="gone"):
                    await ml.read_entries(positions[0], 2)
        assert any("file is missing" in r.getMessage() for r in caplog.records)

    run(main())
