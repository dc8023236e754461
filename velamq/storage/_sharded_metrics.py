"""ShardedStorage.metrics(): the figures of every open shard as one storage's (same names).

- What the shards share is reported once, from the shared objects: the publish buffer, the tail,
  read and index caches, and the memory budget (the whole worker's).
- Counters (_total) add up. So do the other gauges that measure an amount (bytes, entries, open
  ledgers, pending appends, entry logs, the write caches' bounds: their sum is the worker's write
  cache), and peaks (`_peak`: the sum of the shards' peaks, an upper bound of the worker's).
- Worst-of gauges take the worst shard: `_seconds_max`, `journal_broken`, `failed`,
  `not_writable_seconds`, `journal_entries_per_fsync_last` the largest, `writable` the smallest.
- Averages are computed again from the sums (fsync latency, entries per fsync).
- `velamq_storage_shards_open` counts the shards open now.
"""

from __future__ import annotations

from collections.abc import Iterable

from velamq.storage._config import MemoryBudget
from velamq.storage._storage import SharedCaches
from velamq.storage._storage_metrics import budget_metrics

P = "velamq_storage_"
_largest = {P + "journal_broken", P + "failed", P + "not_writable_seconds", P + "journal_entries_per_fsync_last"}
_smallest = {P + "writable"}


def shared_metrics(shared: SharedCaches, budget: MemoryBudget) -> dict[str, float]:
    """The figures of what all shards share (taken once)."""
    out: dict[str, float] = {}
    for name, cache in (
        ("tail_cache", shared.tail_cache),
        ("read_cache", shared.read_cache),
        ("index_cache", shared.index_cache),
    ):
        out |= cache.metrics(P + name)
    out |= shared.publish_buffer.metrics()
    out |= budget_metrics(P, budget)
    return {k: float(v) for k, v in out.items()}


def combine_metrics(shards: Iterable[dict[str, float]], shared: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    count = 0
    for figures in shards:
        count += 1
        for key, value in figures.items():
            if key in shared:
                continue
            if key not in out:
                out[key] = value
            elif key in _largest or key.endswith("_seconds_max"):
                out[key] = max(out[key], value)
            elif key in _smallest:
                out[key] = min(out[key], value)
            else:
                out[key] += value
    out |= shared
    out.setdefault(P + "writable", 1.0)
    out.setdefault(P + "open_ledgers", 0.0)
    out[P + "shards_open"] = float(count)
    appends, fsyncs = out.get(P + "journal_appends_total", 0.0), out.get(P + "journal_fsyncs_total", 0.0)
    if P + "journal_fsync_seconds_avg" in out:
        out[P + "journal_fsync_seconds_avg"] = out[P + "journal_fsync_seconds_total"] / fsyncs if fsyncs else 0.0
    if P + "journal_entries_per_fsync" in out:
        out[P + "journal_entries_per_fsync"] = appends / fsyncs if fsyncs else 0.0
    if P + "entries_per_fsync" in out:
        old_appends = out.get(P + "appends_total", 0.0)
        out[P + "entries_per_fsync"] = old_appends / fsyncs if fsyncs else old_appends
    return out
