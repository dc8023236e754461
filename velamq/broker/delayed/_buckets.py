"""The buckets of the delayed-delivery index (sans-IO): where pending delayed entries wait.

As in Pulsar's BucketDelayedDeliveryTracker, new delayed entries go to a mutable bucket (three
int64 columns: deliver-at time, ledger id, entry id; 24 bytes an entry, no Python object each).
When it holds `bucket_indexes` entries it is sealed: sorted by time and cut into segments of
`segment_indexes` entries, which the index stores (_store.py). A sealed bucket keeps in
memory only the segment being released and the time range of the others; when its segment is
used up, the next one is loaded. Segments of one bucket never overlap in time, so a bucket
releases in time order, and the index merges the buckets by their next time.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

from velamq.storage import Position

_COUNT = struct.Struct("<I")
# Per segment in a bucket's header: where it is stored (ledger, entry), entries, min and max time.
SEGMENT_INFO = struct.Struct("<qqIqq")


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    min_time: int
    max_time: int
    count: int


class Segment:
    """Entries sorted by (time, ledger, entry), as three int64 columns."""

    __slots__ = ("entries", "ledgers", "times")

    def __init__(self, times: array[int], ledgers: array[int], entries: array[int]) -> None:
        self.times = times
        self.ledgers = ledgers
        self.entries = entries

    def __len__(self) -> int:
        return len(self.times)

    @property
    def info(self) -> SegmentInfo:
        return SegmentInfo(self.times[0], self.times[-1], len(self.times))

    def positions(self) -> Iterator[Position]:
        return map(Position, self.ledgers, self.entries)

    def to_bytes(self) -> bytes:
        return _COUNT.pack(len(self.times)) + self.times.tobytes() + self.ledgers.tobytes() + self.entries.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> Segment:
        (count,) = _COUNT.unpack_from(data, 0)
        columns = []
        offset = _COUNT.size
        for _ in range(3):
            column = array("q")
            column.frombytes(data[offset : offset + 8 * count])
            columns.append(column)
            offset += 8 * count
        if len(columns[2]) != count:
            raise ValueError("a delayed-index segment is shorter than it says")
        return cls(*columns)


class MutableBucket:
    """Where new delayed entries go until the bucket is sealed (module docstring)."""

    __slots__ = ("entries", "ledgers", "min_time", "times")

    def __init__(self) -> None:
        self.times = array("q")
        self.ledgers = array("q")
        self.entries = array("q")
        self.min_time: int | None = None

    def __len__(self) -> int:
        return len(self.times)

    def add(self, deliver_at_ms: int, position: Position) -> None:
        self.times.append(deliver_at_ms)
        self.ledgers.append(position[0])
        self.entries.append(position[1])
        if self.min_time is None or deliver_at_ms < self.min_time:
            self.min_time = deliver_at_ms

    def pop_due(self, now_ms: int) -> list[tuple[int, Position]]:
        """Take out every entry due at now_ms (the index calls it at most once a tick)."""
        if self.min_time is None or self.min_time > now_ms:
            return []
        times, ledgers, entries = self.times, self.ledgers, self.entries
        due = [(t, Position(ledgers[i], entries[i])) for i, t in enumerate(times) if t <= now_ms]
        keep = [i for i, t in enumerate(times) if t > now_ms]
        self.times = array("q", (times[i] for i in keep))
        self.ledgers = array("q", (ledgers[i] for i in keep))
        self.entries = array("q", (entries[i] for i in keep))
        self.min_time = min(self.times) if self.times else None
        return due

    def seal(self, segment_indexes: int) -> list[Segment]:
        """The entries sorted by time (then position), cut into segments."""
        times, ledgers, entries = self.times, self.ledgers, self.entries
        order = sorted(range(len(times)), key=lambda i: (times[i], ledgers[i], entries[i]))
        segments = []
        for start in range(0, len(order), segment_indexes):
            part = order[start : start + segment_indexes]
            segments.append(
                Segment(
                    array("q", (times[i] for i in part)),
                    array("q", (ledgers[i] for i in part)),
                    array("q", (entries[i] for i in part)),
                )
            )
        return segments


@dataclass(slots=True)
class SealedBucket:
    """A sealed bucket: its segments' time ranges, where they are stored, and the one segment
    being released (loaded). `released` segments are done; `offset` counts the released entries
    of the loaded one."""

    infos: list[SegmentInfo]
    stored_at: list[Position] = field(default_factory=list)  # filled once the store has written it
    header_at: Position | None = None
    unwritten: list[bytes] | None = None  # segments not stored yet (kept until they are)
    released: int = 0
    loaded: Segment | None = None
    offset: int = 0

    @property
    def pending(self) -> int:
        """Entries not yet released."""
        return sum(info.count for info in self.infos[self.released :]) - self.offset

    @property
    def done(self) -> bool:
        return self.released >= len(self.infos)

    @property
    def needs_load(self) -> bool:
        return self.loaded is None and not self.done

    def next_time(self) -> int | None:
        if self.loaded is not None:
            return self.loaded.times[self.offset]
        if self.done:
            return None
        return self.infos[self.released].min_time

    def segment_bytes(self, index: int) -> bytes | None:
        """The segment from memory while it is not stored yet, else None (read it from the store)."""
        return self.unwritten[index] if self.unwritten is not None else None

    def pop_due(self, now_ms: int) -> list[tuple[int, Position]]:
        """Release the due entries of the loaded segment; when it is used up the bucket needs the
        next one (needs_load)."""
        segment = self.loaded
        if segment is None:
            return []
        times = segment.times
        start = end = self.offset
        while end < len(times) and times[end] <= now_ms:
            end += 1
        due = [(times[i], Position(segment.ledgers[i], segment.entries[i])) for i in range(start, end)]
        self.offset = end
        if end == len(times):
            self.loaded = None
            self.offset = 0
            self.released += 1
        return due


def seal(bucket: MutableBucket, segment_indexes: int) -> tuple[SealedBucket, list[Segment]]:
    """Seal a mutable bucket: the sealed bucket (its first segment loaded, all of them kept as bytes
    until stored) and the segments."""
    segments = bucket.seal(segment_indexes)
    sealed = SealedBucket(
        infos=[s.info for s in segments],
        unwritten=[s.to_bytes() for s in segments],
        loaded=segments[0] if segments else None,
    )
    return sealed, segments
