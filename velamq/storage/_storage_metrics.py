"""Storage.metrics(): every figure of the storage layer, named in Prometheus style (ME-7, OP-3).

Names ending in _total are counters, the rest gauges (the admin tier exports them that way).

    velamq_storage_journal_*         appends, bytes, group commits, fsyncs, fsync latency (sum,
                                     max), entries per fsync (average and last group)
    velamq_storage_flush_*           write cache flushes to entry logs: count, seconds, bytes,
                                     entries, index runs, logs written, fsyncs, checkpoints,
                                     journal segments trimmed
    velamq_storage_gc_*              garbage collection: passes, logs deleted and compacted, bytes
                                     reclaimed and copied, seconds, errors
    velamq_storage_entry_log*        entry logs as the last collection pass found them: count,
                                     bytes, live bytes
    velamq_storage_write_cache_*     bytes, entries, hits, misses, swaps, parked groups
    velamq_storage_tail_cache_*      hits, misses, inserts, evictions, bytes (and entries not
    velamq_storage_read_cache_*      cached because their topic had no active cursor); the read
    velamq_storage_index_cache_*     cache also counts read-ahead entries
    velamq_storage_publish_buffer_*  bytes, bound, peak, feeders paused now, pauses
    velamq_storage_memory_*_bytes    the memory budget and its split
    velamq_storage_writable, _write_* whether storage writes now, failed writes by kind (no space,
                                     no descriptors), retries and recoveries (_write_health);
                                     journal_*_failures_total, journal_repairs_total,
                                     flush_failures_total: where they failed
    velamq_storage_ballast_*         the emergency ballast kept, its target, releases (_ballast)

plus the figures of the first storage version, kept under their names (appends_total,
fsyncs_total, entries_per_fsync, read_entries_cache_total, read_entries_disk_total, ...).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from velamq.storage._config import Counters, MemoryBudget
from velamq.storage.gc._collector import GarbageCollector
from velamq.storage.journal._journal import Journal
from velamq.storage.startup._ballast import Ballast
from velamq.storage.write._flusher import Flusher
from velamq.storage.write._publish_buffer import PublishBuffer
from velamq.storage.write._write_cache import WriteCache
from velamq.storage.write._write_path import WritePath


class _Cache(Protocol):
    def metrics(self, prefix: str) -> dict[str, float]: ...


def budget_metrics(p: str, budget: MemoryBudget) -> dict[str, float]:
    """The memory budget's split, one gauge per share."""
    return {
        p + "memory_budget_bytes": budget.total_bytes,
        p + "memory_publish_buffer_bytes": budget.publish_buffer_bytes,
        p + "memory_tail_cache_bytes": budget.tail_cache_bytes,
        p + "memory_write_cache_bytes": budget.write_cache_bytes,
        p + "memory_read_cache_bytes": budget.read_cache_bytes,
        p + "memory_index_cache_bytes": budget.index_cache_bytes,
    }


def storage_metrics(
    *,
    journal: Journal | None,
    flusher: Flusher | None,
    gc: GarbageCollector | None,
    write_path: WritePath | None,
    write_cache: WriteCache,
    caches: Iterable[tuple[str, _Cache]],
    publish_buffer: PublishBuffer,
    counters: Counters,
    open_ledgers: int,
    budget: MemoryBudget,
    ballast: Ballast | None = None,
) -> dict[str, float]:
    p = "velamq_storage_"
    out: dict[str, float] = {}
    js = journal.stats if journal is not None else None
    j_appends = js.appends_total if js else 0
    j_fsyncs = js.fsyncs_total if js else 0
    f_fsyncs = flusher.fsyncs_total if flusher else 0
    if journal is not None:
        out |= _journal_metrics(p, journal)
    if flusher is not None:
        out |= _flusher_metrics(p, flusher)
    if gc is not None:
        out |= _gc_metrics(p, gc)
    out |= write_cache.metrics()
    if write_path is not None:
        out[p + "write_cache_parked_bytes"] = write_path.parked_bytes
        out[p + "write_cache_parked_groups_total"] = write_path.parked_groups_total
        out[p + "failed"] = 0 if write_path.health.writable else 1  # the first version's name
        out |= write_path.health.metrics(p)
    if ballast is not None:
        out[p + "ballast_bytes"] = ballast.present_bytes
        out[p + "ballast_bytes_target"] = ballast.size_bytes
        out[p + "ballast_releases_total"] = ballast.releases_total
    for name, cache in caches:
        out |= cache.metrics(p + name)
    out[p + "tail_cache_skipped_inactive_total"] = counters.tail_cache_skipped_inactive_total
    out[p + "read_cache_read_ahead_entries_total"] = counters.read_ahead_entries_total
    out |= publish_buffer.metrics()
    out |= budget_metrics(p, budget)
    # The first version's figures, under their old names.
    out |= {
        p + "appends_total": j_appends,
        p + "fsyncs_total": j_fsyncs + f_fsyncs,
        p + "fsync_seconds_total": js.fsync_seconds_total if js else 0.0,
        p + "bytes_written_total": (js.bytes_total if js else 0) + (flusher.flush_bytes_total if flusher else 0),
        p + "group_commits_total": js.groups_total if js else 0,
        p + "entries_per_fsync": j_appends / j_fsyncs if j_fsyncs else float(j_appends),
        p + "open_ledgers": open_ledgers,
        p + "pending_appends": counters.pending_appends,
        p + "ledgers_rolled_total": counters.ledgers_rolled_total,
        p + "ledgers_trimmed_total": counters.ledgers_trimmed_total,
        p + "read_entries_cache_total": counters.read_entries_cache_total,
        p + "read_entries_disk_total": counters.read_entries_disk_total,
        p + "ledger_file_reads_total": counters.ledger_file_reads_total,
        p + "cursor_persists_total": counters.cursor_persists_total,
        p + "torn_tails_truncated_total": counters.torn_tails_truncated_total,
    }
    return {k: float(v) for k, v in out.items()}


def _journal_metrics(p: str, journal: Journal) -> dict[str, float]:
    js = journal.stats
    appends, fsyncs = js.appends_total, js.fsyncs_total  # read once: the thread counts on
    return {
        p + "journal_appends_total": appends,
        p + "journal_bytes_total": js.bytes_total,
        p + "journal_groups_total": js.groups_total,
        p + "journal_fsyncs_total": fsyncs,
        p + "journal_fsync_seconds_total": js.fsync_seconds_total,
        p + "journal_fsync_seconds_max": js.fsync_seconds_max,
        p + "journal_fsync_seconds_avg": js.fsync_seconds_total / fsyncs if fsyncs else 0.0,
        p + "journal_write_seconds_total": js.write_seconds_total,
        p + "journal_entries_per_fsync": appends / fsyncs if fsyncs else 0.0,
        p + "journal_entries_per_fsync_last": js.entries_per_fsync_last,
        p + "journal_segments_created_total": js.segments_created_total,
        p + "journal_broken": 1 if journal.failure else 0,  # its last write failed, none succeeded since
        p + "journal_write_failures_total": js.write_failures_total,
        p + "journal_segment_failures_total": js.segment_failures_total,
        p + "journal_repairs_total": js.repairs_total,
        p + "journal_probes_total": js.probes_total,
    }


def _flusher_metrics(p: str, flusher: Flusher) -> dict[str, float]:
    return {
        p + "flushes_total": flusher.flushes_total,
        p + "flush_seconds_total": flusher.flush_seconds_total,
        p + "flush_bytes_total": flusher.flush_bytes_total,
        p + "flush_entries_total": flusher.flush_entries_total,
        p + "flush_runs_total": flusher.flush_runs_total,
        p + "flush_logs_total": flusher.flush_logs_total,
        p + "flush_fsyncs_total": flusher.fsyncs_total,
        p + "flush_checkpoints_total": flusher.checkpoints_total,
        p + "flush_journal_segments_deleted_total": flusher.journal_segments_deleted_total,
        p + "flush_failures_total": flusher.failures_total,
        p + "flush_journal_trim_failures_total": flusher.trim_failures_total,
    }


def _gc_metrics(p: str, gc: GarbageCollector) -> dict[str, float]:
    logs = gc.last_logs
    return {
        p + "gc_runs_total": gc.runs_total,
        p + "gc_logs_deleted_total": gc.logs_deleted_total,
        p + "gc_logs_compacted_total": gc.logs_compacted_total,
        p + "gc_bytes_reclaimed_total": gc.bytes_reclaimed_total,
        p + "gc_bytes_copied_total": gc.bytes_copied_total,
        p + "gc_seconds_total": gc.seconds_total,
        p + "gc_errors_total": gc.errors_total,
        p + "entry_logs": len(logs),
        p + "entry_log_bytes": sum(row.total_bytes for row in logs),
        p + "entry_log_live_bytes": sum(row.live_bytes for row in logs),
    }
