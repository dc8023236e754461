"""ShardedStorage across processes: a shard handed over between two processes, and kill -9 of a
process holding shards (ME-6 for storage per bundle).

- Handover: this process holds two shards; a second process asks for one of them and waits for
  its lock, while this one goes on appending to it; this process closes that shard (keeping the
  other), and the second one opens it and reads every entry, the last ones included; it appends
  and closes, and this process reads its entries back.
- kill -9: a child appends with fsync to topics over four shards, printing each append once it
  resolved, while it closes and reopens one shard over and over; it is killed at a random moment,
  several rounds, and each time every acknowledged entry is there when the shards are opened again
  (in this process, so the child's locks must be gone with it).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest
from wait_helpers import wait_until

import velamq
from velamq.storage import Position, ShardedStorage, StorageConfig

pytestmark = pytest.mark.timeout(240)

SHARDS = 4

# Both sides route names the same way: CRC-32 of the name over four shard keys.
PRELUDE = r"""
import asyncio, sys, zlib
from pathlib import Path
from velamq.storage import Position, ShardedStorage, StorageConfig

def shard_of(name):
    return f"tenant/ns/0x{zlib.crc32(name.encode()) % 4:08x}"

def sharded(data_dir, **kwargs):
    return ShardedStorage(StorageConfig(Path(data_dir), **kwargs), shard_of=shard_of, lock_wait_s=120)

def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
"""

# The second owner: waits for the shard of argv[2], prints every entry of it (hex), appends one.
SECOND_OWNER = PRELUDE + r"""
async def main():
    storage = sharded(sys.argv[1])
    await storage.start()
    say("waiting")
    ml = await storage.open_ledger(sys.argv[2])
    for entry in await ml.read_entries(Position(0, 0), 1_000_000):
        say(entry.data.hex())
    await ml.append(b"from the second owner")
    await storage.close()
    say("done")

asyncio.run(main())
"""

# Appends with fsync to 8 topics (over 4 shards), printing "<topic> <ledger> <entry> <data>" once
# each append resolved; one more task closes and reopens the shard of topic 0 over and over.
KILLED_OWNER = PRELUDE + r"""
async def main():
    storage = sharded(sys.argv[1], sync_policy="fsync", ledger_entries_max=200,
                      write_cache_bytes=512 * 1024, journal_segment_bytes=64 * 1024)
    await storage.start()
    names = [f"persistent://tenant/ns/kill-{t}" for t in range(8)]
    for name in names:
        await storage.open_ledger(name)
    say("ready")

    async def produce(t, producer):
        i = 0
        while True:
            data = f"{sys.argv[2]}.{t}.{producer}.{i}." * (1 + i % 5)
            ml = await storage.open_ledger(names[t])  # its shard may have been closed meanwhile
            try:
                pos = await ml.append(data.encode())
            except Exception:
                continue  # the ledger closed under it: not acknowledged, and not printed
            say(f"{t} {pos.ledger_id} {pos.entry_id} {data}")
            i += 1

    async def churn():
        while True:
            await storage.close_shard(shard_of(names[0]))
            await storage.open_ledger(names[0])
            await asyncio.sleep(0.05)

    await asyncio.gather(*(produce(t, p) for t in range(8) for p in range(2)), churn())

asyncio.run(main())
"""


def shard_of(name: str) -> str:
    return f"tenant/ns/0x{zlib.crc32(name.encode()) % SHARDS:08x}"


def sharded(data_dir: Path, **kwargs: object) -> ShardedStorage:
    return ShardedStorage(StorageConfig(data_dir, **kwargs), shard_of=shard_of, lock_wait_s=120)  # type: ignore[arg-type]


def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(Path(velamq.__file__).resolve().parent.parent))


def names_in_two_shards() -> tuple[str, str]:
    names = [f"persistent://tenant/ns/handover-{i}" for i in range(50)]
    first = names[0]
    return first, next(n for n in names if shard_of(n) != shard_of(first))


def test_a_shard_moves_to_another_process_that_waits_for_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    moving, staying = names_in_two_shards()

    async def main() -> None:
        storage = sharded(data, sync_policy="fsync")
        await storage.start()
        try:
            ml = await storage.open_ledger(moving)
            kept = await storage.open_ledger(staying)
            appended = [f"before {i}".encode() for i in range(20)]
            for entry in appended:
                await ml.append(entry)
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c", SECOND_OWNER, str(data), moving,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=child_env(),
            )
            assert child.stdout is not None
            assert await asyncio.wait_for(child.stdout.readline(), 60) == b"waiting\n"
            # The child waits for the lock, which this process holds: these appends come first.
            for i in range(20):
                appended.append(f"while the next owner waits {i}".encode())
                await ml.append(appended[-1])
            await storage.close_shard(shard_of(moving))
            assert storage.open_shards() == [shard_of(staying)]
            await kept.append(b"the other shard is still open")
            out, err = await asyncio.wait_for(child.communicate(), 120)
            assert child.returncode == 0, err.decode()
            lines = out.decode().splitlines()
            assert lines[-1] == "done"
            assert [bytes.fromhex(h) for h in lines[:-1]] == appended
            # Back here: the second owner's append is there too.
            ml = await storage.open_ledger(moving)
            entries = [e.data for e in await ml.read_entries(Position(0, 0), 1000)]
            assert entries == [*appended, b"from the second owner"]
        finally:
            await storage.close()

    asyncio.run(main())


def run_and_kill(data: Path, round_: int, rng: random.Random) -> list[tuple[int, Position, bytes]]:
    stderr_path = data.parent / f"child-{round_}.err"
    with open(stderr_path, "wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_OWNER, str(data), str(round_)],
            stdout=subprocess.PIPE, stderr=stderr, env=child_env(), bufsize=0,
        )
    chunks: list[bytes] = []
    lines = [0]

    def drain() -> None:  # keep the pipe empty so the child never blocks on stdout
        assert child.stdout is not None
        while chunk := child.stdout.read(65536):
            chunks.append(chunk)
            lines[0] += chunk.count(b"\n")

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        # The kill lands after a random number (300 to 3 000) of acknowledged appends: counted,
        # not timed, so that a loaded machine moves the moment the same way an idle one does.
        kill_after = rng.randint(300, 3_000)
        wait_until(lambda: lines[0] > kill_after or child.poll() is not None, "the child's appends", timeout_s=120)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        reader.join(10)
    assert child.returncode == -signal.SIGKILL, stderr_path.read_text()
    printed = b"".join(chunks).split(b"\n")
    assert printed[0] == b"ready", stderr_path.read_text()
    out = []
    for line in printed[1:-1]:  # the last line may be cut short by the kill
        topic, ledger_id, entry_id, payload = line.split(b" ", 3)
        out.append((int(topic), Position(int(ledger_id), int(entry_id)), payload))
    return out


def test_kill_9_of_a_process_holding_shards_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    data = tmp_path / "data"
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    confirmed: list[tuple[int, Position, bytes]] = []
    for round_ in range(3):  # each child recovers what the previous one left, then is killed too
        confirmed += run_and_kill(data, round_, rng)
        assert confirmed

        async def check(confirmed: list[tuple[int, Position, bytes]]) -> None:
            storage = sharded(data, sync_policy="fsync", ledger_entries_max=200)
            await storage.start()
            try:
                for topic in range(8):
                    ml = await storage.open_ledger(f"persistent://tenant/ns/kill-{topic}")
                    entries = await ml.read_entries(Position(0, 0), 10_000_000)
                    stored = {e.position: e.data for e in entries}
                    for t, pos, payload in confirmed:
                        if t == topic:
                            assert stored.get(pos) == payload, (topic, pos)
                    for info in ml.ledgers():  # dense ids: no hole in any ledger
                        ids = [e.position.entry_id for e in entries if e.position.ledger_id == info.ledger_id]
                        assert ids == list(range(info.entries))
                assert storage.open_shards() == sorted({shard_of(f"persistent://tenant/ns/kill-{t}") for t in range(8)})
            finally:
                await storage.close()

        asyncio.run(check(confirmed))
