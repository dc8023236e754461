"""velamq.client.schema against the official client's pulsar.schema: same definitions, same bytes."""

from __future__ import annotations

import enum
import json
from types import ModuleType
from typing import Any

import pulsar.schema as official
import pytest

import velamq.client.schema as ours
from velamq.client.schema import (
    Array,
    AvroSchema,
    Boolean,
    Bytes,
    BytesSchema,
    Double,
    Float,
    Integer,
    JsonSchema,
    Long,
    Map,
    Null,
    Record,
    String,
    StringSchema,
)
from velamq.metadata._schema_compat import find_version
from velamq.metadata._schema_info import SchemaData, SchemaType, StoredSchema
from velamq.protocol import _pulsar_api_pb2 as pb


class Color(enum.Enum):
    red = 1
    green = 2
    blue = 3


def simple(m: ModuleType) -> dict[str, Any]:
    class Example(m.Record):  # type: ignore[name-defined, misc]
        _sorted_fields = True
        a = m.String()
        b = m.Integer()
        c = m.Array(m.String())
        d = Color
        e = m.Boolean()
        f = m.Float()
        g = m.Double()
        h = m.Bytes()
        i = m.Map(m.String())
        j = m.CustomEnum(Color)

    value = {"a": "x", "b": 1, "c": ["p", "q"], "d": Color.green, "e": True, "f": 1.5, "g": 2.25, "h": b"\x00\x01",
             "i": {"k": "v"}, "j": Color.blue}
    return {"cls": Example, "value": value}


def complex_record(m: ModuleType) -> dict[str, Any]:
    class NestedObj1(m.Record):  # type: ignore[name-defined, misc]
        _sorted_fields = True
        na1 = m.String()
        nb1 = m.Double()

    class NestedObj2(m.Record):  # type: ignore[name-defined, misc]
        _sorted_fields = True
        na2 = m.Integer()
        nb2 = m.Boolean()
        nc2 = NestedObj1()

    class NestedObj3(m.Record):  # type: ignore[name-defined, misc]
        _sorted_fields = True
        color = m.CustomEnum(Color)
        na3 = m.Integer()

    class NestedObj4(m.Record):  # type: ignore[name-defined, misc]
        _avro_namespace = "xxx4"
        _sorted_fields = True
        na4 = m.String()
        nb4 = m.Integer()

    class ComplexRecord(m.Record):  # type: ignore[name-defined, misc]
        _avro_namespace = "xxx.xxx"
        _sorted_fields = True
        a = m.Integer()
        b = m.Integer()
        color = Color
        color2 = Color
        color3 = m.CustomEnum(Color, required=True, default=Color.red, required_default=True)
        nested = NestedObj2()
        nested2 = NestedObj2()
        mapNested = m.Map(NestedObj3())  # the official suite's names
        mapNested2 = m.Map(NestedObj3())
        arrayNested = m.Array(NestedObj4())
        arrayNested2 = m.Array(NestedObj4())

    n1 = NestedObj1(na1="na1 value", nb1=20.5)
    n2 = NestedObj2(na2=22, nb2=True, nc2=n1)
    value = {
        "a": 1, "b": 2, "color": Color.red, "color2": Color.blue, "nested": n2, "nested2": n2,
        "mapNested": {"a": NestedObj3(na3=1, color=Color.green), "b": NestedObj3(na3=2)},
        "mapNested2": {"d": NestedObj3(na3=4, color=Color.red)},
        "arrayNested": [NestedObj4(na4="v1", nb4=100), NestedObj4(na4="v2", nb4=200)],
        "arrayNested2": [NestedObj4(na4="v3", nb4=300)],
    }
    return {"cls": ComplexRecord, "value": value}


def required_defaults(m: ModuleType) -> dict[str, Any]:
    class MySubRecord(m.Record):  # type: ignore[name-defined, misc]
        x = m.Integer(required=True)
        y = m.Long()
        z = m.String()

    class ExampleRequiredDefault(m.Record):  # type: ignore[name-defined, misc]
        a = m.Integer(required_default=True)
        b = m.Boolean(required=True, required_default=True)
        c = m.Long(required_default=True)
        d = m.Float(default=1.5)
        e = m.Double(required=True)
        f = m.String(required_default=True, default="s")
        g = m.Bytes(required_default=True)
        h = m.Array(m.Integer(), required_default=True)
        i = m.Map(m.Long(), required=True)
        j = MySubRecord(required_default=True)
        k = MySubRecord

    value = {"a": 3, "b": False, "c": 2**40, "e": -1.25, "f": "text", "g": b"raw", "h": [1, 2],
             "i": {"x": 1}, "j": MySubRecord(x=1, y=2, z="z"), "k": MySubRecord(x=5)}
    return {"cls": ExampleRequiredDefault, "value": value}


def nested_containers(m: ModuleType) -> dict[str, Any]:
    class MapArray(m.Record):  # type: ignore[name-defined, misc]
        values = m.Map(m.Array(m.Integer()))
        more = m.Array(m.Map(m.Integer()))
        null = m.Null()

    return {"cls": MapArray, "value": {"values": {"A": [1, 2], "B": [3]}, "more": [{"A": 1}, {"B": 2}]}}


CASES = [simple, complex_record, required_defaults, nested_containers]


def build(case: Any, m: ModuleType) -> tuple[Any, Any]:
    made = case(m)
    return made["cls"], made["cls"](**made["value"])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_record_definitions_equal_the_official_clients(case: Any) -> None:
    our_cls, _ = build(case, ours)
    their_cls, _ = build(case, official)
    assert our_cls.schema() == their_cls.schema()
    for schema_of in ("AvroSchema", "JsonSchema"):
        if schema_of == "AvroSchema" and case is nested_containers:
            continue  # a Null field is not valid Avro inside a union with null: neither side can build it
        our_schema = getattr(ours, schema_of)(our_cls)
        their_schema = getattr(official, schema_of)(their_cls)
        # Byte for byte the schema data the official client sends on PRODUCER / SUBSCRIBE.
        assert our_schema.definition == their_schema.schema_info().schema().encode()


@pytest.mark.parametrize("case", [simple, complex_record, required_defaults], ids=lambda c: c.__name__)
def test_avro_bytes_equal_and_decode_both_ways(case: Any) -> None:
    our_cls, our_value = build(case, ours)
    their_cls, their_value = build(case, official)
    our_schema, their_schema = AvroSchema(our_cls), official.AvroSchema(their_cls)
    our_bytes = our_schema.encode(our_value)
    assert our_bytes == their_schema.encode(their_value)
    assert their_schema.decode(our_bytes) == their_value
    assert our_schema.decode(our_bytes) == our_value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_json_bytes_equal_and_decode_both_ways(case: Any) -> None:
    our_cls, our_value = build(case, ours)
    their_cls, their_value = build(case, official)
    our_schema, their_schema = JsonSchema(our_cls), official.JsonSchema(their_cls)
    our_bytes = our_schema.encode(our_value)
    assert our_bytes == their_schema.encode(their_value)
    assert their_schema.decode(our_bytes) == their_value
    assert our_schema.decode(our_bytes) == our_value


def test_protocol_schemas_are_what_the_official_client_sends() -> None:
    class Example(Record):
        a = Integer()

    avro = AvroSchema(Example).protocol_schema()
    assert avro is not None and avro.type == pb.Schema.Avro and avro.name == "AVRO"
    assert json.loads(avro.schema_data) == Example.schema()
    json_schema = JsonSchema(Example).protocol_schema()
    assert json_schema is not None and json_schema.type == pb.Schema.Json and json_schema.name == "JSON"
    string = StringSchema().protocol_schema()
    assert string is not None and string.type == pb.Schema.String and string.schema_data == b"null"
    assert BytesSchema().protocol_schema() is None
    # The registry takes both clients' definitions as one version.
    their = official.AvroSchema(official_example()).schema_info().schema().encode()
    stored = [StoredSchema(0, SchemaData(SchemaType.AVRO, their), 0)]
    assert find_version(stored, SchemaData(SchemaType.AVRO, AvroSchema(Example).definition)) == 0


def official_example() -> Any:
    class Example(official.Record):  # type: ignore[misc]
        a = official.Integer()

    return Example


def test_decoding_with_the_writers_version_of_the_schema() -> None:
    """schema_test.py's evolution: data of User2 (age required) read as User1 (age optional)."""

    class User1(Record):
        name = String()
        age = Integer()

    class User2(Record):
        _sorted_fields = True
        name = String()
        age = Integer(required=True)
        email = String()

    written = AvroSchema(User2).encode(User2(name="b", age=7, email="e"))
    read = AvroSchema(User1).decode(written, writer_definition=AvroSchema(User2).definition)
    assert read == User1(name="b", age=7)
    their_user1 = official.AvroSchema(official_user1())
    assert their_user1._decode_bytes(written, json.loads(AvroSchema(User2).definition)).age == 7
    assert JsonSchema(User1).decode(JsonSchema(User2).encode(User2(name="c", age=1, email="x"))) == User1(
        name="c", age=1
    )


def official_user1() -> Any:
    class User1(official.Record):  # type: ignore[misc]
        name = official.String()
        age = official.Integer()

    return User1


def test_custom_definitions_encode_dicts() -> None:
    definition = {"type": "record", "name": "Company", "namespace": "example.avro", "fields": [
        {"name": "name", "type": ["null", "string"]},
        {"name": "labels", "type": ["null", {"type": "map", "values": "string"}]},
    ]}
    company = {"name": "c", "labels": {"k": "v"}}
    ours_schema = AvroSchema(None, schema_definition=definition)
    assert ours_schema.decode(ours_schema.encode(company)) == company
    assert ours_schema.encode(company) == official.AvroSchema(None, schema_definition=definition).encode(company)
    with pytest.raises(TypeError):
        ours_schema.encode(["not", "a", "dict"])
    with pytest.raises(ValueError):
        AvroSchema(None)


def test_string_and_bytes_schemas() -> None:
    assert StringSchema().decode(StringSchema().encode("héllo")) == "héllo"
    assert BytesSchema().encode(b"\x00") == b"\x00"
    with pytest.raises(TypeError):
        StringSchema().encode(b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        BytesSchema().encode("x")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ field behaviour


def test_field_type_checks() -> None:
    class Example(Record):
        a = Integer()
        b = String(required=False)
        c = Boolean()
        d = Float()
        e = Long()
        f = Bytes()
        g = Double()
        h = Color
        i = Array(String())
        j = Map(Integer())
        k = Null()

    Example(a=1, b="x", c=False, d=1, e=2, f="text", g=1, h="red", i=["a"], j={"a": 1})
    for bad in ({"b": 2}, {"c": 1}, {"e": 1.5}, {"h": "redx"}, {"h": 5}, {"i": 1}, {"i": ["a", 3]},
                {"j": {"a": "1"}}, {"j": {1: 1}}, {"k": 1}, {"zz": 1}):
        with pytest.raises(TypeError):
            Example(**bad)
    assert Example(h=1).h is Color.red and Example(f="s").f == b"s" and Example(b=b"t").b == "t"
    with pytest.raises(AttributeError):
        Example().zz = 3
    with pytest.raises(TypeError, match="Array field some_field items should all be of type int"):
        class Holder(Record):
            some_field = Array(Integer(), required=False, default=[])

        Holder(some_field=["not", "integer"])


def test_defaults_and_unset_values() -> None:
    class Example(Record):
        a = Integer(default=5)
        b = Integer()
        c = String(default="hello")
        d = Boolean()

    assert (Example().a, Example().b, Example().c, Example().d) == (5, None, "hello", False)
    with pytest.raises(TypeError):
        class Broken(Record):
            a = Integer(default="xyz")


def test_sub_records_from_instances_classes_and_dicts() -> None:
    class Sub(Record):
        x = Integer()

    class Top(Record):
        one = Sub
        two = Sub()
        many = Array(Sub())

    top = Top(one={"x": 1}, two=Sub(x=2), many=[{"x": 3}])
    assert top.one == Sub(x=1) and top.two.x == 2 and top.many == [Sub(x=3)]
    assert Top().one == Sub()  # unset: the nested record with its defaults, as the official client
    with pytest.raises(TypeError):
        Top(one=1)
    assert repr(Sub(x=1)) == "Sub(x=1)"
