"""The rows the source yields and the sink takes, as Arrow record batches (SP-3).

Source columns (after Spark's Kafka source and the Pulsar Spark connector):

    key          string                 the message key, null when it has none
    value        binary                 the payload
    topic        string                 the full topic name (a partitioned topic's own name)
    partition    int                    the partition index, -1 for a non-partitioned topic
    messageId    binary                 the serialized MessageId (MessageIdData bytes, any Pulsar client's
                                        MessageId.deserialize reads it)
    publishTime  timestamp              when the broker received it
    eventTime    timestamp              the producer's event time, null when it set none
    properties   map<string, string>    only with includeProperties=true (the default)

Reads yield pyarrow.RecordBatch (several times faster than tuples), built by velamq's client from
received batches (Messages.to_arrow); the Arrow schema must equal Spark's conversion of the
StructType exactly, so it is derived from it and handed to the client.

Sink columns: `value` (binary or string) is required; `key` (string), `properties`
(map<string, string>), `eventTime` (timestamp, or epoch milliseconds as a long) and `topic`
(string) are optional; any other column is ignored, so a DataFrame read from a topic can be
written back as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from velamq._errors import VelamqError


class VelamqSchemaError(VelamqError, ValueError):
    """A DataFrame written to velamq lacks `value` or has a column of the wrong type."""


def source_schema(include_properties: bool) -> StructType:
    fields = [
        StructField("key", StringType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("messageId", BinaryType(), False),
        StructField("publishTime", TimestampType(), True),
        StructField("eventTime", TimestampType(), True),
    ]
    if include_properties:
        fields.append(StructField("properties", MapType(StringType(), StringType(), True), True))
    return StructType(fields)


def arrow_schema(schema: StructType) -> Any:
    return to_arrow_schema(schema, timezone="UTC")


# ---- the sink -----------------------------------------------------------------------------------

_SINK_TYPES: dict[str, tuple[type[DataType], ...]] = {
    "value": (BinaryType, StringType),
    "key": (StringType,),
    "topic": (StringType,),
    "eventTime": (TimestampType, TimestampNTZType, LongType),
    "properties": (MapType,),
}


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Fail before any task runs when the DataFrame cannot be written."""
    by_name = {f.name: f.dataType for f in schema.fields}
    if "value" not in by_name:
        raise VelamqSchemaError(f"a DataFrame written to velamq needs a 'value' column (binary or string); "
                                f"it has {schema.fieldNames()}")
    for name, allowed in _SINK_TYPES.items():
        data_type = by_name.get(name)
        if data_type is None:
            continue
        if not isinstance(data_type, allowed):
            raise VelamqSchemaError(f"column {name!r} has type {data_type.simpleString()}, "
                                    f"expected {' or '.join(t.typeName() for t in allowed)}")
        if isinstance(data_type, MapType) and not (
                isinstance(data_type.keyType, StringType) and isinstance(data_type.valueType, StringType)):
            raise VelamqSchemaError(f"column 'properties' must be map<string,string>, not {data_type.simpleString()}")
    if topic_option is None and "topic" not in by_name:
        raise VelamqSchemaError("a write to velamq needs the 'topic' option or a 'topic' column")


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """The messages of one Arrow batch handed to the sink, column by column, in row order (None:
    the DataFrame has no such column)."""

    values: list[bytes]
    keys: list[str | None] | None
    properties: list[dict[str, str] | None] | None
    event_times_ms: list[int | None] | None
    topics: list[str | None] | None

    def __len__(self) -> int:
        return len(self.values)


def sink_columns(batch: Any) -> SinkColumns:
    names = batch.schema.names
    values = _column(batch, "value")
    if pa.types.is_string(batch.schema.field("value").type):
        values = [v.encode("utf-8") if v is not None else b"" for v in values]
    elif None in values:
        values = [v if v is not None else b"" for v in values]
    properties = None
    if "properties" in names:
        properties = [dict(p) if p else None for p in _column(batch, "properties")]
    event_times: list[Any] | None = None
    if "eventTime" in names:
        column = batch.column(names.index("eventTime"))
        if pa.types.is_timestamp(column.type):
            # Whatever the unit, to epoch milliseconds.
            column = column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
        event_times = column.to_pylist()
    return SinkColumns(values, _column(batch, "key") if "key" in names else None, properties, event_times,
                       _column(batch, "topic") if "topic" in names else None)


def _column(batch: Any, name: str) -> list[Any]:
    column: list[Any] = batch.column(batch.schema.names.index(name)).to_pylist()
    return column
