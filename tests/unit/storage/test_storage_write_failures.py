"""A write that fails (disk full, out of descriptors, I/O error) fails what it could not make
durable, turns storage not writable, and nothing is latched: once the fault is gone storage resumes
by itself, and nothing acknowledged is lost, nothing failed is readable, after a restart too.

The fault is injected at the OS boundary (_faulty_disk: os.open / os.writev / os.fdatasync for
files under the data directory); the retries run on a ManualClock, so the tests decide when a
back-off is over. The real thing (a small tmpfs, a low RLIMIT_NOFILE) is in
test_storage_full_disk.py.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest
from _faulty_disk import FaultyDisk
from _storage_testing import NEVER_MS, TOPIC, config, payload, run, snapshot
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from wait_helpers import until

from velamq._clock import ManualClock
from velamq._errors import StorageError
from velamq.storage import Position, Storage
from velamq.storage.write._health import retry_max_s

OTHER = "persistent://public/default/other"


async def resumed(storage: Storage, clock: ManualClock) -> None:
    """Let the retry back-off pass (on the manual clock) until storage writes again."""

    def writable() -> bool:
        clock.advance(retry_max_s)
        return storage.writable

    await until(writable, "storage is writable again")


async def read_all(storage: Storage, name: str) -> list[tuple[Position, bytes]]:
    ml = await storage.open_ledger(name)
    return [(e.position, e.data) for e in await ml.read_entries(Position(0, 0), 1_000_000)]


async def stored(data_dir: Path, names: list[str]) -> dict[str, list[tuple[Position, bytes]]]:
    """What a fresh Storage recovers from data_dir (a restart, or a crash if data_dir is a snapshot)."""
    storage = Storage(config(data_dir))
    await storage.start()
    try:
        return {name: await read_all(storage, name) for name in names}
    finally:
        await storage.close()


def test_a_full_journal_fails_its_appends_and_storage_resumes_without_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    disk = FaultyDisk(data_dir)
    clock = ManualClock()

    async def main() -> None:
        storage = Storage(config(data_dir, sync_policy="fsync", flush_interval_ms=NEVER_MS), clock)
        await storage.start()
        with disk.installed(monkeypatch):
            ml = await storage.open_ledger(TOPIC)
            acked = [await ml.append(payload(i)) for i in range(5)]
            disk.no_space()
            results = await asyncio.gather(*(ml.append(payload(100 + i)) for i in range(5)), return_exceptions=True)
            assert all(isinstance(r, StorageError) and "No space left" in str(r) for r in results), results
            assert not storage.writable and "No space left" in str(storage.write_failure)
            figures = storage.metrics()
            assert figures["velamq_storage_writable"] == 0 and figures["velamq_storage_failed"] == 1
            assert figures["velamq_storage_write_failures_no_space_total"] >= 1
            assert [p for p, _ in await read_all(storage, TOPIC)] == acked  # reads go on
            crashed = snapshot(data_dir, tmp_path / "crash-while-full")
            clock.advance(retry_max_s)  # a probe while the disk is still full: still not writable
            await until(lambda: storage.metrics()["velamq_storage_journal_probes_total"] >= 1, "a probe")
            assert not storage.writable

            disk.heal()
            await resumed(storage, clock)
            after = [await ml.append(payload(200 + i)) for i in range(3)]
            assert after[0] == Position(acked[-1].ledger_id + 1, 0)  # the fenced ledger ended where it was durable
            assert [p for p, _ in await read_all(storage, TOPIC)] == acked + after
            figures = storage.metrics()
            assert figures["velamq_storage_writable"] == 1 and figures["velamq_storage_write_recoveries_total"] >= 1
        await storage.close()
        expected = [(p, payload(i)) for i, p in enumerate(acked)]
        assert (await stored(crashed, [TOPIC]))[TOPIC] == expected  # a crash on the full disk
        restarted = (await stored(data_dir, [TOPIC]))[TOPIC]
        assert restarted == expected + [(p, payload(200 + i)) for i, p in enumerate(after)]

    run(main())


@pytest.mark.parametrize("fault", ["no_space", "no_descriptors", "fsync"])
def test_a_failed_flush_keeps_its_half_readable_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """The journal writes (its segment stays open), the entry logs do not: appends are acknowledged
    (they are durable in the journal), the flush fails and is tried again after a back-off; the
    half stays readable; later appends fail until the flush works (so the journal to replay stays
    small); EMFILE on opening an entry log is as temporary as a full disk."""
    data_dir = tmp_path / "data"
    disk = FaultyDisk(data_dir / "logs")
    clock = ManualClock()

    async def main() -> None:
        storage = Storage(config(data_dir, sync_policy="fsync", flush_interval_ms=NEVER_MS), clock)
        await storage.start()
        with disk.installed(monkeypatch):
            ml = await storage.open_ledger(TOPIC)
            if fault == "no_space":
                disk.no_space(budget=100)  # the log's header fits, the first record does not
            elif fault == "no_descriptors":
                disk.no_descriptors()
            else:
                disk.fsync_fails = True
            acked = [await ml.append(payload(i, 500)) for i in range(20)]
            await storage.flush()  # returns after the failed attempt
            assert not storage.writable
            figures = storage.metrics()
            assert figures["velamq_storage_flush_failures_total"] >= 1
            kind = {"no_space": "no_space", "no_descriptors": "no_descriptors", "fsync": "no_space"}[fault]
            if fault != "fsync":
                assert figures[f"velamq_storage_write_failures_{kind}_total"] >= 1
            assert [p for p, _ in await read_all(storage, TOPIC)] == acked  # from the kept half
            with pytest.raises(StorageError, match="flushing the write cache failed"):
                await ml.append(b"refused")
            assert not list((data_dir / "logs").glob("*.log")) or fault != "no_descriptors"

            disk.heal()
            await resumed(storage, clock)
            more = [await ml.append(payload(100 + i, 500)) for i in range(5)]
            assert more[0] == Position(acked[-1].ledger_id + 1, 0)
            await storage.flush()
            assert storage.metrics()["velamq_storage_flushes_total"] >= 1
        await storage.close()
        got = (await stored(data_dir, [TOPIC]))[TOPIC]
        assert got == [(p, payload(i, 500)) for i, p in enumerate(acked)] + [
            (p, payload(100 + i, 500)) for i, p in enumerate(more)
        ]

    run(main())


def test_a_journal_segment_that_cannot_be_created_is_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of descriptors at a segment roll: the journal goes on in its current segment."""
    data_dir = tmp_path / "data"
    disk = FaultyDisk(data_dir / "journal")

    async def main() -> None:
        storage = Storage(config(data_dir, journal_segment_bytes=64 * 1024, flush_interval_ms=NEVER_MS))
        await storage.start()
        with disk.installed(monkeypatch):
            ml = await storage.open_ledger(TOPIC)
            disk.no_descriptors()
            acked = [await ml.append(payload(i, 2000)) for i in range(100)]  # 200 KB: past 3 rolls
            assert storage.writable
            assert storage.metrics()["velamq_storage_journal_segment_failures_total"] >= 1
            disk.heal()
            acked += [await ml.append(payload(100 + i, 2000)) for i in range(40)]
            assert storage.metrics()["velamq_storage_journal_segments_created_total"] >= 2
        crashed = snapshot(data_dir, tmp_path / "crash")
        await storage.close()
        expected = [(p, payload(i, 2000)) for i, p in enumerate(acked)]
        assert (await stored(crashed, [TOPIC]))[TOPIC] == expected
        assert (await stored(data_dir, [TOPIC]))[TOPIC] == expected

    run(main())


def test_a_failed_creation_is_journaled_again_and_a_failed_delete_leaves_the_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    disk = FaultyDisk(data_dir)
    clock = ManualClock()

    async def main() -> None:
        storage = Storage(config(data_dir, sync_policy="fsync", flush_interval_ms=NEVER_MS), clock)
        await storage.start()
        with disk.installed(monkeypatch):
            keep = await storage.open_ledger(TOPIC)
            kept = await keep.append(b"kept")
            disk.no_space()
            ml = await storage.open_ledger(OTHER)  # its creation is journaled, and fails
            with pytest.raises(StorageError):
                await ml.append(b"lost")
            with pytest.raises(StorageError):
                await storage.delete_ledger(TOPIC)
            disk.heal()
            await resumed(storage, clock)
            first = await ml.append(b"first")
            assert await storage.ledger_names() == sorted([TOPIC, OTHER])
        await storage.close()
        got = await stored(data_dir, [TOPIC, OTHER])
        assert got == {TOPIC: [(kept, b"kept")], OTHER: [(first, b"first")]}

    run(main())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    budget=st.integers(min_value=0, max_value=200_000),
    batches=st.lists(
        st.lists(st.tuples(st.booleans(), st.integers(min_value=1, max_value=3000)), min_size=1, max_size=8),
        min_size=2,
        max_size=8,
    ),
    flush_after=st.sets(st.integers(min_value=0, max_value=7), min_size=3),
)
def test_a_write_failing_at_any_byte_never_loses_an_ack_nor_shows_a_failed_entry(
    monkeypatch: pytest.MonkeyPatch,
    budget: int,
    batches: list[list[tuple[bool, int]]],
    flush_after: set[int],
) -> None:
    """The disk fills after `budget` more bytes, in the middle of any journal or entry log write.
    Whatever the writes were, after a crash while full, and after healing and a restart: every
    acknowledged entry is there, in order, and no failed one is."""
    base = Path(tempfile.mkdtemp(prefix="velamq-write-failure-"))
    data_dir = base / "data"
    disk = FaultyDisk(data_dir)
    clock = ManualClock()
    names = [TOPIC, OTHER]

    async def main() -> None:
        storage = Storage(config(data_dir, sync_policy="fsync", flush_interval_ms=NEVER_MS), clock)
        await storage.start()
        acked: dict[str, list[tuple[Position, bytes]]] = {name: [] for name in names}
        failed: set[bytes] = set()
        n = 0
        with disk.installed(monkeypatch):
            ledgers = [await storage.open_ledger(name) for name in names]
            disk.no_space(budget)
            for k, batch in enumerate(batches):
                calls = []
                for other, size in batch:
                    data = payload(n, size)
                    n += 1
                    calls.append((names[other], data, ledgers[other].append(data)))
                results = await asyncio.gather(*(c for _, _, c in calls), return_exceptions=True)
                for (name, data, _), result in zip(calls, results, strict=True):
                    if isinstance(result, BaseException):
                        assert isinstance(result, StorageError), result
                        failed.add(data)
                    else:
                        acked[name].append((result, data))
                if k in flush_after:
                    await storage.flush()
            flush_failed = storage.metrics()["velamq_storage_flush_failures_total"] > 0
            event(f"appends failed: {bool(failed)}, a flush failed: {flush_failed}")
            crashed = snapshot(data_dir, base / "crash")  # idle: the disk is full, nothing moves
            at_crash = {name: list(entries) for name, entries in acked.items()}
            disk.heal()
            if not storage.writable:
                await resumed(storage, clock)
            for i, ml in enumerate(ledgers):
                data = payload(n + i, 100)
                acked[names[i]].append((await ml.append(data), data))
            await storage.flush()
        await storage.close()
        for where, expected in ((crashed, at_crash), (data_dir, acked)):
            got = await stored(where, names)
            for name in names:
                assert not failed & {d for _, d in got[name]}, "a failed append is readable"
                assert got[name] == expected[name], "an acknowledged append is lost (or out of order)"

    try:
        run(main())
    finally:
        shutil.rmtree(base, ignore_errors=True)
