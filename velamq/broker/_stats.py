"""Snapshots of broker figures, taken on the loop and handed to the admin tier (metrics, stats)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SubscriptionMetrics:
    name: str
    type: str  # Exclusive | Shared | Failover | Key_Shared
    consumers: int
    backlog_entries: int
    unacked_messages: int
    msg_out_total: int
    bytes_out_total: int
    mark_delete_position: str  # "ledger:entry"
    delayed_messages: int = 0
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    msg_rate_redeliver: float = 0.0
    msg_rate_expired: float = 0.0
    total_msg_expired: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetrics:
    topic: str  # full name, persistent://tenant/ns/local
    producers: int
    consumers: int
    msg_in_total: int
    bytes_in_total: int
    msg_out_total: int
    bytes_out_total: int
    storage_size_bytes: int
    entries_total: int
    backlog_entries: int  # largest backlog among its subscriptions
    subscriptions: tuple[SubscriptionMetrics, ...] = ()
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    backlog_size_bytes: int = 0
    backlog_quota_limit_bytes: int = -1
    backlog_quota_limit_time_s: int = -1


@dataclass(frozen=True, slots=True)
class BrokerMetrics:
    connections_active: int
    connections_opened_total: int
    topics: tuple[TopicMetrics, ...]
    # Counters of the storage layer, already named in Prometheus style (e.g. velamq_storage_fsyncs_total).
    storage: dict[str, float] = field(default_factory=dict)
