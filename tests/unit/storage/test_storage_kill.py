"""kill -9 during appends, flushes and garbage collection: every append that resolved is there
after recovery, and every deletion that resolved stays done (ME-6).

With a small write cache and small journal segments the child flushes, checkpoints and trims the
journal many times a second, so the kill lands anywhere in that cycle as well. In the "gc" variant
the child also creates, fills and deletes topics and runs the garbage collector in a loop over
small entry logs, so the kill lands in compactions too.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _storage_testing import run, started

import velamq
from velamq.storage import Position

# The child appends with fsync from several producers to two topics, and prints one line per
# append once it resolved: "<topic> <ledger_id> <entry_id> <data>".
CHILD = r"""
import asyncio, sys
from pathlib import Path
from velamq.storage import Storage, StorageConfig

async def main():
    small = sys.argv[2] in ("small", "gc")
    kwargs = dict(write_cache_bytes=256 * 1024, journal_segment_bytes=64 * 1024) if small else {}
    if sys.argv[2] == "gc":
        kwargs["entry_log_bytes_max"] = 64 * 1024
    config = StorageConfig(Path(sys.argv[1]), sync_policy="fsync", ledger_entries_max=300, **kwargs)
    storage = Storage(config)
    await storage.start()
    topics = [await storage.open_ledger(f"persistent://public/default/kill-{k}") for k in range(2)]
    sys.stdout.write("ready\n")
    sys.stdout.flush()

    async def churn():
        n = 0
        while True:
            name = f"persistent://public/default/tmp-{sys.argv[3]}-{n}"
            ml = await storage.open_ledger(name)
            for i in range(20):
                await ml.append(b"t" * 2000)
            await storage.flush()  # in the entry logs, next to the kept topics' entries
            await storage.delete_ledger(name)
            sys.stdout.write(f"deleted {name}\n")
            sys.stdout.flush()
            if n % 3 == 0:
                await storage.collect_garbage(0.9)
            n += 1

    async def produce(topic, producer):
        i = 0
        while True:
            data = f"{topic}.{producer}.{i}." * (1 + i % 7) * (1 + 20 * small)
            pos = await topics[topic].append(data.encode())
            sys.stdout.write(f"{topic} {pos.ledger_id} {pos.entry_id} {data}\n")
            sys.stdout.flush()
            i += 1

    extra = [churn()] if sys.argv[2] == "gc" else []
    await asyncio.gather(*(produce(t, p) for t in range(2) for p in range(4)), *extra)

asyncio.run(main())
"""


def run_child_and_kill(
    data_dir: Path, delay_s: float, variant: str, round_: int = 0
) -> tuple[list[tuple[int, Position, bytes]], list[str]]:
    env = dict(os.environ, PYTHONPATH=str(Path(velamq.__file__).resolve().parent.parent))
    stderr_path = data_dir.parent / "child-stderr.txt"
    with open(stderr_path, "wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(data_dir), variant, str(round_)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            bufsize=0,
        )
    assert child.stdout is not None
    chunks: list[bytes] = []
    ready = threading.Event()
    deleting = threading.Event()  # the child printed its first deletion

    def drain() -> None:  # keep the pipe empty so the child never blocks on stdout
        assert child.stdout is not None
        tail = b""
        while chunk := child.stdout.read(65536):
            chunks.append(chunk)
            if not ready.is_set() and b"\n" in b"".join(chunks):
                ready.set()
            if b"\ndeleted " in tail + chunk:
                deleting.set()
            tail = chunk[-16:]
        ready.set()
        deleting.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if not ready.wait(30):
            raise AssertionError(f"child did not start: {stderr_path.read_text()}")
        # The "gc" variant's kill is to land in the churn of deletions and collections: however
        # loaded the machine, the delay counts from the first deletion, not from the start.
        if variant == "gc" and not deleting.wait(60):
            raise AssertionError(f"child deleted no topic: {stderr_path.read_text()}")
        time.sleep(delay_s)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        reader.join(10)
    assert child.returncode == -signal.SIGKILL, stderr_path.read_text()
    lines = b"".join(chunks).split(b"\n")
    assert lines[0] == b"ready", stderr_path.read_text()
    lines = lines[1:-1]  # drop "ready" and the unterminated last line, if any
    out = []
    deleted = []
    for line in lines:
        if line.startswith(b"deleted "):
            deleted.append(line.split(b" ", 1)[1].decode())
            continue
        topic, ledger_id, entry_id, data = line.split(b" ", 3)
        out.append((int(topic), Position(int(ledger_id), int(entry_id)), data))
    return out, deleted


@pytest.mark.parametrize("variant", ["default", "small", "gc"])
def test_sigkill_never_loses_a_resolved_append(tmp_path: Path, variant: str) -> None:
    data_dir = tmp_path / "data"
    rng = random.Random(os.getpid())
    confirmed: list[tuple[int, Position, bytes]] = []
    deleted: list[str] = []
    for round_ in range(3):  # each child recovers what the previous one left, then is killed too
        printed, gone = run_child_and_kill(data_dir, rng.uniform(0.1, 0.6) * (2 if variant == "gc" else 1), variant,
                                           round_)
        assert printed, "the child resolved no append before it was killed"
        if variant == "gc":
            assert gone, "the child deleted no topic before it was killed"
        confirmed += printed
        deleted += gone

        async def check(confirmed: list[tuple[int, Position, bytes]], deleted: list[str]) -> None:
            async with started(data_dir, sync_policy="fsync", ledger_entries_max=300) as storage:
                for topic in range(2):
                    ml = await storage.open_ledger(f"persistent://public/default/kill-{topic}")
                    entries = await ml.read_entries(Position(0, 0), 1_000_000)
                    stored = {e.position: e.data for e in entries}
                    for t, pos, data in confirmed:
                        if t == topic:
                            assert stored.get(pos) == data, pos
                    # Dense ids: each ledger holds entries 0..n-1, nothing missing in between.
                    for info in ml.ledgers():
                        ids = [e.position.entry_id for e in entries if e.position.ledger_id == info.ledger_id]
                        assert ids == list(range(info.entries))
                names = await storage.ledger_names(limit=100_000)
                assert not set(deleted) & set(names)  # a deletion that resolved stays done
                await storage.collect_garbage()  # and the collector finds a consistent index

        run(check(confirmed, deleted))
