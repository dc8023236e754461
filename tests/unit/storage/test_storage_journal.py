"""The shared journal: group commit, sync policies, replay with torn tails, crash at every flush step (ME-6)."""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
from pathlib import Path

import pytest
from _storage_testing import NEVER_MS, TOPIC, payload, read_everything, run, snapshot, started
from hypothesis import given, settings
from hypothesis import strategies as st
from wait_helpers import until

from velamq.storage import Position
from velamq.storage._layout import crc_of
from velamq.storage.formats._journal_file import (
    SEGMENT_HEADER_BYTES,
    JournalLocation,
    SegmentReader,
    decode_checkpoint,
    encode_checkpoint,
    encode_segment_header,
    list_segments,
    record_header,
    segment_name,
)

TOPICS = [f"{TOPIC}-{k}" for k in range(3)]


def test_segment_records_round_trip_and_stop_at_damage(tmp_path: Path) -> None:
    path = tmp_path / segment_name(7)
    datas = [payload(i, 1 + i * 13) for i in range(20)]
    raw = bytearray(encode_segment_header(7))
    starts = []
    for i, data in enumerate(datas):
        starts.append(len(raw))
        raw += record_header(len(data), crc_of(data), 100 + i % 3, i) + data
    path.write_bytes(bytes(raw))
    reader = SegmentReader(path, 7, 0)
    records = list(reader.records())
    assert [(r.ledger_id, r.entry_id, r.data) for r in records] == [(100 + i % 3, i, d) for i, d in enumerate(datas)]
    assert [r.location for r in records] == [JournalLocation(7, s) for s in starts]
    assert reader.valid_end == len(raw) and not reader.torn
    # From an offset on (a checkpoint), and not past a garbled record.
    raw[starts[12] + 30] ^= 1
    path.write_bytes(bytes(raw))
    reader = SegmentReader(path, 7, starts[5])
    assert [r.entry_id for r in reader.records()] == list(range(5, 12))
    assert reader.valid_end == starts[12] and reader.torn
    # A segment whose header belongs to another sequence number is not read at all.
    reader = SegmentReader(path, 8, 0)
    assert list(reader.records()) == [] and not reader.header_ok


def test_checkpoint_round_trip_and_damage() -> None:
    raw = encode_checkpoint(JournalLocation(3, 4096))
    assert decode_checkpoint(raw) == JournalLocation(3, 4096)
    for i in range(len(raw)):
        damaged = bytearray(raw)
        damaged[i] ^= 0x10
        assert decode_checkpoint(bytes(damaged)) is None
    assert decode_checkpoint(raw[:-1]) is None


def test_group_commit_one_fsync_for_many_topics(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, sync_policy="fsync") as storage:
            mls = [await storage.open_ledger(f"{TOPIC}-{k}") for k in range(100)]
            base = storage.metrics()
            await asyncio.gather(*(ml.append(payload(i)) for i, ml in enumerate(mls * 10)))
            m = storage.metrics()
            fsyncs = m["velamq_storage_journal_fsyncs_total"] - base["velamq_storage_journal_fsyncs_total"]
            appends = m["velamq_storage_journal_appends_total"] - base["velamq_storage_journal_appends_total"]
            assert appends == 1000
            assert 1 <= fsyncs <= 20, fsyncs  # one journal: not one fsync per topic
            assert m["velamq_storage_journal_fsync_seconds_total"] > 0
            assert m["velamq_storage_journal_fsync_seconds_max"] > 0

    run(main())


@pytest.mark.parametrize("policy", ["fsync", "interval", "none"])
def test_sync_policies(tmp_path: Path, policy: str) -> None:
    async def main() -> None:
        async with started(tmp_path, sync_policy=policy, sync_interval_ms=50) as storage:
            ml = await storage.open_ledger(TOPIC)
            await ml.open_cursor("sub", "earliest")  # durable: so is the topic's creation before it
            base = storage.metrics()["velamq_storage_journal_fsyncs_total"]

            def fsyncs_now() -> float:
                return storage.metrics()["velamq_storage_journal_fsyncs_total"] - base

            for i in range(100):  # one at a time: each append is a group of its own
                await ml.append(payload(i))
            fsyncs = fsyncs_now()
            if policy == "fsync":
                assert fsyncs == 100
            elif policy == "interval":
                # The idle journal syncs what is left once the interval is over.
                await until(lambda: fsyncs_now() >= 1, "the idle journal syncs")
                assert fsyncs_now() < 100
            else:
                assert fsyncs == 0
        async with started(tmp_path) as storage:
            assert [d for _, d in await read_everything(storage, TOPIC)] == [payload(i) for i in range(100)]

    run(main())


def test_journal_segments_roll_over_and_are_trimmed_after_a_flush(tmp_path: Path) -> None:
    async def main() -> None:
        kwargs = {"journal_segment_bytes": 64 * 1024, "flush_interval_ms": NEVER_MS}
        async with started(tmp_path, **kwargs) as storage:
            ml = await storage.open_ledger(TOPIC)
            for i in range(40):
                await ml.append(payload(i, 10_000))
            journal_dir = tmp_path / "journal"
            assert len(list_segments(journal_dir)) >= 6  # 400 kB in 64 KiB segments
            await storage.flush()
            assert len(list_segments(journal_dir)) == 1  # the current one
            m = storage.metrics()
            assert m["velamq_storage_flush_journal_segments_deleted_total"] >= 5
            assert m["velamq_storage_flush_checkpoints_total"] >= 1
        async with started(tmp_path) as storage:
            assert [d for _, d in await read_everything(storage, TOPIC)] == [payload(i, 10_000) for i in range(40)]

    run(main())


async def _append_and_crash(data_dir: Path, crash_dir: Path, sizes: list[int]) -> list[tuple[int, Position]]:
    """Append to three topics, then take a crash copy before any flush: only the journal has them."""
    async with started(data_dir, flush_interval_ms=NEVER_MS, journal_segment_bytes=64 * 1024) as storage:
        mls = [await storage.open_ledger(name) for name in TOPICS]
        appended = []
        for i, size in enumerate(sizes):
            topic = i % 3
            appended.append((topic, await mls[topic].append(payload(i, size))))
        assert storage.metrics()["velamq_storage_flushes_total"] == 0
        snapshot(data_dir, crash_dir)
    return appended


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=60),
    damage=st.sampled_from(["truncate", "garble", "zeros"]),
    where=st.floats(min_value=0.0, max_value=1.0),
)
@settings(max_examples=40, deadline=None)
def test_replay_keeps_exactly_the_records_before_a_torn_tail(sizes: list[int], damage: str, where: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        crash = Path(tmp) / "crash"
        appended = run(_append_and_crash(Path(tmp) / "data", crash, sizes))
        journal_dir = crash / "journal"
        segments = list_segments(journal_dir)
        newest = journal_dir / segment_name(segments[-1])
        # Where each record of the newest segment ends; records of older segments are all intact.
        ends = {}
        for seq in segments:
            reader = SegmentReader(journal_dir / segment_name(seq), seq, 0)
            for r in reader.records():
                ends[(seq, r.ledger_id, r.entry_id)] = r.location.offset + 28 + len(r.data)
        size = newest.stat().st_size
        cut = SEGMENT_HEADER_BYTES + int(where * (size - SEGMENT_HEADER_BYTES))
        raw = bytearray(newest.read_bytes())
        if damage == "truncate":
            del raw[cut:]
        elif damage == "garble" and cut < size:
            raw[cut] ^= 0x5A
        else:
            raw += bytes(1 + cut % 100)
            cut = size
        newest.write_bytes(bytes(raw))

        def survives(seq: int, end: int) -> bool:
            return seq < segments[-1] or end <= cut

        async def check() -> None:
            async with started(crash) as storage:
                for topic, name in enumerate(TOPICS):
                    got = await read_everything(storage, name)
                    mine = [(i, p) for i, (t, p) in enumerate(appended) if t == topic]
                    kept = []
                    for i, p in mine:
                        seq = next(s for s in segments if (s, p.ledger_id, p.entry_id) in ends)
                        if not survives(seq, ends[(seq, p.ledger_id, p.entry_id)]):
                            break
                        kept.append((p, payload(i, sizes[i])))
                    assert got == kept, name
                    ml = storage.open_ledgers[name]
                    if kept:  # appending continues right after the last survivor
                        assert await ml.append(b"next") == Position(kept[-1][0].ledger_id, kept[-1][0].entry_id + 1)

        run(check())


FLUSH_STEPS = ["logs-written", "logs-synced", "index-committed", "journal-trimmed"]


def test_a_crash_at_every_step_of_the_flush_cycle_loses_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    appended: list[tuple[int, Position, bytes]] = []
    crashes: list[tuple[str, Path]] = []

    async def main() -> None:
        kwargs = {"flush_interval_ms": NEVER_MS, "journal_segment_bytes": 64 * 1024, "ledger_entries_max": 7}
        async with started(data_dir, **kwargs) as storage:
            mls = [await storage.open_ledger(name) for name in TOPICS]
            flusher = storage._threads.flusher
            assert flusher is not None
            for round_ in range(3):
                sizes_before = {log.name: log.stat().st_size for log in (data_dir / "logs").glob("*.log")}

                def hook(step: str, round_: int = round_, sizes_before: dict[str, int] = sizes_before) -> None:
                    crash = tmp_path / f"crash-{round_}-{step}"
                    snapshot(data_dir, crash)
                    crashes.append((step, crash))
                    if step == "logs-written":  # a flush torn mid-write: cut what it wrote short
                        for log in (crash / "logs").glob("*.log"):
                            grown = log.stat().st_size - sizes_before.get(log.name, 32)
                            if grown > 0:
                                with open(log, "r+b") as f:
                                    f.truncate(log.stat().st_size - min(grown, 5))

                flusher.step_hook = None
                for i in range(40):
                    topic = (i * 7 + round_) % 3
                    data = payload(len(appended), 500 + i * 97)
                    appended.append((topic, await mls[topic].append(data), data))
                flusher.step_hook = hook
                await storage.flush()
            flusher.step_hook = None

    run(main())
    assert [s for s, _ in crashes] == FLUSH_STEPS * 3

    for step, crash in crashes:
        round_ = int(crash.name.split("-")[1])
        # Everything appended up to and including this round resolved before the copy was taken.
        confirmed = [(t, p, d) for k, (t, p, d) in enumerate(appended) if k < 40 * (round_ + 1)]

        async def check_round(
            crash: Path = crash, confirmed: list[tuple[int, Position, bytes]] = confirmed, step: str = step
        ) -> None:
            async with started(crash, ledger_entries_max=7) as storage:
                for topic, name in enumerate(TOPICS):
                    expected = [(p, d) for t, p, d in confirmed if t == topic]
                    assert await read_everything(storage, name) == expected, (step, name)
                    ml = storage.open_ledgers[name]
                    for info in ml.ledgers():
                        ids = [p.entry_id for p, _ in expected if p.ledger_id == info.ledger_id]
                        assert ids == list(range(info.entries))

        run(check_round())
        run(check_round())  # and a second start of the same copy finds the same


def test_corruption_in_an_older_segment_never_leaves_a_hole(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    crash = tmp_path / "crash"
    sizes = [2000] * 90  # about 180 kB: three 64 KiB segments
    appended = run(_append_and_crash(tmp_path / "data", crash, sizes))
    journal_dir = crash / "journal"
    segments = list_segments(journal_dir)
    assert len(segments) >= 3
    first = journal_dir / segment_name(segments[0])
    raw = bytearray(first.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # somewhere in the middle of the oldest segment
    first.write_bytes(bytes(raw))

    async def check() -> None:
        with caplog.at_level(logging.ERROR, logger="velamq.storage"):
            async with started(crash) as storage:
                for topic, name in enumerate(TOPICS):
                    got = await read_everything(storage, name)
                    mine = [(p, payload(i, 2000)) for i, (t, p) in enumerate(appended) if t == topic]
                    assert 0 < len(got) < len(mine)
                    assert got == mine[: len(got)]  # a prefix: nothing after the damage, no hole
                    assert storage.recovery is not None and storage.recovery.corrupt_segments == 1
        assert any("corrupt record" in r.getMessage() for r in caplog.records)

    run(check())


def test_recovery_skips_records_of_deleted_topics_and_is_idempotent(tmp_path: Path) -> None:
    crash = tmp_path / "crash"
    data_dir = tmp_path / "data"

    async def main() -> None:
        async with started(data_dir, flush_interval_ms=NEVER_MS) as storage:
            keep = await storage.open_ledger(TOPICS[0])
            gone = await storage.open_ledger(TOPICS[1])
            for i in range(10):
                await keep.append(payload(i))
                await gone.append(payload(i))
            await storage.delete_ledger(TOPICS[1])
            snapshot(data_dir, crash)

    run(main())
    snapshot(crash, tmp_path / "crash-2")

    async def check(d: Path, replayed: int) -> None:
        async with started(d) as storage:
            assert await storage.ledger_names() == [TOPICS[0]]
            assert [x for _, x in await read_everything(storage, TOPICS[0])] == [payload(i) for i in range(10)]
            assert storage.recovery is not None
            assert storage.recovery.records_orphaned == replayed and storage.recovery.records_replayed == replayed

    run(check(crash, 10))
    run(check(crash, 0))  # started again: nothing left to replay, same content
    run(check(tmp_path / "crash-2", 10))


def test_a_flush_blocked_mid_way_still_serves_reads_from_the_flushing_half(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, flush_interval_ms=NEVER_MS) as storage:
            ml = await storage.open_ledger(TOPIC)
            positions = [await ml.append(payload(i)) for i in range(20)]
            flusher = storage._threads.flusher
            assert flusher is not None
            entered, release = threading.Event(), threading.Event()

            def hook(step: str) -> None:
                if step == "logs-written":
                    entered.set()
                    release.wait(10)

            flusher.step_hook = hook
            flushing = asyncio.ensure_future(storage.flush())
            await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
            assert storage.write_cache.flushing is not None
            more = [await ml.append(payload(i)) for i in range(20, 25)]  # into the other half
            got = await ml.read_entries(positions[0], 100)
            assert [e.data for e in got] == [payload(i) for i in range(25)]
            assert storage.metrics()["velamq_storage_read_entries_disk_total"] == 0
            release.set()
            await flushing
            flusher.step_hook = None
            assert more[-1] == Position(positions[0].ledger_id, 24)

    run(main())


def test_journal_file_is_the_only_copy_until_the_flush(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, flush_interval_ms=NEVER_MS, sync_policy="fsync") as storage:
            ml = await storage.open_ledger(TOPIC)
            pos = await ml.append(b"payload")
            assert list((tmp_path / "logs").iterdir()) == []
            (segment,) = (tmp_path / "journal").glob("*.wal")
            assert b"payload" in segment.read_bytes()
            await storage.flush()
            (log,) = (tmp_path / "logs").iterdir()
            assert os.path.getsize(log) == 32 + 28 + 7
            assert pos.entry_id == 0

    run(main())
