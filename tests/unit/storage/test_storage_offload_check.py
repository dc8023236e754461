"""velamq admin storage check among offloaded files (TS-5): a file no offloaded ledger owns (an
offload cut short, a deletion the store refused), a temp file, and an offloaded copy gone missing
are found; --delete removes the first two and reports the third; a complete offload is left alone."""

from __future__ import annotations

import io
from pathlib import Path

from _offload_entries import mixed_entries, offloading
from _storage_testing import TOPIC, run
from test_storage_offload import offload_config, offloaded

from velamq.metadata import MetadataStore
from velamq.storage.offload._store import topic_dir


async def build(data_dir: Path) -> list[int]:
    store = MetadataStore(data_dir / "metadata.db")
    await store.start()
    try:
        await store.create_topic(TOPIC)
    finally:
        await store.close()
    root = data_dir / "offloaded"
    async with offloading(data_dir, ledger_entries_max=5, offload=offload_config(root, deletion_lag_ms=0)) as st:
        ml = await st.open_ledger(TOPIC)
        positions = [await ml.append(e) for e in mixed_entries(16)]
        await offloaded(st, ml, positions[-1])
        await st.flush()
        await st.check_offload()
        return [i.ledger_id for i in ml.ledgers()]


def test_orphaned_temp_and_missing_offloaded_files(tmp_path: Path) -> None:
    from velamq.cli._storage_check import check_storage, run_storage_check

    ids = run(build(tmp_path))
    directory = tmp_path / "offloaded" / topic_dir(TOPIC)
    assert [f.kind for f in check_storage(tmp_path).offloaded] == []  # a complete offload: nothing
    stray = directory / "ledger-00000000000000009999.parquet"
    stray.write_bytes(b"PAR1 of a ledger nobody has")
    (directory / ".ledger-00000000000000000003.parquet.writing").write_bytes(b"torn")
    (directory / "_manifests" / f"ledger-{ids[0]:020d}.json").unlink()  # a local copy is gone too
    found = sorted((f.kind, f.deletable) for f in check_storage(tmp_path).offloaded)
    assert found == [("missing offloaded file", False), ("orphan offloaded file", True), ("temp file", True)]
    out = io.StringIO()
    assert run_storage_check(tmp_path, delete=True, out=out) == 1, out.getvalue()  # the missing one stays
    assert "deleted 2" in out.getvalue()
    assert not stray.exists() and not list(directory.glob(".*"))
    assert [f.kind for f in check_storage(tmp_path).offloaded] == ["missing offloaded file"]
