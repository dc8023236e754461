"""Durability and recovery: reopen, torn tails, corrupt sealed ledgers, lost index files (ME-6)."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pytest
from _storage_testing import TOPIC, payload, run, started
from hypothesis import given, settings
from hypothesis import strategies as st

from velamq import CorruptEntryError
from velamq.storage import Position


def ledger_dir(data_dir: Path) -> Path:
    (only,) = (data_dir / "ledgers").iterdir()
    return only


def log_file(data_dir: Path, ledger_id: int) -> Path:
    return ledger_dir(data_dir) / f"{ledger_id:020d}.log"


async def write_entries(data_dir: Path, sizes: list[int], **kwargs: int) -> list[Position]:
    async with started(data_dir, **kwargs) as storage:
        ml = await storage.open_ledger(TOPIC)
        return [await ml.append(payload(i, size)) for i, size in enumerate(sizes)]


async def read_all(data_dir: Path, **kwargs: int) -> list[tuple[Position, bytes]]:
    async with started(data_dir, **kwargs) as storage:
        ml = await storage.open_ledger(TOPIC)
        return [(e.position, e.data) for e in await ml.read_entries(Position(0, 0), 1_000_000)]


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
    sizes=st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=25),
    entries_per_ledger=st.sampled_from([4, 1000]),
    damage=st.sampled_from(["truncate", "garble", "zeros"]),
    where=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
@settings(max_examples=60, deadline=None)
def test_torn_tail_is_truncated_and_appends_continue(
    sizes: list[int], entries_per_ledger: int, damage: str, where: float
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        positions = run(write_entries(data_dir, sizes, ledger_entries_max=entries_per_ledger))
        last_ledger = positions[-1].ledger_id
        path = log_file(data_dir, last_ledger)
        in_last = [i for i, p in enumerate(positions) if p.ledger_id == last_ledger]
        ends: list[int] = []  # end offset of each record of the last ledger (after a 32-byte header)
        for i in in_last:
            ends.append((ends[-1] if ends else 32) + 8 + len(payload(i, sizes[i])))
        file_bytes = ends[-1]
        assert path.stat().st_size == file_bytes
        cut = 32 + int(where * (file_bytes - 32))
        raw = bytearray(path.read_bytes())
        if damage == "truncate":
            del raw[cut:]
        elif damage == "garble":
            raw[cut] ^= 0x5A
        else:  # the file system grew the file but the data never arrived
            raw += bytes(1 + cut % 64)
            cut = file_bytes
        path.write_bytes(raw)
        # Every record that ends at or before the damage survives; the rest of that ledger is gone.
        survivors = in_last[: sum(1 for end in ends if end <= cut)]
        expected = [(positions[i], payload(i, sizes[i])) for i in range(in_last[0])]
        expected += [(positions[i], payload(i, sizes[i])) for i in survivors]

        assert run(read_all(data_dir, ledger_entries_max=entries_per_ledger)) == expected
        assert path.stat().st_size == (ends[len(survivors) - 1] if survivors else 32)

        async def append_more() -> Position:
            async with started(data_dir, ledger_entries_max=entries_per_ledger) as storage:
                ml = await storage.open_ledger(TOPIC)
                return await ml.append(b"after the crash")

        pos = run(append_more())
        if len(survivors) < entries_per_ledger:
            assert pos == Position(last_ledger, len(survivors))  # dense ids, in the same ledger
        else:
            assert pos.ledger_id > last_ledger and pos.entry_id == 0  # that ledger was full
        assert run(read_all(data_dir))[-1] == (pos, b"after the crash")
        assert len(run(read_all(data_dir))) == len(expected) + 1


def test_truncation_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    positions = run(write_entries(tmp_path, [10, 10, 10]))
    path = log_file(tmp_path, positions[0].ledger_id)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 3)
    with caplog.at_level(logging.WARNING, logger="velamq.storage"):
        assert len(run(read_all(tmp_path))) == 2
    assert any("torn or corrupt tail" in r.getMessage() for r in caplog.records)


def test_corrupt_record_in_a_sealed_ledger_raises_on_read(tmp_path: Path) -> None:
    positions = run(write_entries(tmp_path, [50] * 12, ledger_entries_max=4))
    sealed = positions[4].ledger_id  # the middle ledger: entries 4..7
    path = log_file(tmp_path, sealed)
    raw = bytearray(path.read_bytes())
    raw[32 + 2 * 58 + 8 + 10] ^= 0xFF  # inside the data of its entry 2
    path.write_bytes(raw)

    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=4) as storage:
            ml = await storage.open_ledger(TOPIC)
            assert ml.entries_total == 12  # a sealed ledger is not scanned, nothing is dropped
            assert len(await ml.read_entries(Position(sealed, 0), 2)) == 2
            with pytest.raises(CorruptEntryError) as info:
                await ml.read_entries(Position(sealed, 0), 4)
            assert f"ledger {sealed}" in str(info.value) and "entry 2" in str(info.value)
            with pytest.raises(CorruptEntryError):
                await ml.read_entries(positions[0], 100)
            assert [e.position for e in await ml.read_entries(Position(sealed, 3), 100)] == positions[7:]

    run(main())


def test_lost_or_damaged_index_files_are_rebuilt(tmp_path: Path) -> None:
    sizes = [20] * 10
    positions = run(write_entries(tmp_path, sizes, ledger_entries_max=3))
    ids = sorted({p.ledger_id for p in positions})
    directory = ledger_dir(tmp_path)
    (directory / f"{ids[0]:020d}.idx").unlink()
    damaged = directory / f"{ids[1]:020d}.idx"
    # A copy of another ledger's index does not verify for this one.
    (directory / f"{ids[2]:020d}.idx").write_bytes(damaged.read_bytes())
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"\x00")
    expected = [(p, payload(i, 20)) for i, p in enumerate(positions)]
    assert run(read_all(tmp_path, ledger_entries_max=3)) == expected
    assert (directory / f"{ids[0]:020d}.idx").exists()


def test_crash_between_seal_and_next_ledger_starts_a_new_one(tmp_path: Path) -> None:
    positions = run(write_entries(tmp_path, [5] * 7, ledger_entries_max=3))
    newest = positions[-1].ledger_id
    # As if the crash came right after the seal, before the newest ledger's file existed (its
    # one append never resolved): the newest ledger on disk is now sealed.
    log_file(tmp_path, newest).unlink()
    expected = [(p, payload(i, 5)) for i, p in enumerate(positions[:6])]
    assert run(read_all(tmp_path, ledger_entries_max=3)) == expected

    async def append_one() -> Position:
        async with started(tmp_path, ledger_entries_max=3) as storage:
            ml = await storage.open_ledger(TOPIC)
            return await ml.append(b"x")

    pos = run(append_one())
    # The persisted counter never hands out an id twice, even one whose file is gone.
    assert pos.ledger_id > newest and pos.entry_id == 0
    # Without the counter file, ids still stay above every ledger on disk.
    (tmp_path / "ledger_id_next").unlink()
    assert run(append_one()) == Position(pos.ledger_id, 1)

    async def new_topic() -> int:
        async with started(tmp_path) as storage:
            return (await storage.open_ledger(TOPIC + "-2")).current_ledger_id

    assert run(new_topic()) > pos.ledger_id


def test_empty_topic_reopens_empty(tmp_path: Path) -> None:
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
            files = sorted(os.listdir(ledger_dir(tmp_path)))
            assert files == sorted(["cursors", f"{ledger_id:020d}.log", "name"])

    run(main())
