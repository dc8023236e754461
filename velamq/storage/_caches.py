"""The storage's byte-bounded LRU caches: tail cache, read cache, index cache (ME-3, ME-5, BR-10).

All three are one structure, an LRU bounded by bytes, one per Storage and shared by all its
managed ledgers. Ledger ids are unique across a Storage and never reused, so a Position alone (or a
ledger id, for the index cache) is a key that cannot collide between topics or after a restart.

Eviction takes the least recently used items one at a time until the cache is under its budget
again: a cache never drops a whole segment at once, which is what caused the latency spikes of the
"cache rollover" in Tencent's 600 k topics (BR-10). An item larger than the whole budget is not cached at all.

They live on the event loop and are touched only there (no locks).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(slots=True)
class CacheStats:
    hits_total: int = 0
    misses_total: int = 0
    inserts_total: int = 0
    evictions_total: int = 0
    evicted_bytes_total: int = 0


class ByteLRU(Generic[K, V]):
    """A dict with LRU eviction by a byte budget. `size_of(value)` is an item's cost in bytes."""

    __slots__ = ("_items", "_size_of", "bytes_max", "name", "size_bytes", "stats")

    def __init__(self, name: str, bytes_max: int, size_of: Callable[[V], int]) -> None:
        self.name = name
        self.bytes_max = bytes_max
        self.size_bytes = 0
        self._size_of = size_of
        self._items: OrderedDict[K, V] = OrderedDict()
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: K) -> V | None:
        """The value, made most recently used; counts a hit or a miss."""
        value = self._items.get(key)
        if value is None:
            self.stats.misses_total += 1
            return None
        self._items.move_to_end(key)
        self.stats.hits_total += 1
        return value

    def peek(self, key: K) -> V | None:
        """The value, without touching LRU order or the statistics."""
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        size = self._size_of(value)
        if size > self.bytes_max:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self.size_bytes -= self._size_of(old)
        self._items[key] = value
        self.size_bytes += size
        self.stats.inserts_total += 1
        if self.size_bytes > self.bytes_max:
            self._evict()

    def pop(self, key: K) -> V | None:
        value = self._items.pop(key, None)
        if value is not None:
            self.size_bytes -= self._size_of(value)
        return value

    def _evict(self) -> None:
        items, size_of, stats = self._items, self._size_of, self.stats
        while self.size_bytes > self.bytes_max and items:
            _, value = items.popitem(last=False)
            size = size_of(value)
            self.size_bytes -= size
            stats.evictions_total += 1
            stats.evicted_bytes_total += size

    def discard_if(self, predicate: Callable[[K], bool]) -> int:
        """Drop every item whose key matches (the ledgers of a shard that closed); not counted as
        evictions. Returns how many went. Walks the whole cache: for rare events only."""
        gone = [key for key in self._items if predicate(key)]
        for key in gone:
            self.pop(key)
        return len(gone)

    def clear(self) -> None:
        self._items.clear()
        self.size_bytes = 0

    def metrics(self, prefix: str) -> dict[str, float]:
        """Prometheus-style figures: <prefix>_hits_total, _misses_total, _bytes, ..."""
        s = self.stats
        return {
            f"{prefix}_hits_total": s.hits_total,
            f"{prefix}_misses_total": s.misses_total,
            f"{prefix}_inserts_total": s.inserts_total,
            f"{prefix}_evictions_total": s.evictions_total,
            f"{prefix}_evicted_bytes_total": s.evicted_bytes_total,
            f"{prefix}_bytes": self.size_bytes,
            f"{prefix}_bytes_max": self.bytes_max,
            f"{prefix}_items": len(self._items),
        }
