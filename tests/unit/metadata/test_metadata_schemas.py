"""Schemas in the metadata store: kept in its file, and gone with the last topic of their schema id."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from velamq.metadata import MetadataStore, SchemaData, SchemaType, Strategy
from velamq.metadata._schema import SCHEMA_VERSION

T = "persistent://public/default/orders"
SCHEMA = SchemaData(
    SchemaType.AVRO,
    json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}).encode(),
)


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


def schema_rows(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return [(str(r[0]), int(r[1])) for r in conn.execute("SELECT schema_id, version FROM schemas ORDER BY 1, 2")]


def test_schemas_survive_reopening_the_store(db: Path) -> None:
    async def register(s: MetadataStore) -> tuple[int, bool]:
        await s.create_topic(T)
        return await s.schemas.register(T, SCHEMA, Strategy.FULL)

    assert run(db, register) == (0, True)

    async def read(s: MetadataStore) -> Any:
        stored = await s.schemas.get(T)
        return None if stored is None else (stored.version, stored.schema.data)

    assert run(db, read) == (0, SCHEMA.data)


def test_deleting_the_topic_deletes_its_schemas(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_topic(T)
        await s.schemas.register(T, SCHEMA, Strategy.FULL)
        await s.delete_topic(T)

    run(db, body)
    assert schema_rows(db) == []


def test_the_other_domain_keeps_the_shared_history(db: Path) -> None:
    other = T.replace("persistent://", "non-persistent://")

    async def body(s: MetadataStore) -> Any:
        await s.create_topic(T)
        await s.create_topic(other)
        await s.schemas.register(T, SCHEMA, Strategy.FULL)
        await s.delete_topic(T)
        kept = await s.schemas.get(other)
        await s.delete_topic(other)
        return kept is not None

    assert run(db, body) is True
    assert schema_rows(db) == []


def test_a_partition_keeps_its_partitioned_topics_history_until_the_topic_goes(db: Path) -> None:
    async def body(s: MetadataStore) -> int:
        await s.create_partitioned_topic(T, 2)
        await s.create_topic(T + "-partition-0")
        await s.schemas.register(T + "-partition-1", SCHEMA, Strategy.FULL)
        await s.delete_topic(T + "-partition-0")
        return len(schema_rows(db))

    assert run(db, body) == 1

    async def drop(s: MetadataStore) -> None:
        await s.delete_partitioned_topic(T)

    run(db, drop)
    assert schema_rows(db) == []


def test_deleting_a_namespace_deletes_schemas_of_topics_never_created(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_namespace("public/ns")
        # The admin API may upload a schema before its topic exists (as Pulsar's does).
        await s.schemas.register("persistent://public/ns/later", SCHEMA, Strategy.FULL)
        await s.delete_namespace("public/ns")

    run(db, body)
    assert schema_rows(db) == []


def test_a_version_2_file_gets_the_schemas_table(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")

    async def body(s: MetadataStore) -> tuple[int, bool]:
        return await s.schemas.register(T, SCHEMA, Strategy.FULL)

    assert run(db, body) == (0, True)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION) == "5"
