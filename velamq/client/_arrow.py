"""The Arrow form of the client's bulk paths (optional: needs pyarrow, `pip install 'velamq[arrow]'`).

    ranges_to_arrow(ranges)    received messages -> pyarrow.RecordBatch with the Spark source's
                               columns, built from the batches' columns: values are cut out of the
                               payloads in one join, constant columns (topic, partition, publish
                               time) are repeated, ids serialized from a per-entry prefix
    send_columns(data)         a pyarrow Table / RecordBatch / Array -> the columns a bulk send takes

Columns (as velamq.spark's source, and Spark's Kafka source before it):

    key string, value binary, topic string (not null), partition int32 (not null),
    messageId binary (not null: MessageIdData bytes), publishTime timestamp[us, UTC],
    eventTime timestamp[us, UTC], properties map<string, string> (optional)
"""

from __future__ import annotations

import array
import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from velamq.client._errors import InvalidConfigurationError
from velamq.protocol import varint

if TYPE_CHECKING:
    from velamq.client._message import Range

try:
    import pyarrow as pa  # type: ignore[import-untyped]
except ImportError:  # the client works without it; only the Arrow forms need it
    pa = None


def require_pyarrow() -> Any:
    if pa is None:
        raise ImportError("the Arrow form of velamq's client needs pyarrow: pip install 'velamq[arrow]'")
    return pa


def message_schema(include_properties: bool = True) -> Any:
    """The Arrow schema of received messages (equal to Spark's conversion of the source's schema)."""
    pa_ = require_pyarrow()
    ts = pa_.timestamp("us", tz="UTC")
    fields = [pa_.field("key", pa_.string()), pa_.field("value", pa_.binary()),
              pa_.field("topic", pa_.string(), nullable=False), pa_.field("partition", pa_.int32(), nullable=False),
              pa_.field("messageId", pa_.binary(), nullable=False), pa_.field("publishTime", ts),
              pa_.field("eventTime", ts)]
    if include_properties:
        fields.append(pa_.field("properties", pa_.map_(pa_.string(), pa_.string())))
    return pa_.schema(fields)


def _binary(type_: Any, data: bytes, lengths: Iterable[int], n: int) -> Any:
    offsets = array.array("i", itertools.accumulate(lengths, initial=0))
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _fixed(type_: Any, code: str, values: Sequence[int] | array.array[int], n: int) -> Any:
    buffer = values if isinstance(values, array.array) else array.array(code, values)
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(buffer)])


_INDEX_FIELD = [b"\x20" + varint(i) for i in range(1 << 14)]
_INDEX_FIELD_LEN = [len(f) for f in _INDEX_FIELD]


def _id_prefix(batch: Any) -> bytes:
    """MessageIdData bytes up to the batch index: ledgerId, entryId, partition (field order)."""
    out = b"\x08" + varint(batch.ledger_id) + b"\x10" + varint(batch.entry_id)
    if batch.partition >= 0:
        out += b"\x18" + varint(batch.partition)
    return out


def _ids(ranges: list[Range]) -> tuple[bytes, list[int]]:
    """The serialized MessageIdData of every message, end to end, and their lengths. Within a batch
    entry only the batch index differs: prefix + index field + suffix, joined in one call."""
    parts: list[bytes] = []
    lengths: list[int] = []
    for batch, first, end in ranges:
        indexes = batch.columns.batch_indexes
        if batch.first_chunk is not None or not batch.batch_size or \
                (indexes is None and end > len(_INDEX_FIELD)) or (indexes is not None and max(indexes) >= 1 << 14):
            ids = [batch.message_id(j).serialize() for j in range(first, end)]
            parts.extend(ids)
            lengths.extend(map(len, ids))
            continue
        prefix, suffix = _id_prefix(batch), b"\x30" + varint(batch.batch_size)
        if indexes is None:
            fields, field_lengths = _INDEX_FIELD[first:end], _INDEX_FIELD_LEN[first:end]
        else:
            fields = [_INDEX_FIELD[i] for i in indexes[first:end]]
            field_lengths = [_INDEX_FIELD_LEN[i] for i in indexes[first:end]]
        parts.append(prefix + (suffix + prefix).join(fields) + suffix)
        lengths.extend(map(operator.add, field_lengths, itertools.repeat(len(prefix) + len(suffix))))
    return b"".join(parts), lengths


def ranges_to_arrow(ranges: list[Range], include_properties: bool = True, schema: Any = None,
                    topic: str | None = None) -> Any:
    """Received messages (ranges of batches) as one pyarrow.RecordBatch."""
    pa_ = require_pyarrow()
    schema = schema if schema is not None else message_schema(include_properties)
    include_properties = "properties" in schema.names
    n = sum(end - first for _, first, end in ranges)
    any_key = any(b.columns.keys is not None for b, _, _ in ranges)
    any_event = any(b.columns.event_times is not None for b, _, _ in ranges)
    any_props = include_properties and any(b.columns.properties is not None for b, _, _ in ranges)
    values: list[bytes] = []
    lengths: list[int] = []
    keys: list[str | None] = []
    partitions = array.array("i")
    publish = array.array("q")
    event_us: list[int | None] = []
    properties: list[list[tuple[str, str]]] = []
    no_publish_time = False
    for batch, first, end in ranges:
        c = batch.columns
        k = end - first
        p = c.payload
        starts, ends = c.value_starts[first:end], c.value_ends[first:end]
        values.extend([p[a:b] for a, b in zip(starts, ends, strict=True)])  # bytes slices: faster than views
        lengths.extend(map(operator.sub, ends, starts))
        if any_key:
            keys.extend(c.keys[first:end] if c.keys is not None else itertools.repeat(None, k))
        if any_event:
            event_us.extend([t * 1000 if t else None for t in c.event_times[first:end]] if c.event_times is not None
                            else itertools.repeat(None, k))
        if any_props:
            properties.extend([p_ or [] for p_ in c.properties[first:end]] if c.properties is not None
                              else itertools.repeat([], k))
        partitions += array.array("i", (batch.partition,)) * k  # repetition is a memcpy
        publish += array.array("q", (batch.publish_time * 1000,)) * k
        no_publish_time = no_publish_time or not batch.publish_time
    ids, id_lengths = _ids(ranges)
    ts = schema.field("publishTime").type
    columns = [
        pa_.array(keys, pa_.string()) if any_key else pa_.nulls(n, pa_.string()),
        _binary(pa_.binary(), b"".join(values), lengths, n),
        _topics(ranges, n) if topic is None else _repeat_string(topic, n),
        _fixed(pa_.int32(), "i", partitions, n),
        _binary(pa_.binary(), ids, id_lengths, n),
        (pa_.array([t or None for t in publish], pa_.int64()).cast(ts) if no_publish_time
         else _fixed(ts, "q", publish, n)),
        pa_.array(event_us, pa_.int64()).cast(ts) if any_event else pa_.nulls(n, ts),
    ]
    if include_properties:
        map_type = schema.field("properties").type
        if any_props:
            columns.append(pa_.array(properties, map_type))
        else:
            offsets = _fixed(pa_.int32(), "i", array.array("i", bytes(4 * (n + 1))), n + 1)
            columns.append(pa_.MapArray.from_arrays(offsets, pa_.array([], pa_.string()), pa_.array([], pa_.string()),
                                                    type=map_type))
    return pa_.RecordBatch.from_arrays(columns, schema=schema)


def _repeat_string(text: str, n: int) -> Any:
    data = text.encode()
    return _binary(pa.string(), data * n, itertools.repeat(len(data), n), n)


def _topics(ranges: list[Range], n: int) -> Any:
    names = {batch.topic for batch, _, _ in ranges}
    if len(names) <= 1:
        return _repeat_string(names.pop() if names else "", n)
    return pa.array([batch.topic for batch, first, end in ranges for _ in range(first, end)], pa.string())


# ---- sending ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SendColumns:
    """Messages to send, column by column (None: no message has one)."""

    values: list[bytes]
    keys: list[str | None] | None = None
    properties: list[dict[str, str] | None] | None = None
    event_times: list[int | None] | None = None


_EVENT_TIME_NAMES = ("event_time", "eventTime")


def send_columns(data: Any) -> SendColumns:
    """The columns of a pyarrow Table / RecordBatch (value, and optionally key, properties and
    event_time / eventTime) or of a pyarrow Array of values (binary or string)."""
    pa_ = require_pyarrow()
    if isinstance(data, (pa_.Array, pa_.ChunkedArray)):
        return SendColumns(_values(data))
    if not isinstance(data, (pa_.Table, pa_.RecordBatch)):
        raise TypeError(f"expected a pyarrow Table, RecordBatch or Array, not {type(data).__name__}")
    names = data.schema.names
    if "value" not in names:
        raise InvalidConfigurationError(f"an Arrow table to send needs a 'value' column; it has {names}")
    keys = data.column("key").to_pylist() if "key" in names else None
    properties = None
    if "properties" in names:
        properties = [dict(p) if p else None for p in data.column("properties").to_pylist()]
    event_times = None
    for name in _EVENT_TIME_NAMES:
        if name in names:
            column = data.column(name)
            if pa_.types.is_timestamp(column.type):
                column = column.cast(pa_.timestamp("ms", tz=column.type.tz)).cast(pa_.int64())
            event_times = column.to_pylist()
            break
    return SendColumns(_values(data.column("value")), keys, properties, event_times)


def _values(column: Any) -> list[bytes]:
    values = column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [v.encode() if v is not None else b"" for v in values]
    return [v if v is not None else b"" for v in values]
