"""Bulk sends (Producer.send_many): one future for many messages, and their ids without an object each.

    BulkSend   the messages a send_many call gives one partition producer; their receipts come per
               batch (BulkPart: a run of them inside one batch) and the future completes with a
               SentIds when the last one came, or fails with the first error
    SentIds    the ids of a bulk send, in the order of its values: a sequence whose MessageIds are
               made on access, from runs of (ledger, entry, partition, first batch index, batch size)
    RoutedIds  the same for a send spread over partitions: each value's id from its partition's
               SentIds
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

from velamq.client._message import MessageId

# (offset of the first message in the bulk send, count, ledger, entry, partition, first batch index, batch size)
Run = tuple[int, int, int, int, int, int, int]


class SentIds(Sequence[MessageId]):
    """Message ids of a bulk send, in the order of its values, made on access."""

    __slots__ = ("_offsets", "_runs", "topic")

    def __init__(self, topic: str, runs: list[Run]) -> None:
        self.topic = topic
        self._runs = sorted(runs)
        self._offsets = [r[0] for r in self._runs]

    def __len__(self) -> int:
        return self._runs[-1][0] + self._runs[-1][1] if self._runs else 0

    @overload
    def __getitem__(self, i: int) -> MessageId: ...

    @overload
    def __getitem__(self, i: slice) -> list[MessageId]: ...

    def __getitem__(self, i: int | slice) -> MessageId | list[MessageId]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("message index out of range")
        offset, _, ledger, entry, partition, index, size = self._runs[bisect.bisect_right(self._offsets, i) - 1]
        return MessageId(ledger, entry, partition, index + i - offset, size, topic=self.topic)

    def __repr__(self) -> str:
        return f"SentIds({len(self)} ids in {len(self._runs)} entries of {self.topic})"


class RoutedIds(Sequence[MessageId]):
    """Message ids of a bulk send over several partitions, in the order of its values."""

    __slots__ = ("_at", "_parts")

    def __init__(self, parts: list[SentIds], at: list[tuple[int, int]]) -> None:
        self._parts = parts
        self._at = at  # per value: (index into parts, position in that part)

    def __len__(self) -> int:
        return len(self._at)

    @overload
    def __getitem__(self, i: int) -> MessageId: ...

    @overload
    def __getitem__(self, i: slice) -> list[MessageId]: ...

    def __getitem__(self, i: int | slice) -> MessageId | list[MessageId]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        part, position = self._at[i]
        return self._parts[part][position]


class BulkSend:
    """The messages of one send_many call on one partition producer, completed run by run."""

    __slots__ = ("future", "remaining", "runs", "topic")

    def __init__(self, topic: str, count: int) -> None:
        self.topic = topic
        self.future: asyncio.Future[SentIds] = asyncio.get_running_loop().create_future()
        self.remaining = count
        self.runs: list[Run] = []
        if count == 0:
            self.future.set_result(SentIds(topic, []))

    def completed(self, offset: int, count: int, ledger_id: int, entry_id: int, partition: int, index: int,
                  batch_size: int) -> None:
        if self.future.done():
            return
        self.runs.append((offset, count, ledger_id, entry_id, partition, index, batch_size))
        self.remaining -= count
        if self.remaining <= 0:
            self.future.set_result(SentIds(self.topic, self.runs))

    def failed(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
            self.future.exception()  # retrieved: a caller that gave up does not get "never retrieved" noise


@dataclass(slots=True)
class BulkPart:
    """A run of `count` messages of a bulk send, from its message `offset`, inside one batch."""

    bulk: BulkSend
    offset: int
    count: int
