"""decodeValues=true: values decoded into columns by the topic's schema, as the Pulsar Spark connector does.

When the DataFrame is defined, the topic's latest schema is read from the registry (admin REST
API); it must be an AVRO or JSON record. Its fields become the first columns, typed as follows, and
the message's own columns follow under the Pulsar connector's names:

    Avro                           Spark                     Avro                  Spark
    boolean                        boolean                   bytes, fixed          binary
    int / long                     int / long                string, enum          string
    float / double                 float / double            array / map           array / map<string, _>
    record                         struct                    ["null", T]           T, nullable
    timestamp-millis, -micros      timestamp                 date                  date
    decimal(p, s)                  decimal(p, s)             other logical types   their Avro type

    __key string, __topic string, __partition int, __messageId binary, __publishTime timestamp,
    __eventTime timestamp, __messageProperties map<string, string> (includeProperties=true)

Values written with another version of the schema are read by Avro schema resolution into the
latest one (the writer's version comes with each message, see velamq.client.AvroSchema); JSON values
are read field by field, a missing field as null. A value that cannot be decoded fails the task.
The schema is fixed when the query starts: versions registered later are read into it.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from velamq._topic_name import TopicName
from velamq.client import AdminClient, AdminError, AvroSchema, ConnectionSecurity, Message, Messages
from velamq.spark._schema import VelamqSchemaError, arrow_schema, source_schema

# The message's columns in decodeValues mode: the plain source's, renamed (its `value` is gone).
METADATA_COLUMNS: Final = {
    "key": "__key", "topic": "__topic", "partition": "__partition", "messageId": "__messageId",
    "publishTime": "__publishTime", "eventTime": "__eventTime", "properties": "__messageProperties",
}
_PRIMITIVES: Final[dict[str, DataType]] = {
    "boolean": BooleanType(), "int": IntegerType(), "long": LongType(), "float": FloatType(),
    "double": DoubleType(), "bytes": BinaryType(), "string": StringType(),
}
Convert = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class ValueDecoding:
    """The schema values are decoded with: type ("AVRO" or "JSON") and Avro record definition."""

    schema_type: str
    definition: str

    @property
    def parsed(self) -> Any:
        return json.loads(self.definition)


def fetch_decoding(admin_url: str, topic: str, security: ConnectionSecurity | None = None) -> ValueDecoding:
    """The topic's latest schema from the registry, checked to be an AVRO or JSON record."""
    name = TopicName.parse(topic)
    path = AdminClient.path("schemas", name.tenant, *name.namespace_part.split("/"), name.local_name, "schema")
    try:
        answer = AdminClient(admin_url, security=security).request("GET", path)
    except AdminError as exc:
        if exc.status == 404:
            raise VelamqSchemaError(f"decodeValues: topic {topic} has no schema to decode its values with") from None
        raise
    kind = answer.get("type") if isinstance(answer, dict) else None
    if kind not in ("AVRO", "JSON"):
        raise VelamqSchemaError(f"decodeValues: the schema of {topic} is {kind}; only AVRO and JSON records decode")
    decoding = ValueDecoding(kind, str(answer.get("data", "")))
    definition = decoding.parsed
    if not isinstance(definition, dict) or definition.get("type") != "record":
        raise VelamqSchemaError(f"decodeValues: the schema of {topic} is not a record")
    return decoding


def decoded_schema(decoding: ValueDecoding, include_properties: bool) -> StructType:
    record = _struct(decoding.parsed, {})
    clash = sorted(set(record.fieldNames()) & set(METADATA_COLUMNS.values()))
    if clash:
        raise VelamqSchemaError(f"decodeValues: record fields {clash} clash with the message columns")
    plain = source_schema(include_properties)
    extra = [StructField(METADATA_COLUMNS[f.name], f.dataType, f.nullable) for f in plain.fields if f.name != "value"]
    return StructType(list(record.fields) + extra)


def reader_schema(decoding: ValueDecoding) -> AvroSchema | None:
    """The schema the partition readers get: Avro values are then read with their writer's version."""
    return AvroSchema(None, schema_definition=decoding.parsed) if decoding.schema_type == "AVRO" else None


# ---- Avro types to Spark types, and decoded values to Arrow's Python values ------------------------


def _named(avro: Any, names: dict[str, Any]) -> Any:
    if isinstance(avro, str) and avro not in _PRIMITIVES and avro != "null":
        if avro not in names:
            raise VelamqSchemaError(f"decodeValues: unknown or recursive type {avro!r}")
        return names[avro]
    return avro


def _struct(record: dict[str, Any], names: dict[str, Any]) -> StructType:
    names = {**names, record["name"]: record}
    fields = []
    for field in record.get("fields", []):
        data_type, nullable = _type(field["type"], names)
        fields.append(StructField(field["name"], data_type, nullable))
    return StructType(fields)


def _type(avro: Any, names: dict[str, Any]) -> tuple[DataType, bool]:
    avro = _named(avro, names)
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise VelamqSchemaError(f"decodeValues: union {avro} has more than one non-null branch")
        return _type(branches[0], names)[0], True
    if isinstance(avro, str):
        return _PRIMITIVES[avro], False
    kind, logical = avro.get("type"), avro.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType(), False
    if logical == "date":
        return DateType(), False
    if logical == "decimal":
        return DecimalType(int(avro.get("precision", 10)), int(avro.get("scale", 0))), False
    if kind == "record":
        return _struct(avro, names), False
    if kind == "enum":
        return StringType(), False
    if kind == "fixed":
        return BinaryType(), False
    if kind == "array":
        item, nullable = _type(avro["items"], names)
        return ArrayType(item, nullable), False
    if kind == "map":
        value, nullable = _type(avro["values"], names)
        return MapType(StringType(), value, nullable), False
    return _type(kind, names)


def _converter(avro: Any, names: dict[str, Any]) -> Convert:
    """Decoded value (fastavro's, or JSON's) -> what pyarrow takes for the Spark type above."""
    avro = _named(avro, names)
    if isinstance(avro, list):
        inner = _converter(next(b for b in avro if b != "null"), names)
        return lambda v: None if v is None else inner(v)
    if isinstance(avro, dict):
        kind, logical = avro.get("type"), avro.get("logicalType")
        if logical in ("timestamp-millis", "timestamp-micros"):
            scale = 1000 if logical == "timestamp-millis" else 1
            return lambda v: _timestamp(v, scale)
        if logical == "date":
            return _date
        if kind == "record":
            names = {**names, avro["name"]: avro}
            fields = [(f["name"], _converter(f["type"], names)) for f in avro.get("fields", [])]
            return lambda v: None if v is None else {n: c(v.get(n)) for n, c in fields}
        if kind == "array":
            item = _converter(avro["items"], names)
            return lambda v: None if v is None else [item(x) for x in v]
        if kind == "map":
            value = _converter(avro["values"], names)
            return lambda v: None if v is None else [(k, value(x)) for k, x in v.items()]
        if kind in ("enum",):
            return lambda v: None if v is None else str(v)
        if kind == "fixed":
            return _binary
        return _converter(kind, names)
    if avro == "bytes":
        return _binary
    return lambda v: v


def _binary(v: Any) -> Any:
    return v.encode("utf-8") if isinstance(v, str) else v  # JSON records carry bytes as text


def _date(v: Any) -> Any:
    if v is None or isinstance(v, datetime.date):
        return v
    return datetime.date(1970, 1, 1) + datetime.timedelta(days=int(v))


def _timestamp(v: Any, scale: int) -> Any:
    if v is None or isinstance(v, datetime.datetime):
        return v
    return datetime.datetime.fromtimestamp(0, datetime.UTC) + datetime.timedelta(microseconds=int(v) * scale)


class DecodedBatchBuilder:
    """RecordBatches of decoded values followed by the message columns (see the module docstring)."""

    def __init__(self, decoding: ValueDecoding, include_properties: bool, topic: str, plain_schema: Any) -> None:
        self.decoding = decoding
        self.schema = arrow_schema(decoded_schema(decoding, include_properties))
        self.topic = topic
        self._plain_schema = plain_schema  # the plain source's Arrow schema: the message columns
        definition = decoding.parsed
        self._fields = [(f["name"], _converter(f["type"], {definition["name"]: definition}))
                        for f in definition.get("fields", [])]

    def _record(self, message: Message) -> dict[str, Any]:
        value = message.value
        if self.decoding.schema_type == "JSON":
            value = json.loads(message.data())
        if not isinstance(value, dict):
            raise VelamqSchemaError(f"decodeValues: message {message.message_id} of {message.topic} is not a record")
        return value

    def build(self, messages: Messages) -> Any:
        """The messages (decoded by the reader's schema as they are read) as one RecordBatch."""
        records = [self._record(m) for m in messages]
        columns = [pa.array([convert(r.get(name)) for r in records], self.schema.field(name).type)
                   for name, convert in self._fields]
        plain = messages.to_arrow(schema=self._plain_schema, topic=self.topic)
        columns += [plain.column(i) for i, name in enumerate(plain.schema.names) if name != "value"]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
