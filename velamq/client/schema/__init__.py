"""Schemas for velamq's client, shaped like the official client's `pulsar.schema` package.

    from velamq.client.schema import AvroSchema, Integer, JsonSchema, Record, String

    class User(Record):
        name = String()
        age = Integer(required=True)

    AvroSchema(User).encode(User(name="a", age=3))     # Avro binary, as pulsar.schema.AvroSchema
    User.schema()                                      # the Avro record definition, as pulsar's Record

See docs/schemas.md.
"""

from velamq.client.schema._record import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Map,
    Null,
    Record,
    String,
)
from velamq.client.schema._schemas import AvroSchema, BytesSchema, JsonSchema, Schema, StringSchema

__all__ = [
    "Array",
    "AvroSchema",
    "Boolean",
    "Bytes",
    "BytesSchema",
    "CustomEnum",
    "Double",
    "Field",
    "Float",
    "Integer",
    "JsonSchema",
    "Long",
    "Map",
    "Null",
    "Record",
    "Schema",
    "String",
    "StringSchema",
]
