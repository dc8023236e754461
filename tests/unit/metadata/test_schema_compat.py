"""Compatibility strategies and the producer/consumer decisions, table by table (Pulsar's semantics)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _schema_testing import avro_schemas
from hypothesis import given, settings
from hypothesis import strategies as st

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
    InvalidSchemaDataError,
    SchemaCompatibilityError,
    SchemaData,
    SchemaType,
    StoredSchema,
    Strategy,
    encode_key_value,
)

S = Strategy


def rec(*fields: dict[str, Any], name: str = "User") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


def fld(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def data(definition: Any, kind: SchemaType = SchemaType.AVRO, indent: int | None = None) -> SchemaData:
    return SchemaData(kind, json.dumps(definition, indent=indent).encode())


def hist(*definitions: Any, kind: SchemaType = SchemaType.AVRO) -> list[StoredSchema]:
    return [StoredSchema(v, data(d, kind), 1000 + v) for v, d in enumerate(definitions)]


def accepted(history: list[StoredSchema], new: SchemaData, strategy: Strategy) -> bool:
    try:
        check_compatible(history, new, strategy)
    except SchemaCompatibilityError:
        return False
    return True


COLOR3 = {"type": "enum", "name": "Color", "symbols": ["R", "G", "B"]}
COLOR2 = {"type": "enum", "name": "Color", "symbols": ["R", "G"]}

# (change, old schema, new schema, BACKWARD, FORWARD): BACKWARD = the new schema reads the old one's data,
# FORWARD = the old schema reads the new one's data; FULL = both.
CHANGES = [
    ("add field with default", rec(fld("a", "int")), rec(fld("a", "int"), fld("b", "int", default=0)), True, True),
    ("add field without default", rec(fld("a", "int")), rec(fld("a", "int"), fld("b", "int")), False, True),
    ("remove field with default", rec(fld("a", "int"), fld("b", "int", default=0)), rec(fld("a", "int")), True, True),
    ("remove field without default", rec(fld("a", "int"), fld("b", "int")), rec(fld("a", "int")), True, False),
    ("type change with promotion", rec(fld("a", "int")), rec(fld("a", "long")), True, False),
    ("type change narrowing", rec(fld("a", "long")), rec(fld("a", "int")), False, True),
    ("type change without promotion", rec(fld("a", "int")), rec(fld("a", "string")), False, False),
    ("rename with alias", rec(fld("a", "int")), rec(fld("b", "int", aliases=["a"])), True, False),
    ("rename without alias", rec(fld("a", "int")), rec(fld("b", "int")), False, False),
    ("enum symbol added", rec(fld("c", COLOR2)), rec(fld("c", COLOR3)), True, False),
    ("enum symbol removed", rec(fld("c", COLOR3)), rec(fld("c", COLOR2)), False, True),
]
EXPECTED = {
    S.ALWAYS_COMPATIBLE: lambda back, fwd: True,
    S.ALWAYS_INCOMPATIBLE: lambda back, fwd: False,
    S.BACKWARD: lambda back, fwd: back,
    S.FORWARD: lambda back, fwd: fwd,
    S.FULL: lambda back, fwd: back and fwd,
    S.BACKWARD_TRANSITIVE: lambda back, fwd: back,
    S.FORWARD_TRANSITIVE: lambda back, fwd: fwd,
    S.FULL_TRANSITIVE: lambda back, fwd: back and fwd,
}


@pytest.mark.parametrize("strategy", list(EXPECTED), ids=lambda s: s.value)
@pytest.mark.parametrize(("change", "old", "new", "backward", "forward"), CHANGES, ids=[c[0] for c in CHANGES])
@pytest.mark.parametrize("kind", [SchemaType.AVRO, SchemaType.JSON], ids=["AVRO", "JSON"])
def test_each_strategy_on_each_change(
    strategy: Strategy, change: str, old: Any, new: Any, backward: bool, forward: bool, kind: SchemaType
) -> None:
    assert accepted(hist(old, kind=kind), data(new, kind), strategy) == EXPECTED[strategy](backward, forward)


@pytest.mark.parametrize(("change", "old", "new", "backward", "forward"), CHANGES, ids=[c[0] for c in CHANGES])
def test_the_reverse_change_swaps_backward_and_forward(
    change: str, old: Any, new: Any, backward: bool, forward: bool
) -> None:
    assert accepted(hist(new), data(old), S.BACKWARD) == forward
    assert accepted(hist(new), data(old), S.FORWARD) == backward


# Three versions where the third suits the second but not the first.
TRANSITIVE_CASES = [
    (S.BACKWARD, S.BACKWARD_TRANSITIVE,
     [rec(fld("a", "int")), rec()], rec(fld("a", "string", default="x"))),
    (S.FORWARD, S.FORWARD_TRANSITIVE,
     [rec(fld("a", "int")), rec(fld("a", "int", default=0))], rec()),
    (S.FULL, S.FULL_TRANSITIVE,
     [rec(fld("a", "int")), rec(fld("a", "int", default=0))], rec()),
]


@pytest.mark.parametrize(("plain", "transitive", "versions", "third"), TRANSITIVE_CASES, ids=lambda v: str(v)[:20])
def test_transitive_forms_compare_with_every_version(
    plain: Strategy, transitive: Strategy, versions: list[Any], third: Any
) -> None:
    history = hist(*versions)
    assert accepted(history[:1], data(versions[1]), plain)  # the second version was itself accepted
    assert accepted(history, data(third), plain)
    assert not accepted(history, data(third), transitive)
    with pytest.raises(SchemaCompatibilityError, match="version 0"):
        check_compatible(history, data(third), transitive)


def test_a_deletion_ends_the_history_that_counts() -> None:
    history = [*hist(rec(fld("a", "int"))), StoredSchema(1, SchemaData(SchemaType.NONE), 2000, deleted=True)]
    decision = decide_producer(history, data(rec(fld("a", "string"))), S.FULL_TRANSITIVE)
    assert decision == NewVersion(2, data(rec(fld("a", "string"))))


@pytest.mark.parametrize("strategy", [s for s in Strategy if s not in (S.ALWAYS_INCOMPATIBLE, S.UNDEFINED)])
@settings(max_examples=60, deadline=None)
@given(schema=avro_schemas(), indent=st.sampled_from([None, 1, 4]))
def test_a_schema_is_compatible_with_itself(strategy: Strategy, schema: Any, indent: int | None) -> None:
    respelled = data(schema, indent=indent)  # other bytes: the check runs, not the hash shortcut
    for kind in (SchemaType.AVRO, SchemaType.JSON):
        stored = [StoredSchema(0, data(schema, kind), 0)]
        check_compatible(stored, SchemaData(kind, respelled.data), strategy)
        assert decide_producer(stored, SchemaData(kind, respelled.data), strategy) == ExistingVersion(0)


def test_always_incompatible_refuses_even_an_equal_schema_but_a_producer_reuses_its_version() -> None:
    history = hist(rec(fld("a", "int")))
    with pytest.raises(SchemaCompatibilityError, match="ALWAYS_INCOMPATIBLE"):
        check_compatible(history, data(rec(fld("a", "int"))), S.ALWAYS_INCOMPATIBLE)
    assert decide_producer(history, data(rec(fld("a", "int"))), S.ALWAYS_INCOMPATIBLE) == ExistingVersion(0)
    with pytest.raises(SchemaCompatibilityError):
        decide_producer(history, data(rec(fld("a", "int"), fld("b", "int", default=0))), S.ALWAYS_INCOMPATIBLE)


# ------------------------------------------------------------------------------ types


def test_another_type_is_incompatible_except_under_always_compatible() -> None:
    history = hist(rec(fld("a", "int")))
    as_json = data(rec(fld("a", "int")), SchemaType.JSON)
    with pytest.raises(SchemaCompatibilityError, match="exists schema type AVRO, new schema type JSON"):
        decide_producer(history, as_json, S.FULL)
    assert decide_producer(history, as_json, S.ALWAYS_COMPATIBLE) == NewVersion(1, as_json)


@pytest.mark.parametrize("kind", [SchemaType.STRING, SchemaType.INT32, SchemaType.BOOLEAN, SchemaType.DOUBLE])
def test_primitive_types_need_the_same_type(kind: SchemaType) -> None:
    history = [StoredSchema(0, SchemaData(kind), 0)]
    assert decide_producer(history, SchemaData(kind), S.FULL) == ExistingVersion(0)
    other = SchemaType.INT64 if kind is not SchemaType.INT64 else SchemaType.INT32
    with pytest.raises(SchemaCompatibilityError):
        decide_producer(history, SchemaData(other), S.FULL)


def test_string_data_null_from_the_python_client_is_a_string_schema() -> None:
    python_string = SchemaData(SchemaType.STRING, b"null")
    assert decide_producer([], python_string, S.FULL) == NewVersion(0, python_string)
    assert decide_producer([StoredSchema(0, python_string, 0)], python_string, S.FULL) == ExistingVersion(0)


def key_value(key: SchemaData, value: SchemaData) -> SchemaData:
    props = {
        "key.schema.type": key.type.name, "key.schema.name": key.type.name, "key.schema.properties": "{}",
        "value.schema.type": value.type.name, "value.schema.name": value.type.name,
        "value.schema.properties": "{}", "kv.encoding.type": "INLINE",
    }
    return SchemaData(SchemaType.KEY_VALUE, encode_key_value(key.data, value.data), props)


def test_key_value_checks_key_and_value_each_with_its_type() -> None:
    v1 = key_value(SchemaData(SchemaType.STRING), data(rec(fld("a", "int"))))
    history = [StoredSchema(0, v1, 0)]
    compatible = key_value(SchemaData(SchemaType.STRING), data(rec(fld("a", "int"), fld("b", "int", default=1))))
    assert decide_producer(history, compatible, S.FULL) == NewVersion(1, compatible)
    value_broken = key_value(SchemaData(SchemaType.STRING), data(rec(fld("a", "string"))))
    with pytest.raises(SchemaCompatibilityError, match="cannot read"):
        decide_producer(history, value_broken, S.FULL)
    key_retyped = key_value(SchemaData(SchemaType.INT64), data(rec(fld("a", "int"))))
    with pytest.raises(SchemaCompatibilityError, match="different schema type"):
        decide_producer(history, key_retyped, S.FULL)
    assert decide_producer(history, key_value(SchemaData(SchemaType.STRING), data(rec(fld("a", "int")))),
                           S.FULL) == ExistingVersion(0)


def protobuf_native(root: str) -> SchemaData:
    body = {"fileDescriptorSet": "AAAA", "rootMessageTypeName": root, "rootFileDescriptorName": "x.proto"}
    return SchemaData(SchemaType.PROTOBUF_NATIVE, json.dumps(body).encode())


def test_protobuf_native_keeps_its_root_message() -> None:
    history = [StoredSchema(0, protobuf_native("test.A"), 0)]
    same_root = SchemaData(SchemaType.PROTOBUF_NATIVE, protobuf_native("test.A").data + b" ")
    assert isinstance(decide_producer(history, same_root, S.FULL), NewVersion)
    with pytest.raises(SchemaCompatibilityError, match="root message"):
        decide_producer(history, protobuf_native("test.B"), S.FULL)


def test_the_official_suites_json_example_and_bad_example() -> None:
    """schema_test.py's test_json_schema: Example{a,b: int} registered, BadExample{a: string} refused."""
    example = rec(fld("a", ["null", "int"]), fld("b", ["null", "int"]), name="Example")
    bad = rec(fld("a", ["null", "string"]), fld("b", ["null", "int"]), name="BadExample")
    history = hist(example, kind=SchemaType.JSON)
    for strategy in (S.FULL, S.BACKWARD, S.FORWARD):
        with pytest.raises(SchemaCompatibilityError):
            decide_consumer(history, data(bad, SchemaType.JSON), strategy, topic_active=True)
        with pytest.raises(SchemaCompatibilityError, match="type JSON, new schema type AVRO"):
            decide_consumer(history, data(example, SchemaType.AVRO), strategy, topic_active=True)
        respelled = data(example, SchemaType.JSON, indent=1)
        assert decide_consumer(history, respelled, strategy, topic_active=True) is None


def test_the_official_suites_schema_evolution_is_forward_compatible() -> None:
    """schema_test.py's test_schema_evolve: User1{name, age optional} then User2{age required, name}."""
    user1 = rec(fld("name", ["null", "string"]), fld("age", ["null", "int"]), name="User1")
    user2 = rec(fld("age", "int"), fld("name", ["null", "string"]), name="User2")
    assert decide_producer(hist(user1), data(user2), S.FORWARD) == NewVersion(1, data(user2))
    with pytest.raises(SchemaCompatibilityError):
        decide_producer(hist(user1), data(user2), S.BACKWARD)  # User2 cannot read a null age


# ------------------------------------------------------------------------------ decisions


def test_producer_matches_an_existing_version_by_definition_not_bytes() -> None:
    history = hist(rec(fld("a", "int")), rec(fld("a", "int"), fld("b", "int", default=0)))
    assert decide_producer(history, data(rec(fld("a", "int")), indent=3), S.FULL) == ExistingVersion(0)
    documented = rec(fld("a", "int", doc="a number"))
    assert find_version(history, data(documented)) == 0


def test_producer_with_auto_update_disabled_may_only_use_existing_versions() -> None:
    history = hist(rec(fld("a", "int")))
    assert decide_producer(history, data(rec(fld("a", "int"))), S.FULL, allow_auto_update=False) == ExistingVersion(0)
    added = data(rec(fld("a", "int"), fld("b", "int", default=0)))
    with pytest.raises(SchemaCompatibilityError, match="auto updating is disabled"):
        decide_producer(history, added, S.FULL, allow_auto_update=False)
    with pytest.raises(SchemaCompatibilityError, match="auto updating is disabled"):
        decide_producer([], added, S.FULL, allow_auto_update=False)


def test_versions_are_never_reused() -> None:
    history = [*hist(rec(fld("a", "int")), rec(fld("a", "long"))),
               StoredSchema(2, SchemaData(SchemaType.NONE), 0, deleted=True)]
    assert decide_producer(history, data(rec(fld("a", "int"))), S.FULL) == NewVersion(3, data(rec(fld("a", "int"))))


def test_consumer_on_a_topic_without_schema() -> None:
    schema = data(rec(fld("a", "int")))
    assert decide_consumer([], schema, S.FULL, topic_active=False) == NewVersion(0, schema)
    with pytest.raises(SchemaCompatibilityError, match="active topic"):
        decide_consumer([], schema, S.FULL, topic_active=True)


def test_consumer_reads_the_latest_version_under_full() -> None:
    """A consumer is checked as a reader (BACKWARD) under BACKWARD, FORWARD, FULL, FORWARD_TRANSITIVE."""
    history = hist(rec(fld("a", "int")))
    wider = data(rec(fld("a", "long")))  # reads int data; int readers cannot read it: not FULL
    for strategy in (S.BACKWARD, S.FORWARD, S.FULL, S.FORWARD_TRANSITIVE):
        assert decide_consumer(history, wider, strategy, topic_active=True) is None
    with pytest.raises(SchemaCompatibilityError):
        decide_consumer(history, wider, S.FULL_TRANSITIVE, topic_active=True)
    narrower = data(rec(fld("a", "int"), fld("b", "int")))  # needs b, which the data lacks
    with pytest.raises(SchemaCompatibilityError):
        decide_consumer(history, narrower, S.FULL, topic_active=True)
    assert decide_consumer(history, narrower, S.ALWAYS_COMPATIBLE, topic_active=True) is None


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "schema",
    [
        SchemaData(SchemaType.AVRO, b"{not json"),
        SchemaData(SchemaType.AVRO, b'{"type": "record", "name": "X", "fields": [{"name": "a", "type": "Nope"}]}'),
        SchemaData(SchemaType.JSON, b"[1, 2]"),
        SchemaData(SchemaType.STRING, b"abc"),
        SchemaData(SchemaType.INT32, b"x"),
        SchemaData(SchemaType.AUTO_CONSUME),
        SchemaData(SchemaType.PROTOBUF_NATIVE, b"{}"),
        SchemaData(SchemaType.KEY_VALUE, b"\x00\x00"),
    ],
    ids=lambda s: s.type.name,
)
def test_malformed_schema_data_is_refused(schema: SchemaData) -> None:
    with pytest.raises(InvalidSchemaDataError):
        validate(schema)
    with pytest.raises(InvalidSchemaDataError):
        decide_producer([], schema, S.FULL)


def test_legacy_json_schema_definitions_are_accepted() -> None:
    legacy = SchemaData(SchemaType.JSON, b'{"type": "object", "id": "urn:jsonschema:User", "properties": {}}')
    validate(legacy)
    history = [StoredSchema(0, legacy, 0)]
    other_id = SchemaData(SchemaType.JSON, b'{"type": "object", "id": "urn:jsonschema:Other"}')
    with pytest.raises(SchemaCompatibilityError, match="id"):
        decide_producer(history, other_id, S.FULL)
    avro_now = data(rec(fld("a", "int")), SchemaType.JSON)
    assert decide_producer(history, avro_now, S.FULL) == NewVersion(1, avro_now)
