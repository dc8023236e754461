"""Snapshots of broker figures, taken on the loop and handed to the admin tier, which renders them
(Prometheus text, the console, Pulsar's TopicStats and PersistentTopicInternalStats JSON).

All are frozen: the admin tier may read them from a worker thread while the loop moves on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from velamq.broker.stats._rate_history import RateSeries
from velamq.storage import Position

# ---- metrics (/metrics, console) ------------------------------------------------------------------


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
class NamespaceMetrics:
    """The loaded topics of one namespace, summed (what /metrics shows with
    exposeTopicLevelMetricsInPrometheus=false, as Pulsar does, or above topicLevelMetricsMaxTopics)."""

    namespace: str
    topics: int  # loaded
    subscriptions: int
    producers: int
    consumers: int
    msg_in_total: int
    bytes_in_total: int
    msg_out_total: int
    bytes_out_total: int
    storage_size_bytes: int
    entries_total: int
    backlog_entries: int  # summed over every subscription
    backlog_size_bytes: int
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0


@dataclass(frozen=True, slots=True)
class BrokerMetrics:
    connections_active: int
    connections_opened_total: int
    # Per loaded topic: filled by metrics_snapshot (the console) and, with
    # exposeTopicLevelMetricsInPrometheus, by the /metrics scrape; empty otherwise.
    topics: tuple[TopicMetrics, ...]
    # Counters of the storage layer, already named in Prometheus style (e.g. velamq_storage_fsyncs_total).
    storage: dict[str, float] = field(default_factory=dict)
    # The broker clock's monotonic seconds when the snapshot was taken (rates between snapshots).
    taken_at_s: float = 0.0
    # Rounds of the policy checker since start (TTL, retention, backlog quota, ack holes, rates).
    policy_checks_total: int = 0
    # The broker's limits and guards (docs/operations.md), named in Prometheus style like `storage`:
    # connections and refusals, the network's memory, disk usage and read-only state.
    limits: dict[str, float] = field(default_factory=dict)
    # Per namespace, the loaded topics summed (the /metrics scrape's default; empty in
    # metrics_snapshot). A scrape costs the same at a million topics as at a thousand.
    namespaces: tuple[NamespaceMetrics, ...] = ()
    topics_loaded: int = 0
    topics_unloaded_total: int = 0  # by the idle unloader


@dataclass(frozen=True, slots=True)
class BrokerOverview:
    """What the console's first page shows, cheap at any number of topics: no per-topic walk."""

    connections_active: int
    connections_opened_total: int
    topics_loaded: int
    topics_loaded_by_namespace: Mapping[str, int]
    rate_history: RateSeries  # msg/s in and out of the whole broker over the last minutes
    busiest_topics: tuple[tuple[str, float, float], ...]  # (topic, msg/s in, msg/s out), busiest first


# ---- topic stats (admin REST: /stats) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PublisherStats:
    producer_id: int
    producer_name: str
    access_mode: str  # Shared | Exclusive | WaitForExclusive | ExclusiveWithFencing
    msg_rate_in: float
    msg_throughput_in: float
    average_msg_size: float
    chunked_message_rate: float
    address: str
    connected_since_ms: int
    client_version: str = ""  # CONNECT's client_version of its connection
    metadata: Mapping[str, str] = field(default_factory=dict)  # the producer's properties


@dataclass(frozen=True, slots=True)
class ConsumerStats:
    consumer_name: str
    msg_rate_out: float
    msg_throughput_out: float
    bytes_out_counter: int
    msg_out_counter: int
    chunked_message_rate: float
    available_permits: int
    unacked_messages: int
    address: str
    connected_since_ms: int
    key_hash_ranges: tuple[tuple[int, int], ...]  # Key_Shared: [start, end] ranges owned
    is_active: bool
    client_version: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)  # the consumer's properties
    last_acked_ms: int = 0  # epoch ms; 0: never
    last_consumed_ms: int = 0  # when an entry was last sent to it
    last_consumed_flow_ms: int = 0  # when it last sent FLOW
    msg_rate_redeliver: float = 0.0  # messages per second it gave back for redelivery
    read_position_when_joining: Position | None = None  # Key_Shared, while it waits for older entries


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    type: str  # Exclusive | Shared | Failover | Key_Shared
    is_durable: bool
    msg_backlog: int
    backlog_size_bytes: int
    unacked_messages: int
    mark_delete_position: Position
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    bytes_out_counter: int = 0
    msg_out_counter: int = 0
    msg_rate_redeliver: float = 0.0
    msg_rate_expired: float = 0.0
    total_msg_expired: int = 0
    chunked_message_rate: float = 0.0
    consumers: tuple[ConsumerStats, ...] = ()
    msg_delayed: int = 0  # delayed messages not yet due (Pulsar's msgDelayed)


@dataclass(frozen=True, slots=True)
class TopicStats:
    msg_rate_in: float
    msg_throughput_in: float
    bytes_in_counter: int
    msg_in_counter: int
    average_msg_size: float
    msg_chunk_published: bool
    storage_size_bytes: int
    backlog_size_bytes: int  # of the subscription with the largest backlog
    publishers: tuple[PublisherStats, ...]
    subscriptions: Mapping[str, SubscriptionStats]
    deduplication_enabled: bool
    topic_epoch: int
    non_contiguous_deleted_ranges: int  # acked ranges beyond mark-delete, over every cursor


# ---- internal stats (admin REST: /internalStats) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerStats:
    ledger_id: int
    entries: int
    size_bytes: int
    offloaded: bool = False  # its offloaded copy is complete (docs/offload.md)


@dataclass(frozen=True, slots=True)
class CursorStats:
    mark_delete_position: Position
    read_position: Position
    messages_consumed_counter: int
    individually_acked: tuple[tuple[Position, Position], ...]  # [first, last] ranges
    entries_since_mark_delete: int  # acked or not: what ack holes inflate
    active: bool


@dataclass(frozen=True, slots=True)
class InternalStats:
    entries_added_counter: int
    number_of_entries: int
    total_size_bytes: int
    current_ledger_entries: int
    current_ledger_size_bytes: int
    pending_add_entries: int
    last_confirmed_entry: Position  # (current ledger, -1) when the topic is empty
    ledgers: tuple[LedgerStats, ...]
    cursors: Mapping[str, CursorStats]


@dataclass(frozen=True, slots=True)
class LastMessageId:
    ledger_id: int
    entry_id: int  # -1 when the topic is empty
    partition_index: int  # -1 for a non-partitioned topic
    batch_index: int = -1  # the last message of a batch entry, -1 when it is no batch
