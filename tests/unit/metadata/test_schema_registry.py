"""The schema registry on a real SQLite file, through the metadata store's own SQLite worker thread."""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from velamq._errors import InvalidTopicNameError
from velamq.metadata._schema import connect
from velamq.metadata._schema_info import (
    InvalidSchemaDataError,
    SchemaCompatibilityError,
    SchemaData,
    SchemaType,
    Strategy,
    schema_id,
)
from velamq.metadata._schema_registry import SchemaRegistry
from velamq.metadata._worker import SqliteWorker

T = "persistent://public/default/orders"
Body = Callable[[SchemaRegistry], Awaitable[Any]]


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def now_ms(self) -> int:
        self.ms += 1
        return self.ms

    def monotonic_s(self) -> float:
        return self.ms / 1000


def run(path: Path, body: Body, clock: FakeClock | None = None) -> Any:
    """Open the store file at `path` in a SqliteWorker, start a registry on it, run `body`, close."""

    async def main() -> Any:
        worker = SqliteWorker(functools.partial(connect, path))
        await worker.start()
        registry = SchemaRegistry(worker.run, clock or FakeClock())
        try:
            return await body(registry)
        finally:
            await worker.close()

    return asyncio.run(main())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "metadata.db"


def avro(*fields: tuple[str, Any], **defaults: Any) -> SchemaData:
    body = [{"name": n, "type": t, **({"default": defaults[n]} if n in defaults else {})} for n, t in fields]
    return SchemaData(SchemaType.AVRO, json.dumps({"type": "record", "name": "Order", "fields": body}).encode(),
                      {"owner": "shop"})


V0 = avro(("id", "long"))
V1 = avro(("id", "long"), ("note", "string"), note="")


def test_versions_survive_closing_and_reopening_the_file(db: Path) -> None:
    async def first(r: SchemaRegistry) -> Any:
        return [await r.register(T, V0, Strategy.FULL), await r.register(T, V1, Strategy.FULL),
                await r.register(T, V0, Strategy.FULL)]

    assert run(db, first) == [(0, True), (1, True), (0, False)]

    async def second(r: SchemaRegistry) -> Any:
        latest = await r.get(T)
        first_version = await r.get(T, 0)
        return latest, first_version, [s.version for s in await r.versions(T)]

    latest, first_version, versions = run(db, second)
    assert latest is not None and latest.version == 1 and latest.schema == V1 and not latest.deleted
    assert first_version is not None and first_version.schema == V0
    assert first_version.schema.properties == {"owner": "shop"} and first_version.timestamp_ms > 1_700_000_000_000
    assert versions == [0, 1]


def test_partitions_share_their_partitioned_topics_history(db: Path) -> None:
    async def body(r: SchemaRegistry) -> Any:
        await r.register(f"{T}-partition-0", V0, Strategy.FULL)
        again = await r.register(f"{T}-partition-3", V0, Strategy.FULL)
        stored = await r.get(T)
        also_non_persistent = await r.get("non-persistent://public/default/orders")
        return again, stored, also_non_persistent

    again, stored, also_non_persistent = run(db, body)
    assert again == (0, False)
    assert stored is not None and stored.version == 0
    assert also_non_persistent == stored  # Pulsar's schema id has no domain
    assert schema_id(f"{T}-partition-7") == "public/default/orders"


def test_incompatible_and_invalid_schemas_store_nothing(db: Path) -> None:
    async def body(r: SchemaRegistry) -> Any:
        await r.register(T, V0, Strategy.FULL)
        with pytest.raises(SchemaCompatibilityError):
            await r.register(T, avro(("id", "string")), Strategy.FULL)
        with pytest.raises(InvalidSchemaDataError):
            await r.register(T, SchemaData(SchemaType.AVRO, b"{"), Strategy.FULL)
        with pytest.raises(SchemaCompatibilityError, match="auto updating is disabled"):
            await r.register(T, V1, Strategy.FULL, allow_auto_update=False)
        return await r.history(T)

    assert [s.version for s in run(db, body)] == [0]


def test_soft_delete_then_a_new_history_after_it(db: Path) -> None:
    async def body(r: SchemaRegistry) -> Any:
        await r.register(T, V0, Strategy.FULL)
        await r.register(T, V1, Strategy.FULL)
        deleted_at = await r.delete(T)
        repeated = await r.delete(T)
        after_delete = (await r.get(T), await r.get(T, 0), await r.versions(T))
        # Incompatible with the deleted versions, but they no longer count.
        fresh = await r.register(T, avro(("id", "string")), Strategy.FULL_TRANSITIVE)
        return deleted_at, repeated, after_delete, fresh, await r.history(T), await r.versions(T)

    deleted_at, repeated, after_delete, fresh, history, live = run(db, body)
    assert deleted_at == 2 and repeated == 2
    assert after_delete == (None, None, [])
    assert fresh == (3, True)
    assert [(s.version, s.deleted, s.schema.type.name) for s in history] == [
        (0, False, "AVRO"), (1, False, "AVRO"), (2, True, "NONE"), (3, False, "AVRO")
    ]
    assert [s.version for s in live] == [3]


def test_hard_delete_removes_every_row_and_versions_start_again(db: Path) -> None:
    async def body(r: SchemaRegistry) -> Any:
        await r.register(T, V0, Strategy.FULL)
        await r.delete(T)
        await r.register(T, V1, Strategy.FULL)
        await r.register("persistent://public/default/other", V0, Strategy.FULL)
        removed = await r.delete_all(f"{T}-partition-1")
        return removed, await r.history(T), await r.register(T, V1, Strategy.FULL), await r.list_ids("public/default")

    removed, history, again, ids = run(db, body)
    assert removed == 3 and history == []
    assert again == (0, True)
    assert ids == ["public/default/orders", "public/default/other"]

    with sqlite3.connect(db) as conn:  # nothing left behind but the rows of live schemas
        rows = conn.execute("SELECT schema_id, version FROM schemas ORDER BY schema_id, version").fetchall()
    assert rows == [("public/default/orders", 0), ("public/default/other", 0)]


def test_consumer_registers_only_on_an_idle_topic_without_schema(db: Path) -> None:
    async def body(r: SchemaRegistry) -> Any:
        refused_active = None
        try:
            await r.register_for_consumer(T, V0, Strategy.FULL, topic_active=True)
        except SchemaCompatibilityError as exc:
            refused_active = str(exc)
        registered = await r.register_for_consumer(T, V0, Strategy.FULL, topic_active=False)
        checked = await r.register_for_consumer(T, V1, Strategy.FULL, topic_active=True)
        return refused_active, registered, checked, [s.version for s in await r.versions(T)]

    refused_active, registered, checked, versions = run(db, body)
    assert refused_active is not None and "active topic" in refused_active
    assert registered == 0 and checked is None and versions == [0]


def test_compatibility_test_and_find_store_nothing(db: Path) -> None:
    async def body(r: SchemaRegistry) -> Any:
        await r.register(T, V0, Strategy.FULL)
        await r.check_compatible(T, V1, Strategy.FULL)
        with pytest.raises(SchemaCompatibilityError):
            await r.check_compatible(T, avro(("id", "int")), Strategy.FULL)
        return await r.find(T, V0), await r.find(T, V1), await r.versions(T)

    found_v0, found_v1, versions = run(db, body)
    assert (found_v0, found_v1, len(versions)) == (0, None, 1)


def test_racing_registrations_of_one_schema_get_one_version(db: Path) -> None:
    async def body(r: SchemaRegistry) -> Any:
        results = await asyncio.gather(*(r.register(f"{T}-partition-{i % 4}", V1, Strategy.FULL) for i in range(40)))
        return results, await r.history(T)

    results, history = run(db, body)
    assert {version for version, _ in results} == {0}
    assert sum(created for _, created in results) == 1
    assert len(history) == 1


def test_a_bad_topic_name_fails_before_reaching_the_store(db: Path) -> None:
    async def body(r: SchemaRegistry) -> Any:
        with pytest.raises(InvalidTopicNameError):
            await r.register("persistent://only-two/parts", V0, Strategy.FULL)

    run(db, body)


def test_tables_are_created_once_and_coexist_with_the_store_schema(db: Path) -> None:
    run(db, lambda r: r.register(T, V0, Strategy.FULL))
    run(db, lambda r: r.register(T, V0, Strategy.FULL))  # a second opening of the file changes nothing
    with sqlite3.connect(db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        count = conn.execute("SELECT COUNT(*) FROM schemas").fetchone()[0]
    assert {"schemas", "topics", "namespaces", "meta"} <= tables and count == 1
