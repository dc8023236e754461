"""The JSON shapes of schemas in Pulsar's admin API (/admin/v2/schemas/...), both ways.

    GetSchemaResponse   {"version": 1, "type": "AVRO", "timestamp": 1700000000000,
                         "data": "<the definition as a string>", "properties": {"k": "v"}}
    PostSchemaPayload   {"type": "AVRO", "schema": "<the definition as a string>", "properties": {...}}

KEY_VALUE schemas are binary in the registry (see _schema_info) and JSON in the admin API: "data"
and "schema" hold {"key": <key schema>, "value": <value schema>}, each part the parsed JSON of its
definition, or "" for a primitive part (Pulsar's SchemaUtils.convertKeyValueSchemaInfoDataToString
and convertKeyValueDataStringToSchemaInfoSchema). The parts' types travel in the properties.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from velamq.metadata._schema_info import (
    InvalidSchemaDataError,
    SchemaData,
    SchemaType,
    StoredSchema,
    encode_key_value,
    key_value_parts,
)


def get_schema_response(stored: StoredSchema) -> dict[str, Any]:
    """Pulsar's GetSchemaResponse for one stored version."""
    schema = stored.schema
    return {
        "version": stored.version,
        "type": schema.type.name,
        "timestamp": stored.timestamp_ms,
        "data": _data_string(schema),
        "properties": dict(schema.properties),
    }


def _data_string(schema: SchemaData) -> str:
    if schema.type is not SchemaType.KEY_VALUE:
        return schema.data.decode("utf-8", errors="replace")
    key, value = key_value_parts(schema)
    return json.dumps({"key": _part_json(key), "value": _part_json(value)}, separators=(",", ":"))


def _part_json(part: SchemaData) -> Any:
    if part.type.primitive:
        return ""
    try:
        return json.loads(part.data)
    except ValueError:
        raise InvalidSchemaDataError(f"the {part.type.name} part of a KEY_VALUE schema is not JSON") from None


def schema_from_payload(payload: Any) -> SchemaData:
    """The schema a PostSchemaPayload (or a pulsar-admin `schemas upload` file) describes."""
    if not isinstance(payload, Mapping):
        raise InvalidSchemaDataError("the schema payload must be a JSON object")
    type_name = payload.get("type")
    if not isinstance(type_name, str):
        raise InvalidSchemaDataError('the schema payload needs a "type"')
    kind = SchemaType.from_name(type_name)
    definition = payload.get("schema") or ""
    if not isinstance(definition, str):
        raise InvalidSchemaDataError('"schema" must be a string')
    properties = payload.get("properties") or {}
    if not isinstance(properties, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in properties.items()
    ):
        raise InvalidSchemaDataError('"properties" must be an object of strings')
    data = _key_value_data(definition) if kind is SchemaType.KEY_VALUE else definition.encode("utf-8")
    return SchemaData(kind, data, dict(properties))


def _key_value_data(definition: str) -> bytes:
    try:
        parts = json.loads(definition)
    except ValueError:
        raise InvalidSchemaDataError("a KEY_VALUE schema must be a JSON object with key and value") from None
    if not isinstance(parts, dict) or "key" not in parts or "value" not in parts:
        raise InvalidSchemaDataError("a KEY_VALUE schema must be a JSON object with key and value")
    encoded = [b"" if part == "" else json.dumps(part, separators=(",", ":")).encode() for part in
               (parts["key"], parts["value"])]
    return encode_key_value(encoded[0], encoded[1])
