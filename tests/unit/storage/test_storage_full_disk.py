"""The real thing, in child processes: a small tmpfs that fills up, and a process out of file
descriptors (a low RLIMIT_NOFILE, exhausted).

- A full tmpfs (ENOSPC from the journal, the entry logs and SQLite alike): storage turns not
  writable, reads go on, and it writes again once space is freed, without a restart; killed while
  the disk is full, it starts again on that full disk (giving back its ballast to replay the
  journal) and has every acknowledged entry; once space is back it writes again.
- Out of descriptors: the journal goes on in its segment when it cannot start the next one, a flush
  that cannot create an entry log fails and is retried, and once descriptors are back everything
  written is flushed and there after a restart.

Mounting needs root (CAP_SYS_ADMIN): without it the tmpfs test is skipped with that reason. Every
wait is for a condition, with a generous deadline; nothing asserts a duration.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import velamq

pytestmark = pytest.mark.timeout(300)

CHILD = r"""
import asyncio, json, os, resource, sys, time
from pathlib import Path
from velamq.storage import Position, Storage, StorageConfig
from wait_helpers import until

TOPIC = "persistent://public/default/full"
phase, data_dir = sys.argv[1], Path(sys.argv[2])
out = {}

def report():
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


async def append_until_refused(storage, ml, acked, size, pending):
    # Appends one at a time until one fails or storage stops writing (a failed flush: appends then
    # wait in the write cache, unacknowledged, so they are not waited for). Which comes first is a
    # race: an append still waiting when storage stopped goes to `pending`, and is acknowledged
    # later if storage writes again (or, after a crash, is there or not: it was never answered).
    while storage.writable:
        data = b"%08d" % len(acked) + os.urandom(size - 8)
        future = ml.append_nowait(data)
        await until(lambda: future.done() or not storage.writable, "the append settled or storage stopped")
        if not future.done():
            pending.append((future, data))
            return
        if future.exception() is not None:
            out.setdefault("errors", []).append(str(future.exception())[:200])
            return
        acked.append([list(future.result()), data.hex()])

async def settle(pending, acked):
    for future, data in pending:
        await until(future.done, "the append made while storage stopped settled")
        if future.exception() is None:
            acked.append([list(future.result()), data.hex()])
    pending.clear()

def acked_then_unanswered(entries, acked, pending):
    # Everything acknowledged, in order, then at most the appends never answered, in order.
    tail = [hex_ for _, hex_ in entries[len(acked):]]
    return entries[:len(acked)] == acked and tail == [d.hex() for _, d in pending][:len(tail)]

def fill(path):
    # Unbuffered: a buffered file would try again to write what the disk refused when it is
    # closed, and raise ENOSPC there (or not: it depends on how much room the storage's own
    # writes left at that moment).
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(b"\0" * 65536)
            except OSError:
                return

async def read_all(storage):
    ml = await storage.open_ledger(TOPIC)
    return [[list(e.position), e.data.hex()] for e in await ml.read_entries(Position(0, 0), 1_000_000)]

def config(**kw):
    return StorageConfig(data_dir, sync_policy="fsync", memory_bytes=8 << 20, journal_segment_bytes=256 << 10,
                         entry_log_bytes_max=256 << 10, flush_interval_ms=50, **kw)

async def main():
    if phase == "tmpfs-fill":
        hog = data_dir.parent / "hog"
        with open(hog, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, 3 << 20)
        storage = Storage(config(ballast_bytes=1 << 20))
        await storage.start()
        out["ballast"] = storage.metrics()["velamq_storage_ballast_bytes"]
        ml = await storage.open_ledger(TOPIC)
        acked = out["acked"] = []
        pending = []
        await append_until_refused(storage, ml, acked, 8192, pending)
        await until(lambda: not storage.writable, "storage is not writable")
        out["read_while_full"] = acked_then_unanswered(await read_all(storage), acked, pending)
        hog.unlink()  # space is back: storage writes again by itself
        await until(lambda: storage.writable, "storage is writable again")
        await settle(pending, acked)
        out["refused_at"] = len(acked)  # with the appends answered once storage wrote again
        for i in range(5):
            data = b"%08d" % len(acked) + b"after"
            acked.append([list(await ml.append(data)), data.hex()])
        out["resumed"] = len(acked)
        fill(data_dir.parent / "filler")  # full again, to the last byte this time
        await append_until_refused(storage, ml, acked, 8192, pending)
        await until(lambda: not storage.writable, "storage is not writable again")
        out["unanswered"] = [d.hex() for _, d in pending]  # the crash comes before they are
        m = storage.metrics()
        out["failures_no_space"] = m["velamq_storage_write_failures_no_space_total"]
        out["recoveries"] = m["velamq_storage_write_recoveries_total"]
        report()
        os.kill(os.getpid(), 9)  # a crash on the full disk
    elif phase == "tmpfs-restart":
        storage = Storage(config(ballast_bytes=1 << 20))
        await storage.start()  # on the full disk
        out["entries"] = await read_all(storage)
        m = storage.metrics()
        out["ballast_releases"] = m["velamq_storage_ballast_releases_total"]
        report()
        await storage.close()
    elif phase == "tmpfs-resume":
        storage = Storage(config(ballast_bytes=1 << 20))
        await storage.start()
        ml = await storage.open_ledger(TOPIC)
        data = b"after-restart"
        out["appended"] = [list(await ml.append(data)), data.hex()]
        await storage.close()
        storage = Storage(config(ballast_bytes=1 << 20))
        await storage.start()
        out["entries"] = await read_all(storage)
        out["ballast"] = storage.metrics()["velamq_storage_ballast_bytes"]
        await storage.close()
        report()
    elif phase == "descriptors":
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        storage = Storage(config())
        await storage.start()
        ml = await storage.open_ledger(TOPIC)
        acked = out["acked"] = []
        for i in range(10):
            data = b"%08d" % i + os.urandom(2000)
            acked.append([list(await ml.append(data)), data.hex()])
        await storage.flush()
        hogs = []
        while True:  # take every descriptor left
            try:
                hogs.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                break
        out["hogs"] = len(hogs)
        # More entries until one is refused: the journal must start a segment, the flush an entry
        # log; neither can. Whether an append is refused or storage stops writing first is a race.
        pending = []  # appended while storage stopped writing: settled once it writes again
        while storage.writable:
            data = b"%08d" % len(acked) + os.urandom(2000)
            future = ml.append_nowait(data)
            await until(lambda: future.done() or not storage.writable, "the append settled or storage stopped")
            if not future.done():
                pending.append((future, data))
            elif future.exception() is None:
                acked.append([list(future.result()), data.hex()])
        await until(lambda: not storage.writable, "a flush failed for lack of descriptors")
        m = storage.metrics()
        out["segment_failures"] = m["velamq_storage_journal_segment_failures_total"]
        out["failures_no_descriptors"] = m["velamq_storage_write_failures_no_descriptors_total"]
        for fd in hogs:
            os.close(fd)
        await until(lambda: storage.writable, "storage is writable again")
        for future, data in pending:
            await until(future.done, "the append made while storage stopped settled")
            if future.exception() is None:
                acked.append([list(future.result()), data.hex()])
        await storage.flush()
        out["read"] = await read_all(storage) == acked
        await storage.close()
        storage = Storage(config())
        await storage.start()
        out["restarted"] = await read_all(storage) == acked
        await storage.close()
        report()

asyncio.run(main())
"""


def child(phase: str, data_dir: Path) -> dict[str, Any]:
    # velamq, and tests/ for wait_helpers (the child waits as the tests do).
    path = [Path(velamq.__file__).resolve().parent.parent, Path(__file__).resolve().parents[2]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, path)))
    result = subprocess.run(
        [sys.executable, "-c", CHILD, phase, str(data_dir)], capture_output=True, text=True, env=env, timeout=240
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{phase}: exit {result.returncode}\n{result.stderr[-3000:]}"
    if phase != "tmpfs-fill":
        assert result.returncode == 0, f"{phase}: exit {result.returncode}\n{result.stderr[-3000:]}"
    else:
        assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    out: dict[str, Any] = json.loads(lines[-1])
    return out


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "fs"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a 16 MiB tmpfs (needs root / CAP_SYS_ADMIN): {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_tmpfs_stops_writes_which_resume_without_a_restart_and_a_restart_on_it_works(
    small_tmpfs: Path,
) -> None:
    data_dir = small_tmpfs / "data"
    filled = child("tmpfs-fill", data_dir)
    acked = filled["acked"]
    assert filled["ballast"] == 1 << 20
    assert filled["refused_at"] > 100 and filled["read_while_full"]
    assert filled["resumed"] == filled["refused_at"] + 5 and filled["recoveries"] >= 1
    assert filled["failures_no_space"] >= 2

    restarted = child("tmpfs-restart", data_dir)  # the disk is still full
    # Nothing acknowledged lost, nothing failed shown; an append that was never answered before
    # the crash may be there (it reached the journal) or not.
    entries = restarted["entries"]
    assert entries[: len(acked)] == acked
    assert [e[1] for e in entries[len(acked):]] == filled.get("unanswered", [])[: len(entries) - len(acked)]
    assert restarted["ballast_releases"] in (0, 1)

    (small_tmpfs / "filler").unlink()
    resumed = child("tmpfs-resume", data_dir)
    assert resumed["entries"] == [*entries, resumed["appended"]]
    assert resumed["ballast"] == 1 << 20  # made again once there was room


def test_out_of_descriptors_is_temporary(tmp_path: Path) -> None:
    out = child("descriptors", tmp_path / "data")
    assert out["hogs"] > 0
    assert out["failures_no_descriptors"] >= 1
    assert out["read"] and out["restarted"]
