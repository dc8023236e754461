"""The schema registry: every version of every topic's schema, in the metadata store's SQLite file.

One table, one row per version (a deletion is a row too):

    schemas   schema_id TEXT, version INTEGER        PK: "tenant/ns/name" (see schema_id()), 0, 1, 2 ...
              namespace TEXT                         "tenant/ns": listing, and the namespace's cleanup
              type TEXT                              Pulsar's SchemaType name; NONE on a deletion row
              data BLOB, properties JSON, hash BLOB  definition, {str: str}, SHA-256 of data
              timestamp_ms INTEGER, deleted INTEGER  when stored; 1 on a deletion row

Pulsar's semantics: a DELETE of the schema (admin API) appends a deletion row, after which the topic
has no schema and the next registration is a new history starting at the next version number; the
versions before it can no longer be read. Deleting the topic removes every row (`hard_delete`).

The operations are plain functions of a sqlite3 connection, so that they run in the metadata store's
one SQLite thread (`SqliteWorker`), each inside its own SAVEPOINT of a group-committed transaction:
deciding and storing a new version is one atomic step, so two producers racing to register the same
schema get one version, and the compatibility check's CPU work stays off the event loop.
`SchemaRegistry` is the awaitable face of them, built on the worker's `run`; the table is created
with the store's others (_schema.py).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from velamq._clock import Clock, system_clock
from velamq._topic_name import TopicName
from velamq.metadata._schema_compat import (
    ExistingVersion,
    NewVersion,
    check_compatible,
    decide_consumer,
    decide_producer,
    find_version,
    validate,
)
from velamq.metadata._schema_info import (
    SchemaData,
    SchemaType,
    StoredSchema,
    Strategy,
    live_history,
    schema_id,
)

T = TypeVar("T")
Runner = Callable[[Callable[[sqlite3.Connection], T]], Awaitable[T]]

# ------------------------------------------------------------------------------ rows


def history(conn: sqlite3.Connection, sid: str) -> list[StoredSchema]:
    """Every version of `sid`, deletions included, oldest first."""
    rows = conn.execute(
        "SELECT version, type, data, properties, timestamp_ms, deleted FROM schemas "
        "WHERE schema_id = ? ORDER BY version",
        (sid,),
    )
    return [_stored(row) for row in rows]


def _stored(row: tuple[Any, ...]) -> StoredSchema:
    version, type_name, data, properties, timestamp_ms, deleted = row
    props = json.loads(properties)
    return StoredSchema(
        version=int(version),
        schema=SchemaData(SchemaType[type_name], bytes(data), {str(k): str(v) for k, v in props.items()}),
        timestamp_ms=int(timestamp_ms),
        deleted=bool(deleted),
    )


def _insert(conn: sqlite3.Connection, sid: str, namespace: str, stored: StoredSchema) -> None:
    schema = stored.schema
    conn.execute(
        "INSERT INTO schemas(schema_id, version, namespace, type, data, properties, hash, timestamp_ms, deleted) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (sid, stored.version, namespace, schema.type.name, schema.data,
         json.dumps(dict(schema.properties), sort_keys=True), schema.hash, stored.timestamp_ms, int(stored.deleted)),
    )


# ------------------------------------------------------------------------------ operations


def register(
    conn: sqlite3.Connection, sid: str, namespace: str, schema: SchemaData, strategy: Strategy,
    allow_auto_update: bool, now_ms: int,
) -> tuple[int, bool]:
    """The version of `schema` for a producer: (version, True if stored just now). Raises
    IncompatibleSchemaError / InvalidSchemaDataError (see decide_producer)."""
    decision = decide_producer(history(conn, sid), schema, strategy, allow_auto_update)
    return _apply(conn, sid, namespace, decision, now_ms)


def register_for_consumer(
    conn: sqlite3.Connection, sid: str, namespace: str, schema: SchemaData, strategy: Strategy,
    topic_active: bool, allow_auto_update: bool, now_ms: int,
) -> int | None:
    """Check (and on an idle topic without schema, register) a consumer's schema: the version it
    registered, or None if it only checked. Raises as decide_consumer does."""
    decision = decide_consumer(history(conn, sid), schema, strategy, topic_active, allow_auto_update)
    if decision is None:
        return None
    return _apply(conn, sid, namespace, decision, now_ms)[0]


def _apply(
    conn: sqlite3.Connection, sid: str, namespace: str, decision: ExistingVersion | NewVersion, now_ms: int
) -> tuple[int, bool]:
    if isinstance(decision, ExistingVersion):
        return decision.version, False
    _insert(conn, sid, namespace, StoredSchema(decision.version, decision.schema, now_ms))
    return decision.version, True


def get(conn: sqlite3.Connection, sid: str, version: int | None = None) -> StoredSchema | None:
    """The latest live version (None if there is none or the latest is a deletion), or the given one
    if it is live (versions before the last deletion cannot be read, as in Pulsar)."""
    live = live_history(history(conn, sid))
    if version is None:
        return live[-1] if live else None
    return next((s for s in live if s.version == version), None)


def versions(conn: sqlite3.Connection, sid: str) -> list[StoredSchema]:
    """The live versions, oldest first (the admin API's "all schemas")."""
    return live_history(history(conn, sid))


def find(conn: sqlite3.Connection, sid: str, schema: SchemaData) -> int | None:
    """The live version equal to `schema`, or None."""
    validate(schema)
    return find_version(versions(conn, sid), schema)


def compatible(conn: sqlite3.Connection, sid: str, schema: SchemaData, strategy: Strategy) -> None:
    """IncompatibleSchemaError unless `strategy` would accept `schema` (nothing is stored)."""
    check_compatible(versions(conn, sid), schema, strategy)


def soft_delete(conn: sqlite3.Connection, sid: str, namespace: str, now_ms: int) -> int | None:
    """Append a deletion version (the admin API's DELETE): the version number it took. Deleting a
    history whose latest version is a deletion already adds nothing and answers that version; with
    no history at all there is nothing to delete: None (as Pulsar, which then stores nothing)."""
    rows = history(conn, sid)
    if not rows:
        return None
    if rows[-1].deleted:
        return rows[-1].version
    version = rows[-1].version + 1
    _insert(conn, sid, namespace, StoredSchema(version, SchemaData(SchemaType.NONE), now_ms, deleted=True))
    return version


def hard_delete(conn: sqlite3.Connection, sid: str) -> int:
    """Remove every version of `sid` (the topic is deleted); the number of rows removed."""
    return conn.execute("DELETE FROM schemas WHERE schema_id = ?", (sid,)).rowcount


def delete_namespace(conn: sqlite3.Connection, namespace: str) -> int:
    return conn.execute("DELETE FROM schemas WHERE namespace = ?", (namespace,)).rowcount


def list_ids(conn: sqlite3.Connection, namespace: str) -> list[str]:
    """Schema ids with any row in `namespace`, sorted (for the storage checker and listings)."""
    rows = conn.execute("SELECT DISTINCT schema_id FROM schemas WHERE namespace = ? ORDER BY schema_id", (namespace,))
    return [str(row[0]) for row in rows]


# ------------------------------------------------------------------------------ awaitable face


class SchemaRegistry:
    """Versioned schemas per topic, awaited from the event loop; every call runs one operation above
    through `run` (the metadata store's SqliteWorker.run). Topic names are checked and turned into
    schema ids here, so a bad name fails fast with InvalidTopicNameError; a partition's name gives
    its partitioned topic's history."""

    def __init__(self, run: Runner[Any], clock: Clock = system_clock, read: Runner[Any] | None = None) -> None:
        """run: runs an operation that may write; read: one that only reads (default: run)."""
        self._run = run
        self._read_runner = read or run
        self._clock = clock

    async def _call(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        result: T = await self._run(functools.partial(fn, **kwargs))
        return result

    async def _read(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        result: T = await self._read_runner(functools.partial(fn, **kwargs))
        return result

    @staticmethod
    def _ids(topic: str) -> dict[str, str]:
        return {"sid": schema_id(topic), "namespace": TopicName.parse(topic).namespace}

    async def register(
        self, topic: str, schema: SchemaData, strategy: Strategy, allow_auto_update: bool = True
    ) -> tuple[int, bool]:
        return await self._call(
            register, **self._ids(topic), schema=schema, strategy=strategy,
            allow_auto_update=allow_auto_update, now_ms=self._clock.now_ms(),
        )

    async def register_for_consumer(
        self, topic: str, schema: SchemaData, strategy: Strategy, topic_active: bool, allow_auto_update: bool = True
    ) -> int | None:
        return await self._call(
            register_for_consumer, **self._ids(topic), schema=schema, strategy=strategy,
            topic_active=topic_active, allow_auto_update=allow_auto_update, now_ms=self._clock.now_ms(),
        )

    async def get(self, topic: str, version: int | None = None) -> StoredSchema | None:
        return await self._read(get, sid=schema_id(topic), version=version)

    async def versions(self, topic: str) -> list[StoredSchema]:
        return await self._read(versions, sid=schema_id(topic))

    async def history(self, topic: str) -> list[StoredSchema]:
        return await self._read(history, sid=schema_id(topic))

    async def find(self, topic: str, schema: SchemaData) -> int | None:
        return await self._read(find, sid=schema_id(topic), schema=schema)

    async def check_compatible(self, topic: str, schema: SchemaData, strategy: Strategy) -> None:
        await self._read(compatible, sid=schema_id(topic), schema=schema, strategy=strategy)

    async def delete(self, topic: str) -> int | None:
        return await self._call(soft_delete, **self._ids(topic), now_ms=self._clock.now_ms())

    async def delete_all(self, topic: str) -> int:
        return await self._call(hard_delete, sid=schema_id(topic))

    async def list_ids(self, namespace: str) -> list[str]:
        return await self._read(list_ids, namespace=namespace)
