"""The `velamq` data source (SP-1): its entry points, the batch reader and the writers.

    spark.read.format("velamq")         VelamqBatchReader: startingOffsets..endingOffsets, one task
                                        per partition, fixed when the query is planned
    spark.readStream.format("velamq")   VelamqStreamReader (velamq.spark._stream)
    df.write.format("velamq")           VelamqBatchWriter (mode "append": a topic is append-only)
    df.writeStream.format("velamq")     VelamqStreamWriter (needs checkpointLocation)

Options are checked when the DataFrame is defined (load() / save() / start()), so a mistake fails
at once with the option's name instead of in a task (SP-3).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from velamq.spark._decode import decoded_schema, fetch_decoding
from velamq.spark._offloaded import read_task
from velamq.spark._options import SinkOptions, SourceOptions, VelamqOptionError, canonical, parse_sink, parse_source
from velamq.spark._planner import Planner
from velamq.spark._read import TopicRange
from velamq.spark._schema import VelamqSchemaError, check_sink_schema, source_schema
from velamq.spark._sink import SinkCommit, write_task
from velamq.spark._stream import VelamqStreamReader

log = logging.getLogger("velamq.spark")


class VelamqDataSource(DataSource):
    """Apache Pulsar protocol topics (velamq or Apache Pulsar) as a Spark data source."""

    @classmethod
    def name(cls) -> str:
        return "velamq"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        canonical(self.options)  # an unknown option fails here, whatever the DataFrame does next

    def schema(self) -> StructType:
        return _read_schema(_with_decoding(parse_source(self.options, streaming=None)))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = _with_decoding(parse_source(self.options, streaming=False))
        _check_read_schema(schema, options)
        return VelamqBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = _with_decoding(parse_source(self.options, streaming=True))
        _check_read_schema(schema, options)
        return VelamqStreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_sink(self.options)
        if overwrite:
            raise VelamqOptionError("a velamq topic is append-only: write with mode('append'), not 'overwrite'")
        check_sink_schema(schema, options.topic)
        return VelamqBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink(self.options)
        check_sink_schema(schema, options.topic)
        return VelamqStreamWriter(options)


def _with_decoding(options: SourceOptions) -> SourceOptions:
    """decodeValues: the topic's schema, fetched once for the query (its readers keep it)."""
    if not options.decode_values:
        return options
    decoding = fetch_decoding(options.admin_url, options.topics[0], options.admin_security)
    return dataclasses.replace(options, decoding=decoding)


def _read_schema(options: SourceOptions) -> StructType:
    if options.decoding is not None:
        return decoded_schema(options.decoding, options.include_properties)
    return source_schema(options.include_properties)


def _check_read_schema(schema: StructType, options: SourceOptions) -> None:
    expected = _read_schema(options)
    if schema != expected:
        what = "the topic's schema" if options.decoding is not None else "a fixed schema"
        raise VelamqSchemaError(f"the velamq source has {what} ({expected.simpleString()}); "
                                f"do not give it another one ({schema.simpleString()})")


class VelamqBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        planner = Planner(self.options)
        refs = planner.partitions()
        latest = planner.latest(refs)
        if self.options.starting_time_ms is not None:
            starts = planner.at_time(refs, self.options.starting_time_ms, latest)
        else:
            starts = planner.resolve(self.options.starting, refs, latest, "startingOffsets")
        ends = planner.resolve(self.options.ending, refs, latest, "endingOffsets")
        ranges = planner.ranges(starts, ends)
        log.info("velamq batch read: %d ranges over %d partitions", len(ranges), len(refs))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # Spark hands an InputPartition(None) to a read with no range at all.
        if not isinstance(partition, TopicRange):
            return iter(())
        return read_task(partition)


class VelamqBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        # One id for the whole save(): a retried task reuses its producer name and sequence ids.
        self.write_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_task(iterator, self.options, self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit("batch write", messages)


class VelamqStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_task(iterator, self.options, None)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(f"micro-batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("velamq sink: micro-batch %d aborted; Spark replays it and deduplication drops what was "
                    "already stored", batchId)


def _log_commit(what: str, messages: list[WriterCommitMessage | None]) -> None:
    commits = [m for m in messages if isinstance(m, SinkCommit)]
    log.info("velamq sink: %s: %d rows, %d sent, %d already stored", what, sum(c.rows for c in commits),
             sum(c.sent for c in commits), sum(c.skipped for c in commits))
