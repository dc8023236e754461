"""The metadata store's loop-side caches: what the broker asks on every lookup and topic load.

Two shapes, both safe against a read racing a write (a write bumps the cache's generation before
it is sent and drops the entry when it completes; a read only fills the cache if no write started
meanwhile, so it never leaves a stale answer behind):

    ReadCache       one answer per key (namespace exists, a namespace's policies), bounded,
                    oldest entry evicted first
    NamespaceCache  one answer per namespace that covers all of its topics (its partitioned
                    topics, the names that carry topic policies), loaded by one query the first
                    time a topic of the namespace asks

Per-namespace answers keep the cache's size independent of the number of topics (a million topics
in a few namespaces cost a few entries), and they leave no per-topic object behind when a topic
unloads: a long-lived string per topic would pin the allocator arena it was made in, and the RSS
freed by unloading would not go back to the system. A namespace whose answer would be too large
(more than `rows_max` rows) is not cached; its topics are asked one by one.
"""

from __future__ import annotations

from typing import Generic, TypeVar

V = TypeVar("V")

# A namespace with more rows than this (partitioned topics, topics with topic policies) is asked
# per topic instead of being cached whole.
namespace_rows_max_default = 100_000


class ReadCache(Generic[V]):
    """A bounded dict plus the generation counter described in the module docstring."""

    def __init__(self, entries_max: int) -> None:
        self._entries: dict[str, V] = {}
        self._entries_max = entries_max
        self.generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> V | None:
        return self._entries.get(key)

    def put_if_current(self, key: str, value: V, generation: int) -> None:
        if generation != self.generation:
            return
        if key not in self._entries and len(self._entries) >= self._entries_max:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = value

    def begin_write(self) -> None:
        self.generation += 1

    def invalidate(self, key: str) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()


class NamespaceCache(ReadCache["V | None"], Generic[V]):
    """Per-namespace answers. A stored None means "too large to cache": ask per topic."""

    def __init__(self, entries_max: int, rows_max: int = namespace_rows_max_default) -> None:
        super().__init__(entries_max)
        self.rows_max = rows_max

    def lookup(self, namespace: str) -> tuple[bool, V | None]:
        """(True, answer) if the namespace is cached (answer None: too large); (False, None) if not."""
        if namespace in self._entries:
            return True, self._entries[namespace]
        return False, None
