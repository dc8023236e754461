"""Key hashes and routing (PR-3, PR-11, WC-3): the partition of a keyed message is the one the
official clients pick. BoostHash values here were checked end to end against pulsar-client 3.13
(tests/interop/test_client_interop.py repeats that check for 10 000 keys)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from velamq._clock import Clock
from velamq.client import ProducerMessage, boost_hash, java_string_hash, murmur3_32_hash, sign_safe_mod
from velamq.client.producer._boost_hash import boost_hash_bytes
from velamq.client.producer._routing import PartitionChooser


def test_java_string_hash_matches_java() -> None:
    # "hello".hashCode() == 99162322; "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == 0  # MIN_VALUE & MAX_VALUE
    assert java_string_hash("") == 0
    assert java_string_hash("\U0001f600") == ((0xD83D * 31 + 0xDE00) & 0x7FFFFFFF)  # UTF-16 surrogates


def test_murmur3_known_values() -> None:
    # MurmurHash3_x86_32 reference values, seed 0.
    assert murmur3_32_hash("") == 0
    assert murmur3_32_hash("hello") == 0x248BFA47 & 0x7FFFFFFF
    assert murmur3_32_hash("The quick brown fox jumps over the lazy dog") == 0x2E4FF723 & 0x7FFFFFFF


def test_boost_hash_regression_values() -> None:
    assert boost_hash("key-1") == 1703803929
    assert boost_hash("abcdefghij") == 2074894306
    assert boost_hash_bytes(b"") == boost_hash_bytes(b"", 0)


@given(st.text(max_size=40))
def test_hashes_are_non_negative_31_bit(key: str) -> None:
    for h in (boost_hash(key), java_string_hash(key), murmur3_32_hash(key)):
        assert 0 <= h <= 0x7FFFFFFF


@given(st.integers(min_value=-(2**40), max_value=2**40), st.integers(min_value=1, max_value=1000))
def test_sign_safe_mod(dividend: int, divisor: int) -> None:
    assert 0 <= sign_safe_mod(dividend, divisor) < divisor


class FakeClock(Clock):
    def __init__(self) -> None:
        self.ms = 1_000_000

    def now_ms(self) -> int:
        return self.ms

    def monotonic_s(self) -> float:
        return self.ms / 1000


@given(st.text(min_size=1, max_size=30), st.integers(min_value=2, max_value=64),
       st.sampled_from(["single_partition", "round_robin"]), st.sampled_from(["boost", "java_string", "murmur3_32"]))
def test_keyed_messages_always_hash(key: str, partitions: int, mode: str, scheme: str) -> None:
    chooser = PartitionChooser(mode, scheme, batching_enabled=True, batching_max_publish_delay_ms=10,
                               partition_switch_frequency=1)
    expected = sign_safe_mod({"boost": boost_hash, "java_string": java_string_hash,
                              "murmur3_32": murmur3_32_hash}[scheme](key), partitions)
    # Even when that partition is full: key order beats load spreading.
    assert chooser.choose(ProducerMessage(b"x", key=key), partitions, lambda p: False) == expected


def test_round_robin_without_batching_visits_every_partition_in_turn() -> None:
    chooser = PartitionChooser("round_robin", "boost", batching_enabled=False, batching_max_publish_delay_ms=10,
                               partition_switch_frequency=10)
    seen = [chooser.choose(ProducerMessage(b"x"), 5) for _ in range(10)]
    assert seen[:5] == [(seen[0] + i) % 5 for i in range(5)] and seen[5:] == seen[:5]


def test_round_robin_with_batching_switches_every_partition_switch_ms() -> None:
    clock = FakeClock()
    clock.ms = 0
    chooser = PartitionChooser("round_robin", "boost", batching_enabled=True, batching_max_publish_delay_ms=10,
                               partition_switch_frequency=3, clock=clock)
    assert chooser.partition_switch_ms == 30
    first = chooser.choose(ProducerMessage(b"x"), 4)
    clock.ms = 29
    assert chooser.choose(ProducerMessage(b"x"), 4) == first
    clock.ms = 30
    assert chooser.choose(ProducerMessage(b"x"), 4) == (first + 1) % 4


def test_blocking_aware_round_robin_skips_full_partitions() -> None:
    chooser = PartitionChooser("round_robin", "boost", batching_enabled=False, batching_max_publish_delay_ms=10,
                               partition_switch_frequency=1)
    full = {0, 1, 2}
    picks = {chooser.choose(ProducerMessage(b"x"), 4, lambda p: p not in full) for _ in range(8)}
    assert picks == {3}
    # Everything full: the round-robin choice stands (the send then waits or fails there).
    assert len({chooser.choose(ProducerMessage(b"x"), 4, lambda p: False) for _ in range(8)}) == 4
    plain = PartitionChooser("round_robin", "boost", batching_enabled=False, batching_max_publish_delay_ms=10,
                             partition_switch_frequency=1, blocking_aware=False)
    assert len({plain.choose(ProducerMessage(b"x"), 4, lambda p: p not in full) for _ in range(8)}) == 4


def test_single_partition_and_custom_router() -> None:
    single = PartitionChooser("single_partition", "boost", batching_enabled=False, batching_max_publish_delay_ms=1,
                              partition_switch_frequency=1)
    assert len({single.choose(ProducerMessage(b"x"), 7) for _ in range(20)}) == 1
    custom = PartitionChooser("custom", "boost", batching_enabled=False, batching_max_publish_delay_ms=1,
                              partition_switch_frequency=1, custom_router=lambda m, n: len(m.value) % n)
    assert custom.choose(ProducerMessage(b"abc", key="k"), 2) == 1
