"""Admin API JSON shapes of schemas: PostSchemaPayload in, GetSchemaResponse out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from velamq.metadata._schema_compat import validate
from velamq.metadata._schema_info import InvalidSchemaDataError, SchemaData, SchemaType, StoredSchema, key_value_parts
from velamq.metadata._schema_json import get_schema_response, schema_from_payload

RECORD = {"type": "record", "name": "User", "fields": [{"name": "a", "type": "int"}]}


def test_an_avro_payload_round_trips_to_a_get_schema_response() -> None:
    schema = schema_from_payload({"type": "AVRO", "schema": json.dumps(RECORD), "properties": {"k": "v"}})
    assert schema == SchemaData(SchemaType.AVRO, json.dumps(RECORD).encode(), {"k": "v"})
    assert get_schema_response(StoredSchema(3, schema, 1234)) == {
        "version": 3, "type": "AVRO", "timestamp": 1234, "data": json.dumps(RECORD), "properties": {"k": "v"},
    }


def test_a_key_value_payload_becomes_pulsars_binary_layout_and_back() -> None:
    props = {"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "SEPARATED"}
    payload = {"type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": RECORD}), "properties": props}
    schema = schema_from_payload(payload)
    validate(schema)
    key, value = key_value_parts(schema)
    assert key.type is SchemaType.STRING and key.data == b""
    assert json.loads(value.data) == RECORD
    response = get_schema_response(StoredSchema(0, schema, 1))
    assert json.loads(response["data"]) == {"key": "", "value": RECORD}
    assert response["type"] == "KEY_VALUE" and response["properties"] == props


@pytest.mark.parametrize(
    "payload",
    [
        [1],
        {"schema": "{}"},
        {"type": "NOPE", "schema": ""},
        {"type": "AVRO", "schema": 5},
        {"type": "AVRO", "schema": "", "properties": {"a": 1}},
        {"type": "KEY_VALUE", "schema": "{}"},
        {"type": "KEY_VALUE", "schema": "not json"},
    ],
)
def test_malformed_payloads_are_invalid_schema_data(payload: Any) -> None:
    with pytest.raises(InvalidSchemaDataError):
        schema_from_payload(payload)


def test_missing_schema_and_properties_mean_empty() -> None:
    assert schema_from_payload({"type": "STRING", "schema": None, "properties": None}) == SchemaData(SchemaType.STRING)
