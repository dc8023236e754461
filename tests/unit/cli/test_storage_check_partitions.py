"""The storage checker and the broker share one rule for `-partition-N` names: such a topic row
without a partitioned parent is an ordinary topic (as in Pulsar), so neither it nor its ledger is
reported as an orphan; a row beyond its partitioned topic's count is."""

from __future__ import annotations

import asyncio
from pathlib import Path

from velamq.metadata import MetadataStore
from velamq.storage import Storage, StorageConfig

NS = "persistent://public/default/"


async def build(data_dir: Path) -> None:
    store = MetadataStore(data_dir / "metadata.db")
    await store.start()
    try:
        await store.create_topic(NS + "bar-partition-3")  # no partitioned "bar": ordinary
        await store.create_partitioned_topic(NS + "p", 2)
        await store.create_topic(NS + "p-partition-1")
        await store.create_topic(NS + "p-partition-5")  # beyond p's 2 partitions
    finally:
        await store.close()
    storage = Storage(StorageConfig(data_dir, sync_policy="none"))
    await storage.start()
    try:
        for name in ("bar-partition-3", "p-partition-1"):
            ml = await storage.open_ledger(NS + name)
            await ml.append(b"entry")
    finally:
        await storage.close()


def test_an_ordinary_partition_named_topic_is_not_an_orphan(tmp_path: Path) -> None:
    from velamq.cli._storage_check import check_storage  # imported late: see test_storage_check.py

    asyncio.run(build(tmp_path))
    report = check_storage(tmp_path)
    findings = [(f.kind, f.detail) for f in report.findings]
    assert findings == [("orphan partition row", f"topics row {NS}p-partition-5: {NS}p has 2 partitions")]
