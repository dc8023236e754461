"""Schemas of velamq's client: what a producer or consumer declares, and how values become bytes.

    AvroSchema(Order)       Avro binary of an Order record (fastavro), schema type AVRO
    JsonSchema(Order)       UTF-8 JSON of an Order record, schema type JSON (defined in Avro)
    StringSchema()          UTF-8 text, schema type STRING
    BytesSchema()           the bytes as they are; no schema is sent (as the official clients do)
    AvroSchema(None, schema_definition={...})   dicts in and out, for a hand-written definition

Each schema knows the `pb.Schema` it sends on PRODUCER and SUBSCRIBE (`protocol_schema()`): type,
name ("AVRO", "JSON", "STRING") and definition. The definition is the record's Avro schema dumped as
the official Python client dumps it (`json.dumps(definition, indent=True)`), byte for byte, so both
clients' schemas hash alike; the encodings are the official client's too (Avro: enum symbols by
name; JSON: enums by value, bytes as text), so each side decodes what the other sends.

`decode(data, writer_definition)`: data written with another version of the schema (the definition
that version registered, fetched with GET_SCHEMA) is read by Avro schema resolution into this
schema's record, as the official client does.
"""

from __future__ import annotations

import enum
import io
import json
from collections import OrderedDict
from typing import Any, Final, Generic, TypeVar

import fastavro

from velamq.client.schema._record import Record, record_from_dict
from velamq.protocol import _pulsar_api_pb2 as pb

V = TypeVar("V")

# Writer schemas an AvroSchema keeps parsed (one per version of the topic's schema it has read).
writer_schemas_max: Final = 64


class Schema(Generic[V]):
    """A value type with its schema: `encode`/`decode` and the schema sent to the broker."""

    schema_type: int = 0  # Schema.Type None (a Python keyword, so spelled by number)
    name: str = "BYTES"

    def __init__(self, definition: bytes = b"", properties: dict[str, str] | None = None) -> None:
        self.definition = definition
        self.properties = dict(properties or {})

    def protocol_schema(self) -> pb.Schema | None:
        """The schema for PRODUCER / SUBSCRIBE, or None when none is sent (bytes)."""
        schema = pb.Schema(name=self.name, schema_data=self.definition, type=pb.Schema.Type.ValueType(self.schema_type))
        for key, value in sorted(self.properties.items()):
            schema.properties.add(key=key, value=value)
        return schema

    def encode(self, value: V) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes, writer_definition: bytes | None = None) -> V:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BytesSchema(Schema[bytes]):
    def protocol_schema(self) -> pb.Schema | None:
        return None  # the official clients send no schema for bytes: the topic stays schemaless

    def encode(self, value: bytes) -> bytes:
        if not isinstance(value, bytes):
            raise TypeError(f"BytesSchema encodes bytes, not {type(value).__name__}")
        return value

    def decode(self, data: bytes, writer_definition: bytes | None = None) -> bytes:
        return bytes(data)


class StringSchema(Schema[str]):
    schema_type = pb.Schema.String
    name = "STRING"

    def __init__(self) -> None:
        super().__init__(b"null")  # json.dumps(None), as the official Python client sends

    def encode(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"StringSchema encodes str, not {type(value).__name__}")
        return value.encode("utf-8")

    def decode(self, data: bytes, writer_definition: bytes | None = None) -> str:
        return bytes(data).decode("utf-8")


def _definition_bytes(definition: Any) -> bytes:
    return json.dumps(definition, indent=True).encode("utf-8")


class _RecordSchema(Schema[Any]):
    def __init__(self, record_cls: type[Record] | None, definition: Any) -> None:
        super().__init__(_definition_bytes(definition))
        self.record_cls = record_cls
        self.schema_definition = definition

    def _check(self, value: Any) -> None:
        if self.record_cls is not None and not isinstance(value, self.record_cls):
            raise TypeError(f"Invalid record obj of type {type(value)} - expected type is {self.record_cls}")

    def __repr__(self) -> str:
        what = self.record_cls.__name__ if self.record_cls is not None else "definition"
        return f"{type(self).__name__}({what})"


class JsonSchema(_RecordSchema):
    """Records as JSON objects (field order of the class; enums by value; bytes as text)."""

    schema_type = pb.Schema.Json
    name = "JSON"

    def __init__(self, record_cls: type[Record]) -> None:
        super().__init__(record_cls, record_cls.schema())

    def encode(self, value: Any) -> bytes:
        self._check(value)
        return json.dumps(value.to_dict(), default=_json_value, indent=True).encode("utf-8")

    def decode(self, data: bytes, writer_definition: bytes | None = None) -> Any:
        assert self.record_cls is not None
        return record_from_dict(self.record_cls, json.loads(data))


def _json_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, Record):
        return value.to_dict()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class AvroSchema(_RecordSchema):
    """Records (or dicts, with a hand-written definition) as Avro binary, fastavro's encoding."""

    schema_type = pb.Schema.Avro
    name = "AVRO"

    def __init__(self, record_cls: type[Record] | None, schema_definition: Any = None) -> None:
        if record_cls is None and schema_definition is None:
            raise ValueError("AvroSchema needs a Record class or a schema_definition")
        super().__init__(record_cls, record_cls.schema() if record_cls is not None else schema_definition)
        self._parsed = fastavro.parse_schema(self.schema_definition)
        self._writers: OrderedDict[bytes, Any] = OrderedDict()

    def encode(self, value: Any) -> bytes:
        if self.record_cls is not None:
            self._check(value)
            datum = _avro_value(value)
        elif isinstance(value, dict):
            datum = _avro_value(value)
        else:
            raise TypeError("With a schema definition and no Record class, values must be dicts")
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self._parsed, datum)
        return out.getvalue()

    def decode(self, data: bytes, writer_definition: bytes | None = None) -> Any:
        writer = self._parsed if writer_definition in (None, self.definition) else self._writer(writer_definition)
        values = fastavro.schemaless_reader(io.BytesIO(data), writer, self._parsed)
        if self.record_cls is None or not isinstance(values, dict):
            return values
        return record_from_dict(self.record_cls, values)

    def _writer(self, definition: bytes | None) -> Any:
        assert definition is not None
        parsed = self._writers.get(definition)
        if parsed is None:
            raw = json.loads(definition)
            if isinstance(raw, dict) and isinstance(self.schema_definition, dict):
                # fastavro resolves records by name; versions of one topic's schema may be classes
                # of other names (User1, User2), which Avro's Java resolver and Pulsar accept.
                raw["name"] = self.schema_definition.get("name", raw.get("name"))
                if "namespace" in self.schema_definition:
                    raw["namespace"] = self.schema_definition["namespace"]
            parsed = fastavro.parse_schema(raw)
            self._writers[definition] = parsed
            if len(self._writers) > writer_schemas_max:
                self._writers.popitem(last=False)
        return parsed


def _avro_value(value: Any) -> Any:
    """fastavro's view of a value: records as dicts, enums by symbol name."""
    if isinstance(value, Record):
        return {name: _avro_value(v) for name, v in value.to_dict().items()}
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, list):
        return [_avro_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _avro_value(v) for k, v in value.items()}
    return value
