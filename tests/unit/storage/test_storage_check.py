"""velamq admin storage check: orphaned ledgers and metadata found, reported and removed (BR-8, BR-9)."""

from __future__ import annotations

import io
from pathlib import Path

from _storage_testing import payload, read_everything, run, started

from velamq.metadata import MetadataStore
from velamq.storage._journal_file import segment_name

# The checker is imported inside the tests, not here: the admin CLI tests replace the module in
# sys.modules, which only works while nothing has imported it yet (pytest imports every test
# module at collection).

NS = "persistent://public/default/"


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
    async with started(data_dir) as storage:
        for name in ("live", "live#compacted", "p-partition-1", "gone", "gone-too"):
            ml = await storage.open_ledger(NS + name)
            await ml.append(payload(1, 1000))


def kinds(data_dir: Path) -> list[tuple[str, str]]:
    from velamq.cli._storage_check import check_storage

    report = check_storage(data_dir)
    return sorted((f.kind, f.path.name if f.path else f.detail.split(": ")[0]) for f in report.findings)


def test_finds_reports_and_deletes_orphans(tmp_path: Path) -> None:
    from velamq.cli._storage_check import main, run_storage_check

    run(build(tmp_path))
    ledgers = tmp_path / "ledgers"
    live_dir = ledgers / "persistent%3A%2F%2Fpublic%2Fdefault%2Flive"
    (live_dir / "00000000000000999999.idx").write_bytes(b"x" * 10)  # an index without its ledger
    (live_dir / "name.tmp").write_bytes(b"half")
    (live_dir / "notes.txt").write_text("mine")  # not storage's: reported, never deleted
    (tmp_path / "journal" / segment_name(1)).write_bytes(b"old")  # before the checkpoint
    assert kinds(tmp_path) == [
        ("dangling index file", "00000000000000999999.idx"),
        ("orphan ledger directory", "persistent%3A%2F%2Fpublic%2Fdefault%2Fgone"),
        ("orphan ledger directory", "persistent%3A%2F%2Fpublic%2Fdefault%2Fgone-too"),
        ("orphan partition row", f"topics row {NS}p-partition-5"),
        ("stale journal segment", segment_name(1)),
        ("temp file", "name.tmp"),
        ("unknown file", "notes.txt"),
    ]
    out = io.StringIO()
    assert run_storage_check(tmp_path, out=out) == 1
    text = out.getvalue()
    assert "run with --delete" in text and "[report only]" in text and "gone-too" in text

    out = io.StringIO()
    assert run_storage_check(tmp_path, delete=True, out=out) == 1  # notes.txt stays: report only
    assert "deleted 6" in out.getvalue()
    assert kinds(tmp_path) == [("unknown file", "notes.txt")]
    (live_dir / "notes.txt").unlink()
    assert main(["--data-dir", str(tmp_path)]) == 0

    async def after() -> None:
        store = MetadataStore(tmp_path / "metadata.db")
        await store.start()
        try:
            assert not await store.topic_exists(NS + "p-partition-5")
            assert await store.topic_exists(NS + "p-partition-1")
        finally:
            await store.close()
        async with started(tmp_path) as storage:
            assert storage.ledger_names_on_disk() == [NS + "live", NS + "live#compacted", NS + "p-partition-1"]
            for name in storage.ledger_names_on_disk():
                assert [d for _, d in await read_everything(storage, name)] == [payload(1, 1000)]

    run(after())


def test_refuses_to_delete_while_a_broker_holds_the_directory(tmp_path: Path) -> None:
    from velamq.cli._storage_check import run_storage_check

    run(build(tmp_path))

    async def main_() -> None:
        async with started(tmp_path):
            out = io.StringIO()
            assert run_storage_check(tmp_path, delete=True, out=out) == 2
            assert "broker is running" in out.getvalue()
            out = io.StringIO()
            assert run_storage_check(tmp_path, out=out) == 1  # the report alone still works
            assert "report may be stale" in out.getvalue()

    run(main_())
    assert len(list((tmp_path / "ledgers").iterdir())) == 5  # nothing was deleted


def test_without_a_metadata_store_no_ledger_counts_as_orphaned(tmp_path: Path) -> None:
    from velamq.cli._storage_check import main, run_storage_check

    async def main_() -> None:
        async with started(tmp_path) as storage:
            await (await storage.open_ledger(NS + "t")).append(b"x")

    run(main_())
    out = io.StringIO()
    assert run_storage_check(tmp_path, delete=True, out=out) == 0
    assert "cannot tell which topics are live" in out.getvalue()
    assert len(list((tmp_path / "ledgers").iterdir())) == 1
    assert main(["--data-dir", str(tmp_path / "missing")]) == 2
