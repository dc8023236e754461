"""Avro schema resolution (writer -> reader), rule by rule of the specification, plus properties."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _schema_testing import PRIMITIVES, avro_schemas
from hypothesis import given, settings
from hypothesis import strategies as st

from velamq.metadata._avro_resolution import ParsedAvro, canonical, parse_avro, resolution_problem
from velamq.metadata._schema_info import InvalidSchemaDataError


def avro(schema: Any) -> ParsedAvro:
    return parse_avro(json.dumps(schema))


def reads(writer: Any, reader: Any) -> bool:
    return resolution_problem(avro(writer), avro(reader)) is None


def record(*fields: dict[str, Any], name: str = "R", **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


PROMOTABLE = {
    ("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
    ("float", "double"), ("string", "bytes"), ("bytes", "string"),
}


@pytest.mark.parametrize("writer", PRIMITIVES)
@pytest.mark.parametrize("reader", PRIMITIVES)
def test_primitives_match_themselves_and_the_promotions_only(writer: str, reader: str) -> None:
    assert reads(writer, reader) == (writer == reader or (writer, reader) in PROMOTABLE)


def test_a_logical_type_reads_as_its_underlying_type() -> None:
    assert reads({"type": "int", "logicalType": "date"}, "int")
    assert reads("long", {"type": "long", "logicalType": "timestamp-millis"})
    assert not reads({"type": "long", "logicalType": "timestamp-millis"}, "int")


RECORD_CASES = [
    # (what, writer, reader, reader can read writer's data)
    ("same fields", record(f("a", "int")), record(f("a", "int")), True),
    ("fields in another order", record(f("a", "int"), f("b", "string")), record(f("b", "string"), f("a", "int")), True),
    ("reader adds a field with a default",
     record(f("a", "int")), record(f("a", "int"), f("b", "int", default=1)), True),
    ("reader adds a field without default", record(f("a", "int")), record(f("a", "int"), f("b", "int")), False),
    ("reader adds an optional field, no default",
     record(f("a", "int")), record(f("a", "int"), f("b", ["null", "int"])), False),
    ("reader adds an optional field, default null",
     record(f("a", "int")), record(f("a", "int"), f("b", ["null", "int"], default=None)), True),
    ("writer has a field the reader dropped", record(f("a", "int"), f("b", "int")), record(f("a", "int")), True),
    ("field type promoted", record(f("a", "int")), record(f("a", "long")), True),
    ("field type narrowed", record(f("a", "long")), record(f("a", "int")), False),
    ("field type changed", record(f("a", "int")), record(f("a", "string")), False),
    ("field renamed, reader alias", record(f("x", "int")), record(f("y", "int", aliases=["x"])), True),
    ("field renamed, no alias", record(f("x", "int")), record(f("y", "int")), False),
    ("field renamed, no alias but a default", record(f("x", "int")), record(f("y", "int", default=0)), True),
    ("record renamed (Avro Java and Pulsar ignore record names)",
     record(f("a", "int"), name="User1"), record(f("a", "int"), name="User2"), True),
    ("nested record, nested field added with default",
     record(f("n", record(f("a", "int"), name="N"))),
     record(f("n", record(f("a", "int"), f("b", "string", default="x"), name="N"))), True),
    ("nested record, nested field type changed",
     record(f("n", record(f("a", "int"), name="N"))), record(f("n", record(f("a", "boolean"), name="N"))), False),
]


@pytest.mark.parametrize(("what", "writer", "reader", "expected"), RECORD_CASES, ids=[c[0] for c in RECORD_CASES])
def test_records(what: str, writer: Any, reader: Any, expected: bool) -> None:
    assert reads(writer, reader) == expected


def enum(symbols: list[str], name: str = "Color", **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": name, "symbols": symbols, **extra}


ENUM_CASES = [
    ("same symbols", enum(["R", "G"]), enum(["R", "G"]), True),
    ("reader has a symbol more", enum(["R", "G"]), enum(["R", "G", "B"]), True),
    ("reader lacks a written symbol", enum(["R", "G", "B"]), enum(["R", "G"]), False),
    ("reader lacks a written symbol but has a default", enum(["R", "G", "B"]), enum(["R", "G"], default="R"), True),
    ("symbols reordered", enum(["R", "G"]), enum(["G", "R"]), True),
    ("enum renamed", enum(["R"], name="Color"), enum(["R"], name="Hue"), False),
    ("enum renamed, reader alias", enum(["R"], name="Color"), enum(["R"], name="Hue", aliases=["Color"]), True),
    ("same name in another namespace", enum(["R"], namespace="a"), enum(["R"], namespace="b"), True),
]


@pytest.mark.parametrize(("what", "writer", "reader", "expected"), ENUM_CASES, ids=[c[0] for c in ENUM_CASES])
def test_enums(what: str, writer: Any, reader: Any, expected: bool) -> None:
    assert reads(writer, reader) == expected


UNION_CASES = [
    ("reader widens to optional", "int", ["null", "int"], True),
    ("reader narrows an optional", ["null", "int"], "int", False),
    ("branches promoted", ["null", "int"], ["null", "long"], True),
    ("branches reordered", ["int", "string"], ["string", "int"], True),
    ("reader union has no matching branch", "int", ["null", "string"], False),
    ("reader union matches by promotion", "int", ["null", "double"], True),
    ("writer union with a branch the reader lacks", ["int", "string"], ["null", "int"], False),
    ("record branch selected by name",
     record(f("a", "int"), name="B"), ["null", record(f("z", "int"), name="A"), record(f("a", "int"), name="B")], True),
    ("record branch selected by structure",
     record(f("a", "int"), name="X"), ["null", record(f("a", "long"), name="Y")], True),
    ("no record branch resolves", record(f("a", "int"), name="X"), ["null", record(f("b", "int"), name="Y")], False),
    ("enum branch needs its name", enum(["R"], name="C"), ["null", enum(["R"], name="D")], False),
]


@pytest.mark.parametrize(("what", "writer", "reader", "expected"), UNION_CASES, ids=[c[0] for c in UNION_CASES])
def test_unions(what: str, writer: Any, reader: Any, expected: bool) -> None:
    assert reads(writer, reader) == expected


CONTAINER_CASES = [
    ("array items promoted", {"type": "array", "items": "int"}, {"type": "array", "items": "long"}, True),
    ("array items changed", {"type": "array", "items": "int"}, {"type": "array", "items": "string"}, False),
    ("map values promoted", {"type": "map", "values": "float"}, {"type": "map", "values": "double"}, True),
    ("map values narrowed", {"type": "map", "values": "double"}, {"type": "map", "values": "float"}, False),
    ("array read as map", {"type": "array", "items": "int"}, {"type": "map", "values": "int"}, False),
    ("fixed same", {"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 4}, True),
    ("fixed resized", {"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, False),
    ("fixed renamed", {"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "G", "size": 4}, False),
    ("fixed read as bytes", {"type": "fixed", "name": "F", "size": 4}, "bytes", False),
]


@pytest.mark.parametrize(("what", "writer", "reader", "expected"), CONTAINER_CASES, ids=[c[0] for c in CONTAINER_CASES])
def test_arrays_maps_fixed(what: str, writer: Any, reader: Any, expected: bool) -> None:
    assert reads(writer, reader) == expected


def linked_list(*extra_fields: dict[str, Any]) -> dict[str, Any]:
    return record(f("value", "long"), f("next", ["null", "LongList"]), *extra_fields, name="LongList")


def test_recursive_records_resolve_and_still_find_problems() -> None:
    assert reads(linked_list(), linked_list())
    assert reads(linked_list(), linked_list(f("tag", "string", default="")))
    assert not reads(linked_list(), linked_list(f("tag", "string")))


def test_named_type_references_are_followed() -> None:
    point = record(f("x", "int"), name="Point")
    writer = record(f("a", point), f("b", "Point"), name="Pair")
    reader = record(f("a", record(f("x", "long"), name="Point")), f("b", "Point"), name="Pair")
    narrowing = record(f("a", record(f("x", "int"), name="Point")), f("b", "Point"), name="Pair")
    assert reads(writer, reader)
    assert not reads(reader, narrowing)


def test_a_problem_says_where() -> None:
    problem = resolution_problem(
        avro(record(f("n", record(f("a", "int"), name="N")))), avro(record(f("n", record(f("a", "boolean"), name="N"))))
    )
    assert problem is not None and ".a" in problem and "int" in problem and "boolean" in problem


@pytest.mark.parametrize(
    "definition",
    [
        "not json",
        json.dumps({"type": "record", "fields": []}),
        json.dumps(record(f("a", "NoSuchType"))),
        json.dumps(record(f("a", "int"), f("a", "long"))),
        json.dumps(record(f("a", []))),
        json.dumps(record(f("a", ["int", ["null", "long"]]))),
        json.dumps(record(f("a", ["int", "int"]))),
        json.dumps(enum(["R", "R"])),
        json.dumps({"type": "fixed", "name": "F"}),
        json.dumps(5),
    ],
)
def test_malformed_schemas_are_invalid_schema_data(definition: str) -> None:
    with pytest.raises(InvalidSchemaDataError):
        parse_avro(definition)


def test_canonical_form_ignores_doc_aliases_whitespace_and_ascending_order() -> None:
    plain = record(f("a", "int"))
    decorated = record(f("a", "int", doc="the a", order="ascending", aliases=["b"]), doc="R", aliases=["Q"])
    assert canonical(avro(plain)) == canonical(parse_avro(json.dumps(decorated, indent=4)))
    assert canonical(avro(plain)) != canonical(avro(record(f("a", "long"))))


# ------------------------------------------------------------------------------ properties


@settings(max_examples=200, deadline=None)
@given(avro_schemas())
def test_every_schema_reads_its_own_data(schema: Any) -> None:
    parsed = avro(schema)
    assert resolution_problem(parsed, parsed) is None
    # Spelled differently (indentation), parsed again: still the same schema.
    assert resolution_problem(parsed, parse_avro(json.dumps(schema, indent=2))) is None
    assert canonical(parsed) == canonical(parse_avro(json.dumps(schema, indent=2)))


@settings(max_examples=100, deadline=None)
@given(avro_schemas(), st.sampled_from(PRIMITIVES))
def test_a_reader_field_with_a_default_is_always_a_compatible_addition(inner: Any, extra_type: str) -> None:
    defaults = {"null": None, "boolean": False, "int": 0, "long": 0, "float": 0.0, "double": 0.0,
                "bytes": "", "string": ""}
    writer = record(f("payload", inner), name="Top")
    reader = record(f("payload", inner), f("added", extra_type, default=defaults[extra_type]), name="Top")
    assert reads(writer, reader)
    assert reads(reader, writer)  # and the field is skipped when the old schema reads the new data
