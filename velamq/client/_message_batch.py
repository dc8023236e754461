"""Messages: what Consumer.batch_receive() and Reader.read_batch() return.

A sequence of Message (made only when one is asked for), held as ranges of received batches, so a
whole batch is acknowledged in one call and turned into Arrow without an object per message:

    messages = await consumer.batch_receive()
    table = messages.to_arrow()                 # pyarrow.RecordBatch: the Spark source's columns
    await consumer.acknowledge(messages)        # every message of it
    await consumer.acknowledge_cumulative(messages)   # or up to its last message of each partition
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload

from velamq.client._message import Message, MessageId, Range, ReceivedBatch, message_at


def range_bytes(batch: ReceivedBatch, first: int, end: int) -> int:
    """Value bytes of messages first..end-1 of a batch."""
    c = batch.columns
    return sum(c.value_ends[first:end]) - sum(c.value_starts[first:end])


class Messages(Sequence[Message]):
    """Received messages in bulk: a sequence of Message, made on access, over ranges of received
    batches. consumer.acknowledge(messages) acknowledges all of them in one call; to_arrow() gives
    them as a pyarrow.RecordBatch; values() and message_ids() as lists."""

    __slots__ = ("_decoder", "_ends", "ranges")

    def __init__(self, ranges: list[Range], decoder: Any = None) -> None:
        self.ranges = ranges
        self._ends = list(itertools.accumulate(end - first for _, first, end in ranges))
        self._decoder = decoder  # a consumer's SchemaDecoder: messages decode on access

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @property
    def decoder(self) -> Any:
        """The consumer's schema decoder its messages decode with on access (None: no schema)."""
        return self._decoder

    @overload
    def __getitem__(self, i: int) -> Message: ...

    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...

    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("message index out of range")
        r = bisect.bisect_right(self._ends, i)
        batch, first, _ = self.ranges[r]
        message = message_at(batch, first + i - (self._ends[r - 1] if r else 0))
        return message if self._decoder is None else self._decoder.decode_now(message)

    def __iter__(self) -> Iterator[Message]:
        decoder = self._decoder
        for batch, first, end in self.ranges:
            for j in range(first, end):
                yield message_at(batch, j) if decoder is None else decoder.decode_now(message_at(batch, j))

    def __repr__(self) -> str:
        return f"Messages({len(self)} messages in {len(self.ranges)} entries)"

    def values(self) -> list[bytes]:
        """The payloads (not decoded, whatever the consumer's schema)."""
        out: list[bytes] = []
        for batch, first, end in self.ranges:
            c = batch.columns
            p = c.payload
            out.extend(p[a:b] for a, b in zip(c.value_starts[first:end], c.value_ends[first:end], strict=True))
        return out

    def message_ids(self) -> list[MessageId]:
        return [batch.message_id(j) for batch, first, end in self.ranges for j in range(first, end)]

    @property
    def value_bytes(self) -> int:
        return sum(range_bytes(b, f, e) for b, f, e in self.ranges)

    def to_arrow(self, include_properties: bool = True, schema: Any = None, topic: str | None = None) -> Any:
        """A pyarrow.RecordBatch with the Spark source's columns (key, value, topic, partition,
        messageId, publishTime, eventTime[, properties]); needs pyarrow (pip install 'velamq[arrow]').
        `schema` may give the same columns with other nullability (Spark's own conversion);
        `topic` names every row's topic (a partitioned topic's own name instead of its partition's)."""
        from velamq.client._arrow import ranges_to_arrow

        return ranges_to_arrow(self.ranges, include_properties, schema, topic)
