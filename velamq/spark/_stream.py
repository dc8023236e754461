"""The streaming source (SP-1, SP-2): offsets, micro-batch planning, commit.

    initialOffset()         the starting positions (startingOffsets / startingTime) and the name of
                            the query's durable subscription, generated once and kept in every offset
    latestOffset(start, l)  the partitions' last entries (new partitions join from earliest), cut to
                            maxEntriesPerTrigger entries by the ReadLimit and, after
                            prepareForTriggerAvailableNow, never past the positions recorded then
    partitions(start, end)  one TopicRange per partition with start < id <= end
    read(range)             executor side, stateless: everything it needs is in the range
    commit(end)             moves the durable cursor of every partition to end, so that retention keeps
                            what the query has still to read (or replay from the checkpoint)

Replays are exact: Spark restarts a query from the offsets in its checkpoint and re-plans the last
uncommitted batch with partitions(start, end) for the same start and end, and a range always yields
the same messages. The cursor is a retention hold only, never the source of truth: a failed commit
is logged and the query goes on.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from velamq.client import AdminError
from velamq.spark._admin import parse_topic
from velamq.spark._offloaded import read_task
from velamq.spark._offsets import EARLIEST, PartitionOffset, StreamOffset
from velamq.spark._options import SourceOptions
from velamq.spark._planner import Planner
from velamq.spark._read import TopicRange, VelamqDataLossError

log = logging.getLogger("velamq.spark")


class VelamqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._initial: dict[str, Any] | None = None
        self._target: dict[str, PartitionOffset] | None = None  # Trigger.AvailableNow: read no further
        self._committed: dict[str, PartitionOffset] = {}

    def _planner(self) -> Planner:
        return Planner(self.options)

    def initialOffset(self) -> dict[str, Any]:
        # Spark may ask again until the first batch is in its offset log: answer the same.
        if self._initial is None:
            planner = self._planner()
            refs = planner.partitions()
            latest = planner.latest(refs)
            if self.options.starting_time_ms is not None:
                positions = planner.at_time(refs, self.options.starting_time_ms, latest)
            else:
                positions = planner.resolve(self.options.starting, refs, latest, "startingOffsets")
            subscription = self.options.subscription_name or f"velamq-spark-{uuid.uuid4().hex[:16]}"
            self._initial = StreamOffset(subscription, positions).to_json()
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_entries_per_trigger is not None:
            return ReadMaxRows(self.options.max_entries_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        planner = self._planner()
        latest = planner.latest(planner.partitions())
        self._target = {name: pos for name, pos in latest.items() if pos is not None}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        offset = StreamOffset.from_json(start)
        planner = self._planner()
        refs = planner.partitions()
        latest = planner.latest(refs)
        ends: dict[str, PartitionOffset] = dict(offset.partitions)
        for name, last in latest.items():
            before = offset.partitions.get(name, EARLIEST)  # a new partition is read from its beginning
            if last is None:
                continue  # listed but not created yet
            if self._target is not None:
                last = min(last, self._target.get(name, before))
            ends[name] = max(before, last)
        # A partition that is no longer listed. Never read and empty (a topic that did not exist
        # yet, then created partitioned): nothing to lose. Otherwise its data is gone.
        gone = sorted(name for name, pos in offset.partitions.items() if name not in latest and not pos.is_earliest)
        for name in set(offset.partitions) - set(latest) - set(gone):
            del ends[name]
        if gone:
            message = f"partitions {gone} are no longer part of the topics read (deleted?)"
            if self.options.fail_on_data_loss:
                raise VelamqDataLossError(message + "; set failOnDataLoss=false to go on without them")
            log.warning("%s", message)
        if isinstance(limit, ReadMaxRows):
            ends = planner.limited(offset.partitions, ends, limit.max_rows)
        return StreamOffset(offset.subscription, ends).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = StreamOffset.from_json(start), StreamOffset.from_json(end)
        return self._planner().ranges(begin.partitions, finish.partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TopicRange)
        return read_task(partition)

    def commit(self, end: dict[str, Any]) -> None:
        offset = StreamOffset.from_json(end)
        admin = self._planner().admin
        for name, position in offset.partitions.items():
            if self._committed.get(name) == position:
                continue
            try:
                admin.move_cursor(parse_topic(name), offset.subscription, position)
            except AdminError as exc:
                log.warning("could not move subscription %s of %s to %s: %s (retention may not hold this "
                            "query's backlog)", offset.subscription, name, position, exc)
                continue
            self._committed[name] = position

    def stop(self) -> None:
        self._committed.clear()
