"""What the admin tier needs from the broker: the BrokerBackend protocol.

The broker's admin facade (velamq.broker.BrokerAdmin) implements it; the composition root
(velamq/server.py) hands one to the AdminServer. Reads and plain metadata changes go straight to
`metadata`; anything that must also act on live topics (closing producers and consumers,
deleting ledgers, moving cursors) goes through the other methods, so that each topic's state
keeps one owner (docs/architecture.md, "Who owns what"). Stats come back as the broker's typed records; _stats_json.py
renders them as Pulsar's JSON.

Names are full topic names ("persistent://t/ns/x"); the routes hand a partitioned topic's
partitions to these methods one by one, never the partitioned topic itself. Message ids are
(ledger_id, entry_id). Errors are velamq's: NotFoundError, AlreadyExistsError,
PreconditionFailedError (the server maps them to 404, 409, 412).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from velamq.broker import (
    BrokerMetrics,
    BrokerOverview,
    CompactionStatus,
    InternalStats,
    LastMessageId,
    NonPersistentTopicStats,
    RateSeries,
    TopicMetrics,
    TopicStats,
)
from velamq.metadata import MetadataStore, Policies
from velamq.storage import OffloadStatus, Position


class BrokerBackend(Protocol):
    # ---- what the server shows -----------------------------------------------------------------

    @property
    def metadata(self) -> MetadataStore: ...

    @property
    def service_url(self) -> str:
        """"pulsar://host:port" """
        ...

    @property
    def service_url_tls(self) -> str | None:
        """"pulsar+ssl://host:port", or None without TLS."""
        ...

    @property
    def cluster_name(self) -> str:
        """The local cluster (clusterName)."""
        ...

    @property
    def default_policies(self) -> Policies:
        """The broker-wide defaults under namespace and topic policies (?applied=true shows them)."""
        ...

    @property
    def max_message_bytes(self) -> int:
        """The broker's maximum message size: the bound of the topic-level maxMessageSize."""
        ...

    def metrics_snapshot(self) -> BrokerMetrics:
        """Every loaded topic's figures, taken on the loop at once (the console)."""
        ...

    async def scrape_metrics(self) -> BrokerMetrics:
        """What /metrics shows: per topic (the broker's exposeTopicLevelMetricsInPrometheus, on by
        default, under its topicLevelMetricsMaxTopics cap), else per namespace; the loaded topics
        are visited a slice at a time."""
        ...

    @property
    def force_delete_namespace_allowed(self) -> bool:
        """Pulsar's forceDeleteNamespaceAllowed: DELETE namespace?force=true may delete its topics."""
        ...

    async def delete_namespace_topics(self, namespace: str) -> None:
        """Delete every topic and partitioned topic of a namespace (force delete), in batches, the
        loop free in between; their metadata rows go too. The namespace itself is the caller's."""
        ...

    async def policies_changed(self, namespace: str, topic: str | None) -> None:
        """Called after every policy write, so the broker re-reads the policies of live topics."""
        ...

    # ---- the console: figures of loaded topics, never loading one ------------------------------

    def loaded_topics(self, namespace: str) -> list[str]:
        """Full names of the namespace's loaded topics, sorted."""
        ...

    def loaded_topic_metrics(self, topics: Iterable[str]) -> dict[str, TopicMetrics]:
        """Metrics of those of `topics` that are loaded right now; the others are left out."""
        ...

    def broker_overview(self, busiest_max: int) -> BrokerOverview:
        """Connections, loaded topics, the broker's rate history and its `busiest_max` busiest
        topics of the last sample; cheap at any number of topics."""
        ...

    def topic_rate_history(self, topic: str) -> RateSeries | None:
        """The same for one topic; None if it is not loaded or had no traffic lately."""
        ...

    # ---- topics --------------------------------------------------------------------------------

    async def create_topic(self, topic: str) -> None:
        """A non-partitioned topic; AlreadyExistsError if it (or a partitioned one) exists."""
        ...

    async def delete_topic(self, topic: str, force: bool) -> None:
        """Close live producers/consumers (or PreconditionFailedError if in use and not force),
        delete the ledger and the metadata row. NotFoundError if there is no such topic."""
        ...

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """Metadata now; the partitions themselves are created lazily when first used."""
        ...

    async def delete_partitioned_topic(self, topic: str, force: bool) -> None:
        """Like delete_topic for every partition, then the partitioned topic's metadata."""
        ...

    async def unload_topic(self, topic: str) -> None: ...

    async def unload_bundle(self, namespace: str, bundle: str, destination: str | None) -> None:
        """Unload one bundle (`0x..._0x...`) of a namespace: its loaded topics close and their
        clients reconnect, to this broker in one process, else to `destination` (a worker's broker
        id, already checked to be one) or a worker the broker picks. NotFoundError: unknown
        namespace; PreconditionFailedError: not one of the namespace's bundles."""
        ...

    async def trigger_compaction(self, topic: str) -> None:
        """Start a compaction; one already running is left to finish."""
        ...

    def compaction_status(self, topic: str) -> CompactionStatus: ...

    async def trigger_offload(self, topic: str, up_to: Position) -> bool:
        """Offload the sealed ledgers before up_to in the background (docs/offload.md); False if an
        offload of the topic is running. PreconditionFailedError: no offload driver configured."""
        ...

    def offload_status(self, topic: str) -> OffloadStatus: ...

    def offload_store_differs(self, driver: str, bucket: str, endpoint: str, region: str, uri: str) -> str | None:
        """Why a namespace's offload policies naming this store cannot apply on this broker, or None."""
        ...

    async def topic_stats(self, topic: str) -> TopicStats | NonPersistentTopicStats:
        """NotFoundError if the topic is unknown."""
        ...

    async def topic_internal_stats(self, topic: str) -> InternalStats: ...

    async def last_message_id(self, topic: str) -> LastMessageId: ...

    async def trim_topic(self, topic: str) -> None:
        """Apply retention now (pulsar-admin topics trim-topic)."""
        ...

    async def terminate_topic(self, topic: str) -> tuple[int, int]:
        """Terminate a persistent topic: (ledger, entry) of its last message ((ledger, -1) if it
        has none); the same again for a terminated topic."""
        ...

    # ---- reading stored messages (entry bytes as in peek_messages) ------------------------------

    async def read_entry(self, topic: str, message_id: tuple[int, int]) -> bytes:
        """The stored entry at (ledger, entry); NotFoundError if there is none."""
        ...

    async def examine_entry(self, topic: str, from_latest: bool, n: int) -> tuple[tuple[int, int], bytes]:
        """The n-th stored entry (1-based) from the oldest, or back from the newest; NotFoundError."""
        ...

    async def message_id_at(self, topic: str, timestamp_ms: int) -> tuple[int, int]:
        """The first message published at or after timestamp_ms (past the end: the next position)."""
        ...

    # ---- subscriptions -------------------------------------------------------------------------

    async def list_subscriptions(self, topic: str) -> list[str]: ...

    async def create_subscription(self, topic: str, subscription: str, message_id: tuple[int, int] | str) -> None:
        """message_id: "earliest", "latest" or (ledger, entry); AlreadyExistsError if it exists."""
        ...

    async def delete_subscription(self, topic: str, subscription: str, force: bool) -> None: ...

    async def skip_messages(self, topic: str, subscription: str, count: int | None) -> None:
        """count None: skip everything (skip_all)."""
        ...

    async def expire_messages(self, topic: str, subscription: str, seconds: int) -> None: ...

    async def reset_cursor(
        self, topic: str, subscription: str, timestamp_ms: int | None, message_id: tuple[int, int] | None
    ) -> None: ...

    async def peek_messages(self, topic: str, subscription: str, count: int) -> list[tuple[tuple[int, int], bytes]]:
        """The first `count` entries of the subscription's backlog as ((ledger, entry), stored entry
        bytes: [0x0e01][crc][metadata size][MessageMetadata][payload])."""
        ...
