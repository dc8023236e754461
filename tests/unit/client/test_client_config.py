"""Producer and consumer settings, and the tuning template (PR-5, PR-12)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from velamq._limits import MIB
from velamq.client import ConsumerConfig, InvalidConfigurationError, MessageId, ProducerConfig


def test_defaults_follow_the_official_python_client() -> None:
    c = ProducerConfig()
    assert (c.max_pending_messages, c.max_pending_messages_across_partitions, c.batching_max_messages,
            c.batching_max_bytes, c.batching_max_publish_delay_ms, c.send_timeout_ms, c.hashing_scheme,
            c.message_routing_mode, c.block_if_queue_full) == (1000, 50_000, 1000, 128 * 1024, 10, 30_000, "boost",
                                                              "round_robin", False)


def test_effective_pending_limit_per_partition() -> None:
    c = ProducerConfig(max_pending_messages=1000, max_pending_messages_across_partitions=2000)
    assert c.pending_limit_per_partition(1) == 1000
    assert c.pending_limit_per_partition(4) == 500
    assert c.pending_limit_per_partition(1) == 1000


def test_invalid_combinations() -> None:
    with pytest.raises(InvalidConfigurationError):
        ProducerConfig(chunking_enabled=True, batching_enabled=True)
    with pytest.raises(InvalidConfigurationError):
        ProducerConfig(message_routing_mode="custom")
    with pytest.raises(InvalidConfigurationError):
        ProducerConfig(compression_type="brotli")
    with pytest.raises(InvalidConfigurationError):
        ProducerConfig().with_options(no_such_option=1)
    with pytest.raises(InvalidConfigurationError):
        ConsumerConfig(subscription_type="fanout")
    assert ProducerConfig(message_router=lambda m, n: 0).message_routing_mode == "custom"
    assert ConsumerConfig(subscription_type="Key_Shared").subscription_type == "key_shared"


def test_tuned_matches_the_vivo_template() -> None:
    # 1 KiB messages, 8 partitions, 32 MiB budget: 2000 pending fit per partition (16 MiB).
    c = ProducerConfig.tuned(message_bytes=1024, partitions=8, memory_limit_bytes=32 * MIB, max_delay_ms=10)
    assert c.max_pending_messages == 2000
    assert c.max_pending_messages_across_partitions == 16_000
    assert c.memory_limit_bytes == 2000 * 8 * 1024
    assert c.batching_max_messages == 1000
    assert c.batching_max_bytes == min(c.memory_limit_bytes // 8 // 2, MIB)
    assert c.batching_max_publish_delay_ms == 10
    assert c.batching_partition_switch_frequency_by_publish_delay == 1
    assert c.batching_enabled and c.message_routing_mode == "round_robin" and c.blocking_aware_routing
    assert ProducerConfig.tuned(1024, 8, 32 * MIB, 1000).batching_max_publish_delay_ms == 100
    assert ProducerConfig.tuned(1024, 8, 32 * MIB, 0).batching_max_publish_delay_ms == 1
    assert ProducerConfig.tuned(1024, 8, 32 * MIB, 5, compression_type="lz4").compression_type == "lz4"


@given(st.integers(min_value=1, max_value=1 << 20), st.integers(min_value=1, max_value=1000),
       st.integers(min_value=1 << 16, max_value=1 << 30), st.integers(min_value=-5, max_value=500))
def test_tuned_invariants(message_bytes: int, partitions: int, budget: int, delay: int) -> None:
    c = ProducerConfig.tuned(message_bytes, partitions, budget, delay)
    assert c.max_pending_messages <= 2000
    assert c.memory_limit_bytes == c.max_pending_messages * partitions * message_bytes
    # Within the budget, unless even two messages per partition do not fit.
    assert c.memory_limit_bytes <= budget or c.max_pending_messages == 2
    # A batch never needs more messages than half the pending queue, nor more than 1 MiB.
    assert c.batching_max_messages * 2 <= c.max_pending_messages
    assert c.batching_max_bytes <= max(MIB, message_bytes)
    assert 1 <= c.batching_max_publish_delay_ms <= 100
    assert c.pending_limit_per_partition(partitions) == c.max_pending_messages


@given(st.integers(min_value=-1, max_value=2**40), st.integers(min_value=-1, max_value=2**40),
       st.integers(min_value=-1, max_value=100), st.integers(min_value=-1, max_value=1000),
       st.integers(min_value=0, max_value=1000))
def test_message_id_serialization_round_trip(ledger: int, entry: int, partition: int, batch: int, size: int) -> None:
    mid = MessageId(ledger, entry, partition, batch, size)
    back = MessageId.deserialize(mid.serialize())
    assert back == mid and back.batch_size == size
    chunked = MessageId(ledger, entry + 2, partition, first_chunk=MessageId(ledger, entry, partition))
    again = MessageId.deserialize(chunked.serialize())
    assert again.first_chunk == MessageId(ledger, entry, partition) and again == chunked


def test_message_id_order() -> None:
    ids = [MessageId(1, 2, 0, 1), MessageId(1, 1), MessageId(0, 9), MessageId(1, 2, 0, 0)]
    assert sorted(ids) == [MessageId(0, 9), MessageId(1, 1), MessageId(1, 2, 0, 0), MessageId(1, 2, 0, 1)]
    assert MessageId.earliest < MessageId(0, 0) < MessageId.latest
