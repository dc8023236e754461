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

Reads yield pyarrow.RecordBatch (several times faster than tuples); the Arrow schema must equal
Spark's conversion of the StructType exactly, so it is derived from it, never written by hand.

Sink columns: `value` (binary or string) is required; `key` (string), `properties`
(map<string, string>), `eventTime` (timestamp, or epoch milliseconds as a long) and `topic`
(string) are optional; any other column is ignored, so a DataFrame read from a topic can be
written back as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
from velamq.client import Message


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


class BatchBuilder:
    """Collects received messages column by column and turns them into one RecordBatch."""

    def __init__(self, schema: StructType, topic: str, partition: int) -> None:
        self.schema = arrow_schema(schema)
        self.topic = topic
        self.partition = partition
        self.include_properties = "properties" in schema.fieldNames()

    def build(self, messages: Sequence[Message]) -> Any:
        n = len(messages)
        columns: list[Any] = [
            pa.array([m.key for m in messages], pa.string()),
            pa.array([m.data() for m in messages], pa.binary()),
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array([m.message_id.serialize() for m in messages], pa.binary()),
            # Epoch milliseconds to the microseconds Spark's timestamps are made of.
            pa.array([m.publish_time * 1000 if m.publish_time else None for m in messages], pa.int64())
            .cast(self.schema.field("publishTime").type),
            pa.array([m.event_time * 1000 if m.event_time else None for m in messages], pa.int64())
            .cast(self.schema.field("eventTime").type),
        ]
        if self.include_properties:
            columns.append(pa.array([list(m.properties.items()) for m in messages],
                                    self.schema.field("properties").type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


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
class OutRow:
    """One message to produce."""

    value: bytes
    key: str | None
    properties: dict[str, str] | None
    event_time_ms: int | None
    topic: str | None


def sink_rows(batch: Any) -> Iterator[OutRow]:
    """The messages of one Arrow batch handed to the sink, in row order."""
    names = batch.schema.names
    n = batch.num_rows
    values = _column(batch, "value")
    keys = _column(batch, "key") if "key" in names else [None] * n
    topics = _column(batch, "topic") if "topic" in names else [None] * n
    properties = _column(batch, "properties") if "properties" in names else [None] * n
    event_times: list[Any] = [None] * n
    if "eventTime" in names:
        column = batch.column(names.index("eventTime"))
        if pa.types.is_timestamp(column.type):
            # Whatever the unit, to epoch milliseconds.
            column = column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
        event_times = column.to_pylist()
    for i in range(n):
        value = values[i]
        if value is None:
            value = b""
        elif isinstance(value, str):
            value = value.encode("utf-8")
        props = properties[i]
        yield OutRow(value, keys[i], dict(props) if props else None, event_times[i], topics[i])


def _column(batch: Any, name: str) -> list[Any]:
    column: list[Any] = batch.column(batch.schema.names.index(name)).to_pylist()
    return column
