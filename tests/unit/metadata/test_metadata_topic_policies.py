"""Topic policies in the store: set, read, partitions share their topic's, and no rows outlive the topic (BR-8)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from velamq._errors import InvalidTopicNameError, MetadataError, NotFoundError, PreconditionFailedError
from velamq.metadata import MetadataStore
from velamq.metadata._schema import SCHEMA_VERSION

T = "persistent://public/default/t"


def run(path: Path, body: Callable[[MetadataStore], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        store = MetadataStore(path)
        await store.start()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "metadata.db"


def rows(db: Path, table: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def test_set_get_replace_remove(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_topic(T)
        assert await s.get_topic_policies(T) == {}
        await s.set_topic_policy(T, "messageTTLInSeconds", 60)
        await s.set_topic_policy(T, "retentionPolicies", {"retentionTimeInMinutes": 1, "retentionSizeInMB": 2})
        await s.set_topic_policy(T, "messageTTLInSeconds", 90)
        assert await s.get_topic_policies(T) == {
            "messageTTLInSeconds": 90,
            "retentionPolicies": {"retentionTimeInMinutes": 1, "retentionSizeInMB": 2},
        }
        await s.set_topic_policy(T, "messageTTLInSeconds", None)
        await s.set_topic_policy(T, "notThere", None)
        assert await s.get_topic_policies(T) == {
            "retentionPolicies": {"retentionTimeInMinutes": 1, "retentionSizeInMB": 2}
        }
        # Short names resolve like everywhere else.
        assert await s.get_topic_policies("t") == await s.get_topic_policies(T)
        assert await s.list_topic_policies("public/default") == [T]
        await s.set_topic_policy(T, "retentionPolicies", None)
        assert await s.list_topic_policies("public/default") == []

    run(db, body)
    assert rows(db, "topic_policies") == 0  # nothing set: no row at all


def test_policies_survive_restart(db: Path) -> None:
    async def first(s: MetadataStore) -> None:
        await s.create_topic(T)
        await s.set_topic_policy(T, "deduplicationEnabled", True)

    async def second(s: MetadataStore) -> None:
        assert await s.get_topic_policies(T) == {"deduplicationEnabled": True}

    run(db, first)
    run(db, second)


def test_unknown_topic(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        assert await s.get_topic_policies(T) == {}
        with pytest.raises(NotFoundError):
            await s.set_topic_policy(T, "maxMessageSize", 10)
        with pytest.raises(NotFoundError):
            await s.set_topic_policy("persistent://public/nope/t", "maxMessageSize", 10)
        await s.create_topic(T)
        with pytest.raises(PreconditionFailedError):
            await s.set_topic_policy(T, "", 1)
        with pytest.raises(InvalidTopicNameError):
            await s.set_topic_policy("persistent://a/b/c/d/e", "x", 1)

    run(db, body)


def test_partitions_share_their_partitioned_topics_policies(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_partitioned_topic(T, 3)
        await s.set_topic_policy(T, "maxProducerPerTopic", 2)
        # A partition that was never created still reads (and writes) its topic's policies.
        assert await s.get_topic_policies(f"{T}-partition-2") == {"maxProducerPerTopic": 2}
        await s.set_topic_policy(f"{T}-partition-1", "maxConsumerPerTopic", 4)
        assert await s.get_topic_policies(T) == {"maxProducerPerTopic": 2, "maxConsumerPerTopic": 4}
        assert await s.list_topic_policies("public/default") == [T]

    run(db, body)


def test_deleting_a_topic_removes_its_policies(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_topic(T)
        await s.set_topic_policy(T, "messageTTLInSeconds", 60)
        await s.delete_topic(T)
        assert await s.get_topic_policies(T) == {}
        await s.create_topic(T)  # a new topic of the same name starts clean
        assert await s.get_topic_policies(T) == {}

    run(db, body)
    assert rows(db, "topic_policies") == 0


def test_deleting_a_partition_keeps_the_topics_policies(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_partitioned_topic(T, 2)
        await s.create_topic(f"{T}-partition-0")
        await s.set_topic_policy(T, "messageTTLInSeconds", 60)
        await s.delete_topic(f"{T}-partition-0")
        assert await s.get_topic_policies(T) == {"messageTTLInSeconds": 60}
        await s.delete_partitioned_topic(T)
        assert await s.get_topic_policies(T) == {}

    run(db, body)
    assert rows(db, "topic_policies") == 0
    assert rows(db, "topics") == 0


def test_namespace_deletion_leaves_no_policy_rows(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_namespace("public/ns")
        name = "persistent://public/ns/x"
        await s.create_topic(name)
        await s.set_topic_policy(name, "maxMessageSize", 1000)
        await s.set_policy("public/ns", "message_ttl_in_seconds", 5)
        await s.delete_topic(name)
        await s.delete_namespace("public/ns")

    run(db, body)
    assert rows(db, "topic_policies") == 0


def test_version_1_file_is_upgraded(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")

    async def body(s: MetadataStore) -> None:
        await s.create_topic(T)
        await s.set_topic_policy(T, "maxMessageSize", 1000)

    run(db, body)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION) == "5"


def test_newer_file_is_refused(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '99')")
    with pytest.raises(MetadataError, match="newer"):
        run(db, lambda s: asyncio.sleep(0))
