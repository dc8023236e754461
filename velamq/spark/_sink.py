"""The sink, batch and streaming: Arrow batches in, messages out, idempotently (SP-4).

Each Arrow batch is sent in bulk (Producer.send_many_async per target partition, with the rows'
own sequence ids), so the producer batches it from columns without an object per row.

Each Spark task writes its rows with its own producer name and explicit sequence ids:

    producer name   velamq-spark-<queryId>-<task partition>   streaming: the query id survives restarts
                    velamq-spark-<writeId>-<task partition>   batch: one id per save(), shared by retries
    sequence id     (batchId << 32) | (row + 1)               row: the row's index within the task;
                                                              batch writes use batchId 0

so a replayed micro-batch (Spark re-runs the same batchId with the same rows after a failure) sends
the same (producer name, sequence id) pairs again. Deduplication is switched on for every topic
written (topic level, before the first message), and the broker drops any pair it has stored.

A batch entry carries a range of sequence ids and a broker compares the first of them, so a replay
that is cut differently into batches could be dropped whole or in part. The sink therefore also
skips, itself, every row whose sequence id is not above the one the broker reports for the
producer when it connects (PRODUCER_SUCCESS's last sequence id), per partition: a producer is
made for each partition, and rows are routed deterministically (a key by its hash, as a producer
with default settings would; a row without key by its index), so a row lands in the same
partition on every attempt. Broker deduplication then covers what a reconnect resends.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import itertools
import logging
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from velamq.client import AdminError, AsyncClient, Producer, ProducerBusyError, boost_hash, sign_safe_mod
from velamq.spark._admin import ConnectorAdmin, parse_topic
from velamq.spark._options import SinkOptions
from velamq.spark._schema import SinkColumns, sink_columns

log = logging.getLogger("velamq.spark")

rows_per_task_max = (1 << 32) - 1  # the row index has 32 bits of the sequence id
producer_busy_wait_s = 60.0  # a crashed attempt's producer may hold the name until the broker sees it go
producer_settings: dict[str, Any] = {
    "batching_enabled": True,
    "batching_max_messages": 1000,
    "batching_max_publish_delay_ms": 10,
    "max_pending_messages": 20_000,
    "block_if_queue_full": True,
}

# Topics whose deduplication this worker process has already checked.
_dedup_checked: set[str] = set()


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What one task wrote: rows seen, messages sent, rows skipped as already stored."""

    partition_id: int
    rows: int
    sent: int
    skipped: int


def task_identity(write_id: str | None) -> tuple[str, int, int]:
    """(producer name, task partition, batch id) of the running task."""
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the velamq sink runs inside a Spark task")
    partition_id = context.partitionId()
    if write_id is None:  # streaming: the query id and batch id Spark sets on every task
        query_id = context.getLocalProperty("sql.streaming.queryId")
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        if not query_id or batch_id is None:
            raise RuntimeError("the velamq streaming sink found no query id / batch id in the task context")
        return f"velamq-spark-{query_id}-{partition_id}", partition_id, int(batch_id)
    return f"velamq-spark-{write_id}-{partition_id}", partition_id, 0


def write_task(batches: Iterator[Any], options: SinkOptions, write_id: str | None) -> SinkCommit:
    """Write one task's rows; returns once every message is stored (or raises)."""
    producer_name, partition_id, batch_id = task_identity(write_id)
    return asyncio.run(_Writer(options, producer_name, partition_id, batch_id).run(batches))


class _Target:
    """The producers of one topic, one per partition, with the broker's last sequence id of each."""

    def __init__(self, producers: list[Producer]) -> None:
        self.producers = producers
        self.last_sequence_ids = [p.last_sequence_id for p in producers]
        self.partition_of_key: dict[str, int] = {}  # keys repeat: hash each once per task


def _pick(column: list[Any] | None, rows: range | list[int]) -> list[Any] | None:
    if column is None:
        return None
    if isinstance(rows, range) and rows.step == 1:
        return column[rows.start : rows.stop]
    return list(map(column.__getitem__, rows))


class _Writer:
    def __init__(self, options: SinkOptions, producer_name: str, partition_id: int, batch_id: int) -> None:
        self.options = options
        self.producer_name = producer_name
        self.partition_id = partition_id
        self.sequence_base = batch_id << 32
        self.admin = ConnectorAdmin(options.admin_url, options.admin_security)
        self.targets: dict[str, _Target] = {}

    async def run(self, batches: Iterator[Any]) -> SinkCommit:
        rows = sent = skipped = 0
        pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        async with AsyncClient(self.options.service_url, **self.options.client_security.client_options()) as client:
            # Spark feeds the batches synchronously; the loop waits meanwhile, which only delays sends.
            for batch in batches:
                columns = sink_columns(batch)
                n = len(columns)
                if rows + n > rows_per_task_max:
                    raise RuntimeError(f"a task may write at most {rows_per_task_max} rows per batch")
                for topic, indexes in self._by_topic(columns):
                    target = self.targets.get(topic) or await self._open(client, topic)
                    routed = self._route(len(target.producers), target.partition_of_key, columns, indexes, rows)
                    for index, chosen in routed.items():
                        # Rows the broker already has for this producer (an earlier attempt) are
                        # skipped; sequence ids grow with the row, so they are a prefix.
                        base = self.sequence_base + rows + 1  # row j's id: base + j (j < 2**32)
                        last = target.last_sequence_ids[index]
                        cut = bisect.bisect_right(chosen, last - base) if base + chosen[0] <= last else 0
                        kept = chosen[cut:]
                        skipped += cut
                        if not kept:
                            continue
                        whole = isinstance(kept, range) and len(kept) == n
                        pending.append(await target.producers[index].send_many_async(
                            columns.values if whole else _pick(columns.values, kept),
                            keys=columns.keys if whole else _pick(columns.keys, kept),
                            properties=columns.properties if whole else _pick(columns.properties, kept),
                            event_times=columns.event_times_ms if whole else _pick(columns.event_times_ms, kept),
                            sequence_ids=range(base + kept.start, base + kept.stop, kept.step)
                            if isinstance(kept, range) else [base + j for j in kept]))
                        sent += len(kept)
                rows += n
                while pending and pending[0].done():
                    pending.popleft().result()  # raises a failed send
            await asyncio.gather(*pending)
        if skipped:
            log.info("%s: skipped %d rows already stored by an earlier attempt", self.producer_name, skipped)
        return SinkCommit(self.partition_id, rows, sent, skipped)

    def _by_topic(self, columns: SinkColumns) -> list[tuple[str, range | list[int]]]:
        """The rows of a batch by target topic: the option, else each row's topic column."""
        everything = range(len(columns))
        if self.options.topic:
            return [(self.options.topic, everything)]
        topics = columns.topics or [None] * len(columns)
        groups: dict[str, list[int]] = {}
        for j, topic in enumerate(topics):
            if not topic:
                raise ValueError("a row has no topic: set the 'topic' option or fill the 'topic' column")
            groups.setdefault(topic, []).append(j)
        return list(groups.items())

    def _route(self, n: int, cache: dict[str, int], columns: SinkColumns, indexes: range | list[int],
               rows_before: int) -> dict[int, range | list[int]]:
        """The rows for each of a target's n partitions: a keyed row by its key's hash (as a producer
        with default settings routes it; `cache` keeps each key's partition for the task), an
        unkeyed one by its index within the task. Rows stay in order within each partition."""
        if n == 1:
            return {0: indexes}
        keys = None if columns.keys is None else _pick(columns.keys, indexes)
        if keys is None or not any(keys):  # unkeyed: partition (row + task) % n, every n-th row
            first = rows_before + self.partition_id
            if isinstance(indexes, range) and indexes.step == 1:
                return {(first + j) % n: range(j, indexes.stop, n) for j in indexes[:n]}
            keys = [None] * len(indexes)
        for key in set(keys).difference(cache):
            if key:  # keys repeat: each hashed once per task
                cache[key] = sign_safe_mod(boost_hash(key), n)
        if all(keys):
            parts = list(map(cache.__getitem__, keys))
        else:
            parts = [cache[k] if k else (rows_before + j + self.partition_id) % n for k, j in zip(keys, indexes,
                                                                                                 strict=True)]
        return {q: list(itertools.compress(indexes, map(operator.eq, parts, itertools.repeat(q)))) for q in set(parts)}

    async def _open(self, client: AsyncClient, topic: str) -> _Target:
        name = str(parse_topic(topic))
        if name in self.targets:
            return self.targets[name]
        await self._ensure_deduplication(client, name)
        partitions = await client.partitions_of(name)
        names = [str(parse_topic(name).partition(i)) for i in range(partitions)] if partitions else [name]
        producers = list(await asyncio.gather(*(self._producer(client, n) for n in names)))
        target = _Target(producers)
        self.targets[name] = self.targets[topic] = target
        return target

    async def _producer(self, client: AsyncClient, name: str) -> Producer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + producer_busy_wait_s
        while True:
            try:
                return await client.create_producer(name, producer_name=self.producer_name, **producer_settings)
            except ProducerBusyError:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def _ensure_deduplication(self, client: AsyncClient, name: str) -> None:
        if name in _dedup_checked:
            return
        topic = parse_topic(name)
        try:
            enabled = await asyncio.to_thread(self.admin.deduplication_enabled, topic)
            if enabled is None:
                # The topic does not exist yet: create it as a producer would (the broker's
                # auto-creation decides partitioned or not), then switch deduplication on before
                # any message.
                await (await client.create_producer(name)).close()
                enabled = await asyncio.to_thread(self.admin.deduplication_enabled, topic)
            if not enabled:
                await asyncio.to_thread(self.admin.enable_deduplication, topic)
        except AdminError as exc:
            # A Pulsar broker with topic-level policies disabled: the namespace's setting must do.
            if exc.status in (0, 401, 403) or not await asyncio.to_thread(self.admin.namespace_deduplication, topic):
                raise RuntimeError(
                    f"cannot switch deduplication on for {name} ({exc}); without it a replayed micro-batch "
                    f"could duplicate messages. Enable it for the topic or its namespace "
                    f"(pulsar-admin namespaces set-deduplication {topic.namespace} --enable)"
                ) from exc
        _dedup_checked.add(name)
