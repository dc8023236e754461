"""Deletion marks (crash-safe topic deletes): marked in one transaction, listed, finished with the
topic's rows and policies; finishing twice or finishing a topic whose rows are gone is harmless."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from velamq.metadata import MetadataStore

NS = "persistent://public/default/"


def rows(db: Path, table: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [str(r[0]) for r in conn.execute(f"SELECT name FROM {table} ORDER BY name")]


def test_marks_are_listed_until_finished_with_the_rows(tmp_path: Path) -> None:
    db = tmp_path / "metadata.db"

    async def main() -> None:
        store = MetadataStore(db)
        await store.start()
        try:
            await store.create_topic(NS + "t")
            await store.set_topic_policy(NS + "t", "messageTTLInSeconds", 60)
            await store.create_partitioned_topic(NS + "p", 2)
            await store.create_topic(NS + "p-partition-0")
            await store.set_topic_policy(NS + "p", "messageTTLInSeconds", 30)
            await store.mark_topics_deleting([NS + "t"])
            await store.mark_topics_deleting([NS + "p-partition-0", NS + "p-partition-1"], [NS + "p"])
            await store.mark_topics_deleting([NS + "t"])  # again: nothing changes
            assert await store.topics_being_deleted() == [
                (NS + "p-partition-0", False), (NS + "p-partition-1", False), (NS + "t", False), (NS + "p", True),
            ]
            assert await store.topic_exists(NS + "t")  # marked, not yet gone
            await store.finish_topic_deletion(NS + "t")
            await store.finish_topic_deletion(NS + "t")  # a crash between two finishes: harmless
            for name, partitioned in await store.topics_being_deleted():
                await store.finish_topic_deletion(name, partitioned)
            assert await store.topics_being_deleted() == []
            assert await store.get_partitions(NS + "p") == 0
            assert await store.list_topics("public/default") == []
        finally:
            await store.close()

    asyncio.run(main())
    assert rows(db, "topic_policies") == [] and rows(db, "topic_deletions") == []
