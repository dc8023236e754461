"""Writes format1.tar.gz: a data directory of storage format 1 (a file per ledger), for the test
of the migration (test_storage_migration.py). Run it with velamq at commit 0698bd2 (the last one
with format 1) on the path:

    git worktree add /tmp/v1 0698bd2
    PYTHONPATH=/tmp/v1 python tests/unit/storage/data/make_format1.py tests/unit/storage/data

It copies the directory while the storage runs, as a crash would leave it: sealed ledgers with
index files, a current ledger, cursors, and appends that only the journal holds. The expected
content goes to format1.json: per topic, [ledger id, entry id, data as latin-1] and the cursors.
"""

import asyncio
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests/, for wait_helpers
from wait_helpers import until

from velamq.storage import Position, Storage, StorageConfig

TOPICS = ["persistent://public/default/a", "persistent://public/default/" + "b" * 300, "non-persistent://t/n/empty"]


def data(topic: int, i: int) -> bytes:
    return f"{topic}:{i}:".encode() + bytes((i * 7 + k) % 256 for k in range(i * 13 % 200))


def cursor_file_holds(data_dir: Path, file_name: str, state: list[object]) -> bool:
    """Whether the cursor's file (replaced atomically by each write) holds [mark-delete, acked ranges]."""
    for path in data_dir.glob(f"ledgers/*/cursors/{file_name}"):
        written = json.loads(path.read_text())
        return [written["mark_delete"], written["individually_acked"]] == state
    return False


async def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "data"
        config = StorageConfig(d, sync_policy="none", ledger_entries_max=4, flush_interval_ms=3_600_000,
                               cursor_persist_interval_s=0)
        storage = Storage(config)
        await storage.start()
        mls = [await storage.open_ledger(t) for t in TOPICS]
        expected: dict[str, list[list[object]]] = {t: [] for t in TOPICS}

        async def append(k: int, n: int) -> None:
            for _ in range(n):
                i = len(expected[TOPICS[k]])
                pos = await mls[k].append(data(k, i))
                expected[TOPICS[k]].append([pos.ledger_id, pos.entry_id, data(k, i).decode("latin-1")])

        await append(0, 10)
        await append(1, 3)
        sub = await mls[0].open_cursor("sub/1", "earliest")
        sub.ack([Position(*expected[TOPICS[0]][i][:2]) for i in (0, 1, 2, 5)])  # type: ignore[arg-type]
        await mls[1].open_cursor("other", "latest")
        await storage.flush()
        await append(0, 3)  # in the journal only
        await append(1, 2)
        cursors = {TOPICS[0]: {"sub/1": [list(sub.mark_delete_position), sub.individually_acked.to_json()]}}
        # The acks reach the cursor's file in the background (interval 0): copy once it holds them.
        await until(lambda: cursor_file_holds(d, "sub%2F1.json", cursors[TOPICS[0]]["sub/1"]),
                    "the acknowledgements in the cursor's file")
        shutil.copytree(d, Path(tmp) / "crash", ignore=shutil.ignore_patterns("LOCK"))
        await storage.close()
        with tarfile.open(out / "format1.tar.gz", "w:gz") as tar:
            tar.add(Path(tmp) / "crash", arcname="data")
        (out / "format1.json").write_text(json.dumps({"entries": expected, "cursors": cursors}, indent=1))


asyncio.run(main(Path(sys.argv[1])))
