"""velamq admin storage check: orphaned managed ledgers, dead and stray entry logs and orphaned
metadata found, reported and removed; never anything of a live topic (BR-8, BR-9)."""

from __future__ import annotations

import io
from pathlib import Path

from _storage_testing import payload, read_everything, run, snapshot, started

from velamq.metadata import MetadataStore
from velamq.storage.formats._journal_file import segment_name

# The checker is imported inside the tests, not here: the admin CLI tests replace the module in
# sys.modules, which only works while nothing has imported it yet (pytest imports every test
# module at collection).

NS = "persistent://public/default/"
LIVE = [NS + "live", NS + "live#compacted", NS + "p-partition-1"]


async def build(data_dir: Path) -> None:
    store = MetadataStore(data_dir / "metadata.db")
    await store.start()
    try:
        await store.create_topic(NS + "live")
        await store.create_partitioned_topic(NS + "p", 2)
        await store.create_topic(NS + "p-partition-1")
        await store.create_topic(NS + "p-partition-5")  # beyond the partition count: an orphan row
    finally:
        await store.close()
    async with started(data_dir, entry_log_bytes_max=64 * 1024) as storage:
        for name in ("gone", "gone-too", *[n.removeprefix(NS) for n in LIVE]):
            ml = await storage.open_ledger(NS + name)
            for i in range(40 if name.startswith("gone") else 1):  # the orphans fill the first log
                await ml.append(payload(i, 1000))
            await storage.flush()


def kinds(data_dir: Path) -> list[tuple[str, str]]:
    from velamq.cli._storage_check import check_storage

    report = check_storage(data_dir)
    return sorted((f.kind, f.path.name if f.path else f.detail.split(": ")[0]) for f in report.findings)


def test_finds_reports_and_deletes_orphans(tmp_path: Path) -> None:
    from velamq.cli._storage_check import main, run_storage_check

    run(build(tmp_path))
    logs = tmp_path / "logs"
    (logs / "0000000777.log").write_bytes(b"a flush cut short")  # no index row
    (logs / "x.tmp").write_bytes(b"half")
    (logs / "notes.txt").write_text("mine")  # not storage's: reported, never deleted
    (tmp_path / "journal" / segment_name(1)).write_bytes(b"old")  # before the checkpoint
    assert kinds(tmp_path) == [
        ("orphan managed ledger", f"topic {NS}gone"),
        ("orphan managed ledger", f"topic {NS}gone-too"),
        ("orphan partition row", f"topics row {NS}p-partition-5"),
        ("stale journal segment", segment_name(1)),
        ("temp file", "x.tmp"),
        ("uncommitted entry log", "0000000777.log"),
        ("unknown file", "notes.txt"),
    ]
    out = io.StringIO()
    assert run_storage_check(tmp_path, out=out) == 1
    text = out.getvalue()
    assert "run with --delete" in text and "[report only]" in text and "gone-too" in text

    out = io.StringIO()
    assert run_storage_check(tmp_path, delete=True, out=out) == 1  # notes.txt stays: report only
    # The recovery --delete runs first removes what a start removes (the uncommitted log, the
    # temp file, the stale segment); then the two orphans and the orphan row go.
    assert "deleted 3" in out.getvalue(), out.getvalue()
    # The orphans' bytes are garbage now: the first log holds nothing live any more.
    assert kinds(tmp_path) == [("dead entry log", "0000000001.log"), ("unknown file", "notes.txt")]
    (logs / "notes.txt").unlink()
    assert run_storage_check(tmp_path, delete=True, out=io.StringIO()) == 0
    assert main(["--data-dir", str(tmp_path)]) == 0
    assert not (logs / "0000000001.log").exists()

    async def after() -> None:
        store = MetadataStore(tmp_path / "metadata.db")
        await store.start()
        try:
            assert not await store.topic_exists(NS + "p-partition-5")
            assert await store.topic_exists(NS + "p-partition-1")
        finally:
            await store.close()
        async with started(tmp_path) as storage:
            assert await storage.ledger_names() == LIVE
            for name in LIVE:
                assert [d for _, d in await read_everything(storage, name)] == [payload(0, 1000)]

    run(after())


def test_refuses_to_delete_while_a_broker_holds_the_directory(tmp_path: Path) -> None:
    from velamq.cli._storage_check import run_storage_check

    run(build(tmp_path))

    async def main_() -> None:
        async with started(tmp_path) as storage:
            out = io.StringIO()
            assert run_storage_check(tmp_path, delete=True, out=out) == 2
            assert "broker is running" in out.getvalue()
            out = io.StringIO()
            assert run_storage_check(tmp_path, out=out) == 1  # the report alone still works
            assert "report may be stale" in out.getvalue()
            assert len(await storage.ledger_names()) == 5  # nothing was deleted

    run(main_())


def test_without_a_metadata_store_no_ledger_counts_as_orphaned(tmp_path: Path) -> None:
    from velamq.cli._storage_check import main, run_storage_check

    async def main_() -> None:
        async with started(tmp_path) as storage:
            await (await storage.open_ledger(NS + "t")).append(b"x")

    run(main_())
    out = io.StringIO()
    assert run_storage_check(tmp_path, delete=True, out=out) == 0
    assert "cannot tell which topics are live" in out.getvalue()

    async def check() -> None:
        async with started(tmp_path) as storage:
            assert await storage.ledger_names() == [NS + "t"]

    run(check())
    assert main(["--data-dir", str(tmp_path / "missing")]) == 2


def test_a_topic_only_the_journal_knows_is_never_taken_for_an_orphan(tmp_path: Path) -> None:
    """--delete replays the journal first: a live topic whose log was created after the last
    flush (then the broker crashed) is in storage.db when the check decides."""
    from velamq.cli._storage_check import run_storage_check

    run(build(tmp_path / "data"))

    async def crash() -> None:
        store = MetadataStore(tmp_path / "data" / "metadata.db")
        await store.start()
        await store.create_topic(NS + "new")
        await store.close()
        async with started(tmp_path / "data", flush_interval_ms=3_600_000) as storage:
            await (await storage.open_ledger(NS + "new")).append(b"only in the journal")
            snapshot(tmp_path / "data", tmp_path / "crash")

    run(crash())
    assert run_storage_check(tmp_path / "crash", delete=True, out=io.StringIO()) == 0

    async def check() -> None:
        async with started(tmp_path / "crash") as storage:
            assert [d for _, d in await read_everything(storage, NS + "new")] == [b"only in the journal"]
            assert NS + "gone" not in await storage.ledger_names()

    run(check())
