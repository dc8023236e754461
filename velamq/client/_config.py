"""Client, producer and consumer settings: Pulsar's option names in snake_case, Pulsar's defaults.

Defaults follow the official Python client (pulsar-client 3.x, C++ based), so code moved from it
behaves the same; the one addition is blocking_aware_routing (PR-11), on by default.

ProducerConfig.tuned() is vivo's producer tuning template (PR-12): from the message size, the
partition count, a memory budget and the acceptable delay it derives every related setting, so the
batch container can always build full batches while half the pending queue waits for receipts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from velamq._limits import MIB
from velamq.client._errors import InvalidConfigurationError
from velamq.client.schema._schemas import Schema
from velamq.client.security._settings import check_authentication

KIB = 1024

SUBSCRIPTION_TYPES = ("exclusive", "shared", "failover", "key_shared")
INITIAL_POSITIONS = ("latest", "earliest")
ACCESS_MODES = ("shared", "exclusive", "wait_for_exclusive", "exclusive_with_fencing")
ROUTING_MODES = ("single_partition", "round_robin", "custom")
HASHING_SCHEMES = ("boost", "java_string", "murmur3_32")
COMPRESSION_TYPES = ("none", "lz4", "zlib", "zstd", "snappy")
REGEX_SUBSCRIPTION_MODES = ("persistent_only", "non_persistent_only", "all_topics")

# The tuning template's bounds (PR-12).
tuned_max_pending_messages_min = 1000
tuned_max_pending_messages_max = 2000
tuned_batch_bytes_max = 1 * MIB
tuned_publish_delay_ms_min = 1
tuned_publish_delay_ms_max = 100


def _normalise(value: str, allowed: Sequence[str], what: str) -> str:
    v = value.lower().replace("-", "_")
    aliases = {"roundrobin": "round_robin", "round_robin_distribution": "round_robin",
               "single": "single_partition", "keyshared": "key_shared", "javastringhash": "java_string",
               "boosthash": "boost", "murmur3_32hash": "murmur3_32", "murmur3": "murmur3_32",
               "custom_partition": "custom"}
    v = aliases.get(v, v)
    if v not in allowed:
        raise InvalidConfigurationError(f"unknown {what} {value!r}; one of {list(allowed)}")
    return v


@dataclass(frozen=True, slots=True)
class ClientConfig:
    operation_timeout_s: float = 30.0
    connection_timeout_s: float = 10.0
    keep_alive_interval_s: float = 30.0
    memory_limit_bytes: int = 64 * MIB  # client-wide, on uncompressed payload bytes (PR-5)
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 60.0
    max_lookup_redirects: int = 20
    stats_interval_s: float = 0.0
    # Security, with the official client's names: an authentication plugin (velamq.client's
    # AuthenticationToken / Basic / TLS / Authentication(plugin, params)), and for pulsar+ssl://
    # the CA file, whether any certificate is accepted, host name checking, a client certificate.
    authentication: Any = None
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tls_validate_hostname: bool = False
    tls_certificate_file_path: str | None = None
    tls_private_key_file_path: str | None = None

    def __post_init__(self) -> None:
        check_authentication(self.authentication)
        if self.operation_timeout_s <= 0 or self.connection_timeout_s <= 0:
            raise InvalidConfigurationError("timeouts must be positive")
        if self.memory_limit_bytes < 0:
            raise InvalidConfigurationError("memory_limit_bytes must be >= 0 (0 = unlimited)")


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_ms: int = 30_000
    max_pending_messages: int = 1000
    max_pending_messages_across_partitions: int = 50_000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * KIB
    batching_max_publish_delay_ms: int = 10
    batching_partition_switch_frequency_by_publish_delay: int = 10
    chunking_enabled: bool = False
    # Chunk payload size; None = the broker's max message size (told in CONNECTED).
    chunk_max_message_bytes: int | None = None
    compression_type: str = "none"
    hashing_scheme: str = "boost"
    message_routing_mode: str = "round_robin"
    message_router: Any = None
    blocking_aware_routing: bool = True
    lazy_start_partitioned_producers: bool = False
    access_mode: str = "shared"
    properties: Mapping[str, str] = field(default_factory=dict)
    interceptors: tuple[Any, ...] = ()
    # The values' schema (velamq.client.schema); None: bytes, and no schema is registered.
    schema: Schema[Any] | None = None
    # The client-wide memory limit this config was derived for (tuned()); informational: the
    # limit itself is a client setting, AsyncClient(memory_limit_bytes=...).
    memory_limit_bytes: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "compression_type",
                           _normalise(self.compression_type, COMPRESSION_TYPES, "compression_type"))
        object.__setattr__(self, "hashing_scheme", _normalise(self.hashing_scheme, HASHING_SCHEMES, "hashing_scheme"))
        object.__setattr__(self, "message_routing_mode",
                           _normalise(self.message_routing_mode, ROUTING_MODES, "message_routing_mode"))
        object.__setattr__(self, "access_mode", _normalise(self.access_mode, ACCESS_MODES, "access_mode"))
        object.__setattr__(self, "interceptors", tuple(self.interceptors))
        _check_schema(self.schema)
        if self.message_router is not None and self.message_routing_mode != "custom":
            object.__setattr__(self, "message_routing_mode", "custom")
        if self.message_routing_mode == "custom" and self.message_router is None:
            raise InvalidConfigurationError("message_routing_mode 'custom' needs a message_router")
        if self.chunking_enabled and self.batching_enabled:
            raise InvalidConfigurationError("chunking and batching cannot both be enabled (CH-1)")
        if self.max_pending_messages < 0 or self.max_pending_messages_across_partitions < 0:
            raise InvalidConfigurationError("max_pending_messages must be >= 0 (0 = unlimited)")
        if self.batching_max_messages <= 0 or self.batching_max_bytes <= 0:
            raise InvalidConfigurationError("batching limits must be positive")
        if self.batching_max_publish_delay_ms < 0 or self.send_timeout_ms < 0:
            raise InvalidConfigurationError("delays and timeouts must be >= 0")
        if self.batching_partition_switch_frequency_by_publish_delay < 1:
            raise InvalidConfigurationError("batching_partition_switch_frequency_by_publish_delay must be >= 1")
        if self.chunk_max_message_bytes is not None and self.chunk_max_message_bytes <= 0:
            raise InvalidConfigurationError("chunk_max_message_bytes must be positive")

    def with_options(self, **options: Any) -> Self:
        result: Self = _with_options(self, options)
        return result

    def pending_limit_per_partition(self, partitions: int) -> int:
        """Effective per-partition permits: min(maxPending, across / partitions) (PR-5); 0 = none."""
        limit = self.max_pending_messages
        if partitions > 1 and self.max_pending_messages_across_partitions > 0:
            across = max(1, self.max_pending_messages_across_partitions // partitions)
            limit = across if limit == 0 else min(limit, across)
        return limit

    @classmethod
    def tuned(cls, message_bytes: int, partitions: int, memory_limit_bytes: int, max_delay_ms: int,
              **overrides: Any) -> ProducerConfig:
        """The producer tuning template (PR-12), within a memory budget.

            maxPendingMessages          1000..2000, as many as the budget holds
                                        (fewer than 1000 only when the budget cannot hold 1000)
            across partitions           maxPending x partitions
            memoryLimit                 maxPending x partitions x messageBytes  (<= the budget)
            batchingMaxMessages         maxPending / 2   (half the queue builds the next batch
                                                         while the other half awaits receipts)
            batchingMaxBytes            min(memoryLimit / partitions / 2, 1 MiB)
            batchingMaxPublishDelay     max_delay_ms clamped to 1..100 ms
            partition switch frequency  1: switch partition after every batch
        """
        if message_bytes <= 0 or partitions <= 0 or memory_limit_bytes <= 0:
            raise InvalidConfigurationError("message_bytes, partitions and memory_limit_bytes must be positive")
        per_partition_fit = memory_limit_bytes // (partitions * message_bytes)
        max_pending = min(tuned_max_pending_messages_max, per_partition_fit)
        max_pending = max(2, max_pending)
        memory_limit = max_pending * partitions * message_bytes
        batch_bytes = max(message_bytes, min(memory_limit // partitions // 2, tuned_batch_bytes_max))
        delay = min(tuned_publish_delay_ms_max, max(tuned_publish_delay_ms_min, max_delay_ms))
        options: dict[str, Any] = {
            "max_pending_messages": max_pending,
            "max_pending_messages_across_partitions": max_pending * partitions,
            "batching_enabled": True,
            "batching_max_messages": max(1, max_pending // 2),
            "batching_max_bytes": batch_bytes,
            "batching_max_publish_delay_ms": delay,
            "batching_partition_switch_frequency_by_publish_delay": 1,
            "message_routing_mode": "round_robin",
            "blocking_aware_routing": True,
            "memory_limit_bytes": memory_limit,
        }
        options.update(overrides)
        return cls(**options)


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """Send a message to dead_letter_topic once it was redelivered max_redeliver_count times (CO-3).

    The default topic is "<topic>-<subscription>-DLQ", as in the official clients."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    initial_subscription_name: str | None = None

    def __post_init__(self) -> None:
        if self.max_redeliver_count < 1:
            raise InvalidConfigurationError("max_redeliver_count must be >= 1")


@dataclass(frozen=True, slots=True)
class KeySharedPolicy:
    """Key_Shared mode: "auto_split" (the broker splits hash ranges) or "sticky" with fixed ranges."""

    mode: str = "auto_split"
    sticky_ranges: tuple[tuple[int, int], ...] = ()
    allow_out_of_order_delivery: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("auto_split", "sticky"):
            raise InvalidConfigurationError(f"unknown key shared mode {self.mode!r}")
        if self.mode == "sticky" and not self.sticky_ranges:
            raise InvalidConfigurationError("sticky Key_Shared needs sticky_ranges")
        for start, end in self.sticky_ranges:
            if not 0 <= start <= end < 65536:
                raise InvalidConfigurationError(f"bad hash range [{start}, {end}]")


@dataclass(frozen=True, slots=True)
class BatchReceivePolicy:
    """Pulsar's BatchReceivePolicy for Consumer.batch_receive(): a batch is complete at
    max_num_messages messages or max_num_bytes value bytes, or when timeout_ms has passed.
    Defaults are Pulsar's (-1, 10 MiB, 100 ms); a max_num_messages of 0 or less, or above the
    receiver queue size, means the receiver queue size (the queue never holds more, so waiting for
    more could only end on the timeout)."""

    max_num_messages: int = -1
    max_num_bytes: int = 10 * MIB
    timeout_ms: int = 100

    def __post_init__(self) -> None:
        if self.max_num_messages <= 0 and self.max_num_bytes <= 0 and self.timeout_ms <= 0:
            raise InvalidConfigurationError("a batch receive policy needs a message, byte or time limit")
        if self.timeout_ms < 0:
            raise InvalidConfigurationError("batch receive timeout_ms must be >= 0")

    def effective_max_messages(self, receiver_queue_size: int) -> int:
        queue = max(1, receiver_queue_size)
        return queue if self.max_num_messages <= 0 else min(self.max_num_messages, queue)


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    subscription_type: str = "exclusive"
    initial_position: str = "latest"
    receiver_queue_size: int = 1000
    max_total_receiver_queue_size_across_partitions: int = 50_000
    consumer_name: str | None = None
    ack_grouping_time_ms: int = 100
    ack_grouping_max_size: int = 1000
    # acknowledge() waits for the broker's ACK_RESPONSE and raises if the ack failed (the official
    # clients' ackReceiptEnabled / Tencent's 600 k topics); acks then leave at once, not grouped.
    ack_receipt_enabled: bool = False
    negative_ack_redelivery_delay_ms: int = 60_000
    ack_timeout_ms: int = 0
    ack_timeout_tick_ms: int = 1000
    dead_letter_policy: DeadLetterPolicy | None = None
    batch_index_ack_enabled: bool = False
    key_shared_policy: KeySharedPolicy | None = None
    max_pending_chunked_message: int = 10
    expire_time_of_incomplete_chunked_message_ms: int = 60_000
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    priority_level: int = 0
    properties: Mapping[str, str] = field(default_factory=dict)
    read_compacted: bool = False
    replicate_subscription_state_enabled: bool = False
    pattern_auto_discovery_period_s: float = 60.0
    regex_subscription_mode: str = "persistent_only"
    # Readers: whether the start message itself is delivered (the broker always starts at it).
    start_message_id_inclusive: bool = False
    # Called with (consumer, is_active) on ACTIVE_CONSUMER_CHANGE (Failover / Exclusive).
    consumer_event_listener: Callable[[Any, bool], None] | None = None
    batch_receive_policy: BatchReceivePolicy = field(default_factory=BatchReceivePolicy)
    # The values' schema (velamq.client.schema): checked by the broker on SUBSCRIBE, and
    # Message.value is decoded with it. None: Message.value is the bytes.
    schema: Schema[Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "subscription_type",
                           _normalise(self.subscription_type, SUBSCRIPTION_TYPES, "subscription_type"))
        object.__setattr__(self, "initial_position",
                           _normalise(self.initial_position, INITIAL_POSITIONS, "initial_position"))
        object.__setattr__(self, "regex_subscription_mode", _normalise(
            self.regex_subscription_mode, REGEX_SUBSCRIPTION_MODES, "regex_subscription_mode"))
        if self.receiver_queue_size < 0:
            raise InvalidConfigurationError("receiver_queue_size must be >= 0")
        if self.ack_timeout_ms and self.ack_timeout_ms < 1000:
            raise InvalidConfigurationError("ack_timeout_ms must be 0 (off) or >= 1000")
        if self.max_pending_chunked_message < 1:
            raise InvalidConfigurationError("max_pending_chunked_message must be >= 1")
        if self.key_shared_policy is not None and self.subscription_type != "key_shared":
            raise InvalidConfigurationError("key_shared_policy needs subscription_type 'key_shared'")
        _check_schema(self.schema)

    def with_options(self, **options: Any) -> Self:
        result: Self = _with_options(self, options)
        return result


def _check_schema(schema: Any) -> None:
    if schema is not None and not isinstance(schema, Schema):
        raise InvalidConfigurationError(
            f"schema must be a velamq.client.schema schema (AvroSchema(Record) ...), not {type(schema).__name__}"
        )


def _with_options(config: Any, options: Mapping[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise InvalidConfigurationError(f"unknown option(s) {unknown} for {type(config).__name__}")
    return dataclasses.replace(config, **options)
