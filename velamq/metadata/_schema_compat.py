"""Which schema a topic accepts: Pulsar's schema registry decisions over a topic's history (no I/O).

A topic's history is a list of StoredSchema, oldest first; only the versions after the last deletion
count (`live_history`). Three questions are answered here, each as Pulsar's broker answers it:

- `decide_producer`: a producer (or the admin API, or GET_OR_CREATE_SCHEMA) brings a schema. If an
  equal schema is a live version, that version; else, when auto update is allowed and the strategy
  accepts it, a new version (one after the highest ever used, deletions included); else
  SchemaCompatibilityError. "Equal" is Pulsar's getSchemaVersionBySchemaData: for Avro-based types
  the parsed definitions are equal (whitespace, doc and aliases do not count), for the others the
  type and the SHA-256 of the data (KEY_VALUE: and the key and value types, which Pulsar leaves out).
- `decide_consumer`: a consumer brings a schema. On a topic with a schema it must read the latest
  version (BACKWARD) under BACKWARD, FORWARD, FULL and FORWARD_TRANSITIVE, and satisfy the strategy
  against every version under the other transitive ones; nothing is registered. On an idle topic
  without a schema its schema is registered as a producer's would be; on an active one it is refused.
- `check_compatible`: the strategy's check alone (the admin API's "compatibility" call).

Strategies compare with the latest live version (plain forms) or with all of them (_TRANSITIVE);
ALWAYS_COMPATIBLE accepts anything, even another type; ALWAYS_INCOMPATIBLE refuses every change.
Otherwise the types must be equal, an identical schema is always compatible, and the type decides the
check: AVRO and JSON by the Avro resolution rules (`_avro_resolution`), KEY_VALUE by checking key and
value schemas each with their own type's check, PROTOBUF_NATIVE by its root message name, every
other type (STRING, INT32, PROTOBUF, ...) only by its type. Schema data is validated first, as
Pulsar's SchemaDataValidator does (InvalidSchemaDataError).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from velamq.metadata._avro_resolution import ParsedAvro, canonical, parse_avro, resolution_problem
from velamq.metadata._schema_info import (
    InvalidSchemaDataError,
    SchemaCompatibilityError,
    SchemaData,
    SchemaType,
    StoredSchema,
    Strategy,
    key_value_parts,
    live_history,
)

# Parsed definitions kept for reuse: producers of one topic reconnect with the same few schemas.
parsed_cache_entries_max: Final = 256
_CLIENT_SIDE: Final = (SchemaType.AUTO, SchemaType.AUTO_CONSUME, SchemaType.AUTO_PUBLISH)


@dataclass(frozen=True, slots=True)
class ExistingVersion:
    """The schema is already the live version `version`: nothing to store."""

    version: int


@dataclass(frozen=True, slots=True)
class NewVersion:
    """Store `schema` as version `version`."""

    version: int
    schema: SchemaData


Decision = ExistingVersion | NewVersion


@functools.lru_cache(maxsize=parsed_cache_entries_max)
def _parsed(data: bytes) -> ParsedAvro:
    return parse_avro(data)


# --------------------------------------------------------------------------------- validation


def validate(schema: SchemaData) -> None:
    """InvalidSchemaDataError unless the data is well formed for the type (Pulsar's validators)."""
    kind = schema.type
    if kind in (SchemaType.AVRO, SchemaType.PROTOBUF):
        _parsed(schema.data)
    elif kind is SchemaType.JSON:
        _legacy_json(schema)  # an Avro definition, or else a legacy JSON Schema object
    elif kind is SchemaType.PROTOBUF_NATIVE:
        _protobuf_root(schema)
    elif kind is SchemaType.STRING:
        # The official Python client sends "null" (json.dumps(None)) as a STRING schema's data.
        if schema.data not in (b"", b"null"):
            raise InvalidSchemaDataError(f"Invalid schema definition data for string schema: {schema.data!r}")
    elif kind is SchemaType.KEY_VALUE:
        for part in key_value_parts(schema):
            validate(part)
    elif kind in _CLIENT_SIDE:
        raise InvalidSchemaDataError(f"Schema {kind.name} is a client-side schema type")
    elif kind is SchemaType.EXTERNAL:
        raise InvalidSchemaDataError("EXTERNAL schemas (an external schema registry) are not supported by velamq")
    elif kind.primitive and kind not in (SchemaType.NONE, SchemaType.BYTES) and schema.data:
        raise InvalidSchemaDataError(
            f"Invalid schema definition data for primitive schemas: length of schema data should be zero, "
            f"but {len(schema.data)} bytes is found"
        )


def _legacy_json(schema: SchemaData) -> dict[str, Any] | None:
    """A JSON schema in the JSON Schema format of Pulsar before 2.2 (not Avro), or None."""
    try:
        _parsed(schema.data)
        return None
    except InvalidSchemaDataError:
        pass
    try:
        value = json.loads(schema.data)
    except ValueError:
        raise InvalidSchemaDataError("Invalid schema definition data for JSON schema") from None
    if not isinstance(value, dict):
        raise InvalidSchemaDataError("Invalid schema definition data for JSON schema")
    return value


def _protobuf_root(schema: SchemaData) -> str:
    try:
        value = json.loads(schema.data)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(value.get(k), str) for k in ("fileDescriptorSet", "rootMessageTypeName", "rootFileDescriptorName")
    ):
        raise InvalidSchemaDataError(
            "Invalid schema definition data for PROTOBUF_NATIVE schema: expected a JSON object with "
            "fileDescriptorSet, rootMessageTypeName and rootFileDescriptorName"
        )
    return str(value["rootMessageTypeName"])


# --------------------------------------------------------------------------------- equality


def find_version(live: Sequence[StoredSchema], schema: SchemaData) -> int | None:
    """The live version equal to `schema` (Pulsar's getSchemaVersionBySchemaData), or None."""
    wanted = _comparable(schema)
    for stored in live:
        if stored.schema.type is schema.type and _comparable(stored.schema) == wanted:
            return stored.version
    return None


@functools.lru_cache(maxsize=parsed_cache_entries_max)
def _canonical_text(data: bytes) -> str:
    return json.dumps(canonical(_parsed(data)), sort_keys=True)


def _comparable(schema: SchemaData) -> Any:
    if schema.type.avro_based:
        try:
            return ("avro", _canonical_text(schema.data))
        except InvalidSchemaDataError:
            pass  # a legacy JSON schema: compared by its bytes
    if schema.type is SchemaType.KEY_VALUE:
        # The parts' types are properties, which Pulsar's hash leaves out: a STRING key and an INT64
        # key (both with empty data) would be "the same" schema. velamq compares them too.
        key, value = key_value_parts(schema)
        return ("key_value", schema.hash, key.type, value.type)
    return ("hash", schema.hash)


# --------------------------------------------------------------------------------- checks

Checker = Callable[[Sequence[StoredSchema], SchemaData, Strategy], None]


def check_compatible(live: Sequence[StoredSchema], new: SchemaData, strategy: Strategy) -> None:
    """SchemaCompatibilityError unless `strategy` accepts `new` after the live versions `live`."""
    validate(new)
    if not live or strategy is Strategy.ALWAYS_COMPATIBLE:
        return
    if strategy is Strategy.ALWAYS_INCOMPATIBLE:
        raise SchemaCompatibilityError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")
    previous = list(live) if strategy.transitive else [live[-1]]
    for stored in previous:
        if stored.schema.type is not new.type:
            raise SchemaCompatibilityError(
                f"Incompatible schema: exists schema type {stored.schema.type.name}, new schema type {new.type.name}"
            )
    if not strategy.transitive and _comparable(previous[0].schema) == _comparable(new):
        return  # the same schema as the latest (Pulsar compares hashes here)
    _checker(new.type)(previous, new, strategy)


def _checker(kind: SchemaType) -> Checker:
    return _CHECKERS.get(kind, _type_only)


def _type_only(previous: Sequence[StoredSchema], new: SchemaData, strategy: Strategy) -> None:
    """Pulsar's default check: the types are equal already, nothing else to compare."""


def _avro(previous: Sequence[StoredSchema], new: SchemaData, strategy: Strategy) -> None:
    try:
        reader_new = _parsed(new.data)
    except InvalidSchemaDataError as exc:
        raise SchemaCompatibilityError(f"Incompatible schema: {exc}") from None
    for stored in reversed(previous):
        try:
            old = _parsed(stored.schema.data)
        except InvalidSchemaDataError as exc:
            raise SchemaCompatibilityError(f"Incompatible schema: version {stored.version}: {exc}") from None
        if strategy.new_reads_old:
            problem = resolution_problem(old, reader_new)
            if problem is not None:
                raise SchemaCompatibilityError(
                    f"Incompatible schema ({strategy.value}): the new schema cannot read data written with "
                    f"version {stored.version}: {problem}"
                )
        if strategy.old_reads_new:
            problem = resolution_problem(reader_new, old)
            if problem is not None:
                raise SchemaCompatibilityError(
                    f"Incompatible schema ({strategy.value}): version {stored.version} cannot read data written "
                    f"with the new schema: {problem}"
                )


def _json(previous: Sequence[StoredSchema], new: SchemaData, strategy: Strategy) -> None:
    """Avro rules when both sides are Avro definitions (what every current client sends). Pulsar lets
    a legacy JSON Schema definition replace an Avro one and the reverse; two legacy ones need equal ids."""
    new_legacy = _legacy_json(new)
    avro_previous = []
    for stored in previous:
        old_legacy = _legacy_json(stored.schema)
        if old_legacy is None and new_legacy is None:
            avro_previous.append(stored)
        elif old_legacy is not None and new_legacy is not None and old_legacy.get("id") != new_legacy.get("id"):
            raise SchemaCompatibilityError(
                f"Incompatible schema: JSON schema id {new_legacy.get('id')!r} differs from version "
                f"{stored.version}'s {old_legacy.get('id')!r}"
            )
    if avro_previous:
        _avro(avro_previous, new, strategy)


def _key_value(previous: Sequence[StoredSchema], new: SchemaData, strategy: Strategy) -> None:
    new_key, new_value = key_value_parts(new)
    keys: list[StoredSchema] = []
    values: list[StoredSchema] = []
    for stored in previous:
        key, value = key_value_parts(stored.schema)
        if key.type is not new_key.type or value.type is not new_value.type:
            raise SchemaCompatibilityError(
                f"Key schemas or Value schemas are different schema type, from key schema type is "
                f"{key.type.name} and to key schema is {new_key.type.name}, from value schema is "
                f"{value.type.name} and to value schema is {new_value.type.name}"
            )
        keys.append(StoredSchema(stored.version, key, stored.timestamp_ms))
        values.append(StoredSchema(stored.version, value, stored.timestamp_ms))
    _checker(new_key.type)(keys, new_key, strategy)
    _checker(new_value.type)(values, new_value, strategy)


def _protobuf_native(previous: Sequence[StoredSchema], new: SchemaData, strategy: Strategy) -> None:
    root = _protobuf_root(new)
    for stored in previous:
        if _protobuf_root(stored.schema) != root:
            raise SchemaCompatibilityError(
                f"Protobuf root message isn't allow change! (version {stored.version}: "
                f"{_protobuf_root(stored.schema)}, new: {root})"
            )


_CHECKERS: Final[dict[SchemaType, Checker]] = {
    SchemaType.AVRO: _avro,
    SchemaType.JSON: _json,
    SchemaType.KEY_VALUE: _key_value,
    SchemaType.PROTOBUF_NATIVE: _protobuf_native,
}


# --------------------------------------------------------------------------------- decisions


def next_version(history: Sequence[StoredSchema]) -> int:
    """Versions are never reused: one after the highest so far, deletion markers included."""
    return history[-1].version + 1 if history else 0


def decide_producer(
    history: list[StoredSchema], new: SchemaData, strategy: Strategy, allow_auto_update: bool = True
) -> Decision:
    """The version a producer with schema `new` gets, or SchemaCompatibilityError."""
    validate(new)
    live = live_history(history)
    existing = find_version(live, new)
    if existing is not None:
        return ExistingVersion(existing)
    if not allow_auto_update:
        raise SchemaCompatibilityError("Schema not found and schema auto updating is disabled.")
    check_compatible(live, new, strategy)
    return NewVersion(next_version(history), new)


def decide_consumer(
    history: list[StoredSchema],
    new: SchemaData,
    strategy: Strategy,
    topic_active: bool,
    allow_auto_update: bool = True,
) -> Decision | None:
    """What a consumer with schema `new` means: None (accepted, nothing to store), a version to
    register (the topic had no schema and was idle), or SchemaCompatibilityError. `topic_active`: the
    topic has producers, consumers other than AUTO_CONSUME ones, or stored entries."""
    validate(new)
    live = live_history(history)
    if not live:
        if topic_active:
            raise SchemaCompatibilityError(
                f"Failed to add schema to an active topic with empty(BYTES) schema: new schema type {new.type.name}"
            )
        return decide_producer(history, new, strategy, allow_auto_update)
    if strategy is Strategy.ALWAYS_COMPATIBLE:
        return None
    if strategy in (Strategy.BACKWARD, Strategy.FORWARD, Strategy.FORWARD_TRANSITIVE, Strategy.FULL):
        check_compatible(live, new, Strategy.BACKWARD)
    else:
        check_compatible(live, new, strategy)
    return None
