"""Schema types, strategy resolution, schema ids and the byte codecs around schemas."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from velamq.metadata._schema_info import (
    InvalidSchemaDataError,
    SchemaData,
    SchemaType,
    Strategy,
    allow_auto_update,
    decode_key_value,
    decode_version,
    effective_strategy,
    encode_key_value,
    encode_version,
    key_value_parts,
    schema_id,
    validation_enforced,
)
from velamq.protocol import _pulsar_api_pb2 as pb


def test_schema_type_numbers_are_the_wire_numbers() -> None:
    for name, number in pb.Schema.Type.items():
        kind = SchemaType.from_protocol(number)
        assert kind.protocol_number == number
        assert kind.name.replace("_", "").lower() == {"Bool": "boolean"}.get(name, name).lower()
    assert SchemaType.from_protocol(21) is SchemaType.AUTO_CONSUME and SchemaType.AUTO_CONSUME.protocol_number == 21
    assert SchemaType.BYTES.protocol_number == 0  # travels as None, as Pulsar's Commands.getSchemaType does
    with pytest.raises(InvalidSchemaDataError):
        SchemaType.from_protocol(99)
    with pytest.raises(InvalidSchemaDataError):
        SchemaType.from_name("AVRO2")


AUTO_UPDATE = [
    ("AutoUpdateDisabled", Strategy.ALWAYS_INCOMPATIBLE),
    ("Backward", Strategy.BACKWARD),
    ("Forward", Strategy.FORWARD),
    ("Full", Strategy.FULL),
    ("AlwaysCompatible", Strategy.ALWAYS_COMPATIBLE),
    ("BackwardTransitive", Strategy.BACKWARD_TRANSITIVE),
    ("ForwardTransitive", Strategy.FORWARD_TRANSITIVE),
    ("FullTransitive", Strategy.FULL_TRANSITIVE),
    (None, Strategy.UNDEFINED),
    ("Sideways", Strategy.UNDEFINED),
]


@pytest.mark.parametrize(("old", "new"), AUTO_UPDATE)
def test_the_older_auto_update_field_maps_onto_strategies(old: str | None, new: Strategy) -> None:
    assert Strategy.from_auto_update_policy(old) is new


def test_effective_strategy_topic_then_namespace_then_old_field_then_broker() -> None:
    ns = {"schema_compatibility_strategy": "FORWARD", "schema_auto_update_compatibility_strategy": "Backward"}
    assert effective_strategy(ns, {"schemaCompatibilityStrategy": "FULL_TRANSITIVE"}) is Strategy.FULL_TRANSITIVE
    assert effective_strategy(ns, {}) is Strategy.FORWARD
    assert effective_strategy({**ns, "schema_compatibility_strategy": "UNDEFINED"}) is Strategy.BACKWARD
    assert effective_strategy({"schema_auto_update_compatibility_strategy": "AutoUpdateDisabled"}) is (
        Strategy.ALWAYS_INCOMPATIBLE
    )
    assert effective_strategy({}) is Strategy.FULL
    assert effective_strategy({"schema_compatibility_strategy": 7}, None, Strategy.BACKWARD) is Strategy.BACKWARD


def test_auto_update_and_validation_enforced_policies() -> None:
    assert allow_auto_update({}) is True
    assert allow_auto_update({"is_allow_auto_update_schema": False}) is False
    assert validation_enforced({}) is False
    assert validation_enforced({"schema_validation_enforced": True}) is True
    assert validation_enforced({"schema_validation_enforced": True}, {"schemaValidationEnforced": False}) is False


def test_strategy_directions() -> None:
    transitive = ["BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"]
    assert [s.value for s in Strategy if s.transitive] == transitive
    assert Strategy.FULL.new_reads_old and Strategy.FULL.old_reads_new
    assert Strategy.BACKWARD.new_reads_old and not Strategy.BACKWARD.old_reads_new
    assert Strategy.FORWARD_TRANSITIVE.old_reads_new and not Strategy.FORWARD_TRANSITIVE.new_reads_old


def test_schema_ids() -> None:
    assert schema_id("orders") == "public/default/orders"
    assert schema_id("persistent://t/ns/orders-partition-12") == "t/ns/orders"
    assert schema_id("non-persistent://t/ns/orders") == "t/ns/orders"


def test_schema_versions_are_eight_big_endian_bytes() -> None:
    assert encode_version(0) == b"\x00" * 8
    assert encode_version(258) == b"\x00\x00\x00\x00\x00\x00\x01\x02"
    assert decode_version(encode_version(2**40 + 3)) == 2**40 + 3
    with pytest.raises(InvalidSchemaDataError):
        decode_version(b"\x00\x01")


@given(st.one_of(st.none(), st.binary(max_size=64)), st.one_of(st.none(), st.binary(max_size=64)))
def test_key_value_data_round_trips(key: bytes | None, value: bytes | None) -> None:
    encoded = encode_key_value(key, value)
    assert decode_key_value(encoded) == (key, value)
    assert len(encoded) == 8 + len(key or b"") + len(value or b"")


@pytest.mark.parametrize("raw", [b"", b"\x00\x00\x00\x05ab", b"\x00\x00\x00\x00", b"\x00" * 8 + b"x"])
def test_truncated_or_padded_key_value_data_is_invalid(raw: bytes) -> None:
    with pytest.raises(InvalidSchemaDataError):
        decode_key_value(raw)


def test_key_value_parts_come_from_the_properties() -> None:
    kv = SchemaData(
        SchemaType.KEY_VALUE,
        encode_key_value(b"", b'{"type": "string"}'),
        {"key.schema.type": "STRING", "value.schema.type": "AVRO", "value.schema.properties": '{"a": "b"}'},
    )
    key, value = key_value_parts(kv)
    assert key == SchemaData(SchemaType.STRING, b"", {})
    assert value == SchemaData(SchemaType.AVRO, b'{"type": "string"}', {"a": "b"})
    untyped = key_value_parts(SchemaData(SchemaType.KEY_VALUE, encode_key_value(None, None)))
    assert [p.type for p in untyped] == [SchemaType.BYTES, SchemaType.BYTES]
    with pytest.raises(InvalidSchemaDataError):
        key_value_parts(SchemaData(SchemaType.KEY_VALUE, kv.data, {"key.schema.properties": "[1]"}))
