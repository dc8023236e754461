"""Reading one topic-partition range (start, end] on an executor, as Arrow record batches.

A non-durable reader (velamq.client, read in bulk: read_batch() and Messages.to_arrow(), so no
object is made per row) starts AT the start entry, inclusive:
the broker then delivers that entry first, which proves it still exists (failOnDataLoss), and
everything up to `start` is dropped here. Messages are taken while their id is <= end and the
read stops at the end message itself, at the first message past it, or, when nothing arrives
within a poll, once the reader says no message is left. A range therefore always yields the same
messages (a replayed micro-batch is identical, SP-2): the log is append-only and the bounds are
fixed before any task runs.

A range that stalls (the reader reports more stored but nothing comes for stall_s_max, e.g. the
last chunk of a chunked message whose producer died) fails the task with failOnDataLoss=true and
ends there with a warning otherwise.

Data loss: if the first message is not from the start entry, the admin API is asked whether that
entry still exists (a chunked message ending there is not delivered on its own); if its ledger is
gone, retention or a deleted topic removed messages the query had not read: failOnDataLoss=true
fails the task, false logs a warning and goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import InputPartition

from velamq._errors import VelamqError
from velamq.client import AsyncClient, ConnectionSecurity, MessageId, Messages, Reader, ReceivedBatch
from velamq.spark._admin import ConnectorAdmin, parse_topic
from velamq.spark._decode import DecodedBatchBuilder, ValueDecoding, reader_schema
from velamq.spark._offsets import WHOLE, PartitionOffset
from velamq.spark._schema import arrow_schema, source_schema

log = logging.getLogger("velamq.spark")

rows_per_batch_max = 10_000  # Spark's own spark.sql.execution.arrow.maxRecordsPerBatch default
poll_s = 1.0  # wait this long for a message before asking the reader whether any is left
stall_s_max = 300.0  # give up on an end message that never comes (an abandoned chunked message)
reader_queue_size = 20_000


class VelamqDataLossError(VelamqError, RuntimeError):
    """Messages a query had not read are gone (retention, deleted topic) and failOnDataLoss is true."""


@dataclass(frozen=True, slots=True)
class ReadSettings:
    service_url: str
    admin_url: str
    fail_on_data_loss: bool
    include_properties: bool
    decoding: ValueDecoding | None = None  # decodeValues: the schema values are decoded with
    client_security: ConnectionSecurity = field(default_factory=ConnectionSecurity)
    admin_security: ConnectionSecurity = field(default_factory=ConnectionSecurity)


class TopicRange(InputPartition):
    """One Spark task: the messages of one partition with start < id <= end."""

    def __init__(self, topic: str, partition: int, partition_topic: str, start: PartitionOffset, end: PartitionOffset,
                 settings: ReadSettings) -> None:
        super().__init__((partition_topic, str(start), str(end)))
        self.topic = topic
        self.partition = partition
        self.partition_topic = partition_topic
        self.start = start
        self.end = end
        self.settings = settings

    def __repr__(self) -> str:
        return f"TopicRange({self.partition_topic}, ({self.start}, {self.end}])"


def read_range(task: TopicRange) -> Iterator[Any]:
    """The range's messages as RecordBatches of at most rows_per_batch_max rows, built from the
    received batches' columns (velamq.client's bulk receive and Arrow form)."""
    if task.end <= task.start:
        return
    settings = task.settings
    schema = arrow_schema(source_schema(settings.include_properties))
    decoded = (DecodedBatchBuilder(settings.decoding, settings.include_properties, task.topic, schema)
               if settings.decoding is not None else None)
    loop = asyncio.new_event_loop()
    scan = _RangeScan(task)
    try:
        loop.run_until_complete(scan.open())
        while not scan.done:
            ranges = loop.run_until_complete(scan.next_ranges(rows_per_batch_max))
            if ranges:
                yield (Messages(ranges).to_arrow(schema=schema, topic=task.topic) if decoded is None
                       else decoded.build(Messages(ranges, scan.decoder)))
    finally:
        loop.run_until_complete(scan.close())
        loop.close()


Range = tuple[ReceivedBatch, int, int]  # what Messages.ranges holds: messages first..end-1 of a batch


def _key(batch: ReceivedBatch, j: int) -> tuple[int, int, int]:
    """message_key of message j of a batch, without its MessageId."""
    return (batch.ledger_id, batch.entry_id, batch.columns.index(j) if batch.batch_size else WHOLE)


def _is_last_of_entry(batch: ReceivedBatch, j: int) -> bool:
    return not batch.batch_size or batch.columns.index(j) >= batch.batch_size - 1


class _RangeScan:
    def __init__(self, task: TopicRange) -> None:
        self.task = task
        self.client: AsyncClient | None = None
        self.reader: Reader | None = None
        self.done = False
        self.decoder: Any = None  # the reader's schema decoder (decodeValues with an AVRO schema)
        self.first_seen = False
        self.last_progress_s = time.monotonic()

    async def open(self) -> None:
        start = self.task.start
        settings = self.task.settings
        self.client = AsyncClient(settings.service_url, **settings.client_security.client_options())
        start_id: MessageId | str = "earliest"
        if not start.is_earliest:
            start_id = MessageId(start.ledger_id, max(start.entry_id, 0))
        decoding = self.task.settings.decoding
        self.reader = await self.client.create_reader(
            self.task.partition_topic, start_id, start_message_id_inclusive=True,
            receiver_queue_size=reader_queue_size, reader_name="velamq-spark",
            schema=reader_schema(decoding) if decoding is not None else None)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    def _cut(self, batch: ReceivedBatch, first: int, end: int) -> tuple[int, int]:
        """The part of messages first..end-1 inside the range (start, end]; sets done when the
        range's end is reached. Keys grow with j, so only a batch of the start or the end entry
        is looked at message by message."""
        start_key, end_key = self.task.start.key(), self.task.end.key()
        entry = (batch.ledger_id, batch.entry_id)
        lo, hi = first, end
        if entry <= start_key[:2]:
            while lo < hi and _key(batch, lo) <= start_key:
                lo += 1
        if entry >= end_key[:2]:
            k = lo
            while k < hi and _key(batch, k) <= end_key:
                k += 1
            if k < hi:  # a message past the end: the range is complete
                hi = k
                self.done = True
            elif hi > lo and (_key(batch, hi - 1) == end_key or (
                    self.task.end.batch_index < 0 and _is_last_of_entry(batch, hi - 1))):
                self.done = True
        return lo, hi

    async def next_ranges(self, rows_max: int) -> list[Range]:
        """Up to rows_max messages of the range, as ranges of received batches; sets done when the
        range is complete."""
        assert self.reader is not None
        out: list[Range] = []
        count = 0
        deadline = time.monotonic() + poll_s
        while count < rows_max and not self.done:
            # What is queued now; only when nothing is, wait (up to the poll) for one message. A
            # batch receive that waited for a full batch would sit out the timeout at a range's end.
            messages = await self.reader.read_batch(rows_max - count, 0)
            if not len(messages):
                wait_ms = int((deadline - time.monotonic()) * 1000)
                if out or wait_ms <= 0:
                    break
                messages = await self.reader.read_batch(1, wait_ms)
                if not len(messages):
                    break
            self.last_progress_s = time.monotonic()
            self.decoder = messages.decoder
            for batch, first, end in messages.ranges:
                if not self.first_seen:
                    self.first_seen = True
                    self._check_first(batch.message_id(first))
                lo, hi = self._cut(batch, first, end)
                if hi > lo:
                    out.append((batch, lo, hi))
                    count += hi - lo
                if self.done:
                    return out
        if out or self.done:
            return out
        if not await self.reader.has_message_available():
            # Nothing after what was read: the end message (e.g. the last chunk of a message that
            # was never completed) will not come.
            if not self.first_seen:
                self.first_seen = True
                self._check_first(None)
            self.done = True
        elif time.monotonic() - self.last_progress_s > stall_s_max:
            # The broker says more is stored but delivers nothing: an abandoned chunked message at
            # the end, or a broker in trouble. Ending the range could skip messages.
            stalled = (f"{self.task.partition_topic}: no message for {stall_s_max:.0f} s before the range end "
                       f"{self.task.end}, though the reader reports more stored")
            if self.task.settings.fail_on_data_loss:
                raise VelamqDataLossError(stalled + "; set failOnDataLoss=false to end the range there")
            log.warning("%s; ending the range", stalled)
            self.done = True
        return out

    def _check_first(self, first: MessageId | None) -> None:
        start = self.task.start
        if start.is_earliest or start.entry_id < 0:
            return
        if first is not None and first.entry_key() <= start.entry:
            return
        # The start entry was not delivered: does it still exist?
        settings = self.task.settings
        ledgers = ConnectorAdmin(settings.admin_url, settings.admin_security).ledgers(
            parse_topic(self.task.partition_topic))
        present = ledgers is not None and any(
            ledger_id == start.ledger_id and entries > start.entry_id for ledger_id, entries in ledgers.ledgers)
        if present:
            return
        message = (f"{self.task.partition_topic}: messages after {start} are no longer stored (retention, or the "
                   f"topic was deleted); the next available one is {first}. Set failOnDataLoss=false to go on "
                   f"without them.")
        if self.task.settings.fail_on_data_loss:
            raise VelamqDataLossError(message)
        log.warning("%s", message)

