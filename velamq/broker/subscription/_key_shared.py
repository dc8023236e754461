"""Key_Shared consumer selection: hash ranges over 0..65535 (CO-1).

AUTO_SPLIT: the first consumer owns the whole range; each new consumer takes the upper half of
the largest range; a leaving consumer's range goes to its lower neighbour (or upper, for the
first). STICKY: consumers bring their own ranges, which must not overlap.
"""

from __future__ import annotations

from velamq._errors import VelamqError
from velamq._hashing import KEY_SHARED_HASH_RANGE, key_shared_slot
from velamq.broker.subscription._consumer import ServerConsumer


class HashRangeOverlapError(VelamqError):
    """Sticky hash ranges that overlap another consumer's, or an invalid range."""


class KeySharedSelector:
    """The hash ranges of a Key_Shared subscription's consumers and the lookup from a key to its owner."""

    def __init__(self) -> None:
        # Sorted, non-overlapping ranges (start, end, consumer) covering what is assigned.
        self._ranges: list[tuple[int, int, ServerConsumer]] = []
        self._slot_cache: dict[bytes, int] = {}

    def add_auto_split(self, consumer: ServerConsumer) -> None:
        if not self._ranges:
            self._ranges = [(0, KEY_SHARED_HASH_RANGE - 1, consumer)]
        else:
            i = max(range(len(self._ranges)), key=lambda j: self._ranges[j][1] - self._ranges[j][0])
            start, end, owner = self._ranges[i]
            if end == start:
                raise HashRangeOverlapError("no hash range left to split")
            mid = (start + end) // 2
            self._ranges[i : i + 1] = [(start, mid, owner), (mid + 1, end, consumer)]
        self._refresh_consumer_ranges()

    def add_sticky(self, consumer: ServerConsumer, ranges: list[tuple[int, int]]) -> None:
        for start, end in ranges:
            if start < 0 or end >= KEY_SHARED_HASH_RANGE or start > end:
                raise HashRangeOverlapError(f"invalid hash range [{start}, {end}]")
            for s, e, _ in self._ranges:
                if start <= e and s <= end:
                    raise HashRangeOverlapError(f"range [{start}, {end}] overlaps [{s}, {e}]")
        self._ranges.extend((s, e, consumer) for s, e in ranges)
        self._ranges.sort(key=lambda r: r[0])
        self._refresh_consumer_ranges()

    def remove(self, consumer: ServerConsumer, auto_split: bool) -> None:
        if not auto_split:
            self._ranges = [r for r in self._ranges if r[2] is not consumer]
            self._refresh_consumer_ranges()
            return
        merged: list[tuple[int, int, ServerConsumer]] = []
        orphan: list[tuple[int, int]] = []
        for start, end, owner in self._ranges:
            if owner is consumer:
                if merged:
                    s, _, o = merged[-1]
                    merged[-1] = (s, end, o)
                else:
                    orphan.append((start, end))
            else:
                if orphan:
                    start = orphan.pop()[0]
                merged.append((start, end, owner))
        self._ranges = merged
        self._refresh_consumer_ranges()

    def select(self, sticky_key: bytes) -> ServerConsumer | None:
        slot = self._slot_cache.get(sticky_key)
        if slot is None:
            slot = key_shared_slot(sticky_key)
            if len(self._slot_cache) > 100_000:
                self._slot_cache.clear()
            self._slot_cache[sticky_key] = slot
        for start, end, consumer in self._ranges:
            if start <= slot <= end:
                return consumer
        return None

    def _refresh_consumer_ranges(self) -> None:
        for _, _, c in self._ranges:
            c.hash_ranges = []
        for s, e, c in self._ranges:
            c.hash_ranges.append((s, e))
