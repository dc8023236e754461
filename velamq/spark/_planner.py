"""Driver-side planning: which partitions a query reads and where each range starts and ends.

Everything here runs on the Spark driver (in its Python planner process) before any task:

    partitions()        topic / topics / topicsPattern -> the current partitions (new partitions of a
                        streaming query are found again at every trigger)
    latest()            each partition's last stored entry (admin lastMessageId)
    resolve()           startingOffsets / endingOffsets -> a PartitionOffset per partition
    at_time()           startingTime -> the position just before the first message published at or
                        after it (a reader seeks by publish time and reads one message)
    limited()           maxEntriesPerTrigger -> ends that cover at most that many entries in total,
                        from the partitions' ledger lists (admin internalStats)
    ranges()            the tasks: one per partition range, cut at offloaded ledgers with offloadPath
                        (_offloaded: a task per offloaded ledger reads its Parquet file)
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass

from velamq._topic_name import TopicName, TopicPattern
from velamq.client import AsyncClient, OperationTimeoutError
from velamq.spark._admin import ConnectorAdmin, parse_topic
from velamq.spark._offloaded import split_offloaded
from velamq.spark._offsets import EARLIEST, LedgerMap, PartitionOffset, allocate
from velamq.spark._options import OffsetSpec, SourceOptions, VelamqOptionError
from velamq.spark._read import ReadSettings, TopicRange

seek_read_timeout_ms = 3000


@dataclass(frozen=True, slots=True, order=True)
class PartitionRef:
    name: str  # the partition's full name (the topic's own name when it is not partitioned)
    topic: str  # the topic's full name
    index: int  # -1 for a non-partitioned topic

    @classmethod
    def of(cls, name: str) -> PartitionRef:
        topic = parse_topic(name)
        return cls(str(topic), str(topic.partitioned_parent), topic.partition_index)


class Planner:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.admin = ConnectorAdmin(options.admin_url, options.admin_security)
        self.settings = ReadSettings(options.service_url, options.admin_url, options.fail_on_data_loss,
                                     options.include_properties, options.decoding, options.client_security,
                                     options.admin_security)

    # ---- partitions ----------------------------------------------------------------------------

    def topics(self) -> list[TopicName]:
        if self.options.pattern is None:
            return [parse_topic(t) for t in self.options.topics]
        pattern = re.compile(self.options.pattern)
        where = TopicPattern.parse(self.options.pattern)
        topics = self.admin.topics_of_namespace(where.domain, where.tenant, where.namespace_part)
        return [t for t in topics if pattern.fullmatch(str(t))]

    def partitions(self) -> list[PartitionRef]:
        refs: list[PartitionRef] = []
        for topic in self.topics():
            n = self.admin.partitions(topic)
            if n > 0:
                refs.extend(PartitionRef(str(topic.partition(i)), str(topic), i) for i in range(n))
            else:
                refs.append(PartitionRef(str(topic), str(topic), -1))
        return sorted(refs)

    # ---- positions -----------------------------------------------------------------------------

    def latest(self, refs: list[PartitionRef]) -> dict[str, PartitionOffset | None]:
        """The last entry of each partition; None for one that does not exist (yet)."""
        return {ref.name: self.admin.last_message_id(parse_topic(ref.name)) for ref in refs}

    def resolve(self, spec: OffsetSpec, refs: list[PartitionRef], latest: Mapping[str, PartitionOffset | None],
                option: str) -> dict[str, PartitionOffset]:
        known = {ref.name for ref in refs} | {ref.topic for ref in refs if ref.index < 0}
        unknown = sorted(set(spec.partitions) - known)
        if unknown:
            raise VelamqOptionError(f"option {option!r} names {unknown}, which the query does not read "
                                    f"(its partitions: {sorted(r.name for r in refs)})")
        result: dict[str, PartitionOffset] = {}
        for ref in refs:
            value = spec.partitions.get(ref.name, spec.default)
            if value == "earliest":
                result[ref.name] = EARLIEST
            elif value == "latest":
                result[ref.name] = latest.get(ref.name) or EARLIEST
            else:
                assert isinstance(value, PartitionOffset)
                result[ref.name] = value
        return result

    def at_time(self, refs: list[PartitionRef], time_ms: int, latest: Mapping[str, PartitionOffset | None]) -> dict[
            str, PartitionOffset]:
        async def find() -> dict[str, PartitionOffset]:
            async with AsyncClient(self.options.service_url, **self.options.client_security.client_options()) as client:
                found = await asyncio.gather(*(self._before_time(client, ref, time_ms) for ref in refs))
            return {ref.name: pos or latest.get(ref.name) or EARLIEST for ref, pos in zip(refs, found, strict=True)}

        return asyncio.run(find())

    async def _before_time(self, client: AsyncClient, ref: PartitionRef, time_ms: int) -> PartitionOffset | None:
        reader = await client.create_reader(ref.name, "earliest", reader_name="velamq-spark-seek")
        try:
            await reader.seek(time_ms)
            if not await reader.has_message_available():
                return None
            message = await reader.read_next(seek_read_timeout_ms)
        except OperationTimeoutError:
            return None
        finally:
            await reader.close()
        return PartitionOffset.before(message.message_id)

    def limited(self, starts: Mapping[str, PartitionOffset], ends: Mapping[str, PartitionOffset],
                entries_max: int) -> dict[str, PartitionOffset]:
        """Ends moved back so that all ranges together cover at most entries_max entries."""
        maps: dict[str, LedgerMap] = {}
        available: dict[str, int] = {}
        for name, end in ends.items():
            start = starts.get(name, EARLIEST)
            if end <= start:
                continue
            ledgers = self.admin.ledgers(parse_topic(name))
            if ledgers is None:
                continue
            maps[name] = ledgers
            available[name] = max(0, ledgers.count_through(end) - ledgers.count_through(start))
        shares = allocate(entries_max, available)
        result = dict(ends)
        for name, share in shares.items():
            start = starts.get(name, EARLIEST)
            result[name] = maps[name].advance(start, ends[name], share) if share > 0 else start
        return result

    # ---- ranges --------------------------------------------------------------------------------

    def ranges(self, starts: Mapping[str, PartitionOffset], ends: Mapping[str, PartitionOffset]) -> list[TopicRange]:
        """One task per partition with something to read: start < id <= end."""
        ranges: list[TopicRange] = []
        for name in sorted(ends):
            start, end = starts.get(name, EARLIEST), ends[name]
            if end > start:
                ref = PartitionRef.of(name)
                ranges.append(TopicRange(ref.topic, ref.index, ref.name, start, end, self.settings))
        if self.options.offload_path:
            return split_offloaded(ranges, self.admin, self.options.offload_path)
        return ranges
