"""Choosing the partition of a message (PR-3, PR-11).

A keyed message always goes to signSafeMod(hash(key), partitions), whatever the routing mode, with
the hashing scheme of the producer (BoostHash by default, as the official Python client does). A
message without a key goes where the routing mode says:

    single_partition  one partition picked at random when the producer starts, for every message
    round_robin       without batching: the next partition for every message;
                      with batching: the partition changes every partitionSwitchMs =
                      batching_partition_switch_frequency_by_publish_delay x batching_max_publish_delay_ms,
                      so that a batch fills up in one partition (Java's RoundRobinPartitionMessageRouter)
    custom            message_router.choose_partition(message, partitions) (or a plain callable)

Blocking-aware round robin (PR-11, vivo's improvement): when the partition round robin picks has
no free pending permit, the router moves on to the next partition that has one, so one slow
partition does not stall the whole topic. When no partition has a free permit the original choice
stands and the send waits (or fails) there.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from velamq._clock import Clock, system_clock
from velamq.client._message import ProducerMessage
from velamq.client.producer._boost_hash import hash_function


def sign_safe_mod(dividend: int, divisor: int) -> int:
    """Java's MathUtils.signSafeMod: a modulo that is never negative."""
    mod = dividend % divisor
    return mod + divisor if mod < 0 else mod


@runtime_checkable
class MessageRouter(Protocol):
    """A custom router (message_router): the partition, 0..num_partitions-1, for each message."""

    def choose_partition(self, message: ProducerMessage, num_partitions: int) -> int: ...


RouterLike = MessageRouter | Callable[[ProducerMessage, int], int]
# partition -> True when it can take a message now (it has a free pending permit)
Availability = Callable[[int], bool]


# Where round robin starts, for every producer: one generator (a random.Random of each producer's
# own was seeded from the system's entropy each time and kept 2.5 KB of state per producer).
_START = random.Random()


class PartitionChooser:
    """One producer's routing state: mode, hash, round-robin cursor and switch clock."""

    def __init__(
        self,
        mode: str,
        hashing_scheme: str,
        *,
        batching_enabled: bool,
        batching_max_publish_delay_ms: int,
        partition_switch_frequency: int,
        custom_router: RouterLike | None = None,
        blocking_aware: bool = True,
        clock: Clock = system_clock,
        rng: random.Random | None = None,
    ) -> None:
        if mode not in ("single_partition", "round_robin", "custom"):
            raise ValueError(f"unknown message_routing_mode {mode!r}")
        if mode == "custom" and custom_router is None:
            raise ValueError("message_routing_mode 'custom' needs a message_router")
        self.mode = mode
        self.hash = hash_function(hashing_scheme)
        self.batching_enabled = batching_enabled
        # At least one publish delay between switches, so a batch can fill (vivo's advice).
        self.partition_switch_ms = max(1, batching_max_publish_delay_ms * max(1, partition_switch_frequency))
        self.custom_router = custom_router
        self.blocking_aware = blocking_aware
        self.clock = clock
        rng = rng or _START
        self._start = rng.randrange(1 << 31)
        self._counter = self._start

    def choose(self, message: ProducerMessage, num_partitions: int, available: Availability | None = None) -> int:
        if num_partitions <= 1:
            return 0
        if self.mode == "custom":
            return self._custom(message, num_partitions)
        if message.key:
            return sign_safe_mod(self.hash(message.key), num_partitions)
        if self.mode == "single_partition":
            return sign_safe_mod(self._start, num_partitions)
        if self.batching_enabled:
            chosen = sign_safe_mod(self.clock.now_ms() // self.partition_switch_ms + self._start, num_partitions)
        else:
            chosen = sign_safe_mod(self._counter, num_partitions)
            self._counter += 1
        if self.blocking_aware and available is not None and not available(chosen):
            for step in range(1, num_partitions):
                candidate = (chosen + step) % num_partitions
                if available(candidate):
                    return candidate
        return chosen

    def choose_many(self, keys: Sequence[str | None] | None, count: int, num_partitions: int,
                    batch_messages: int) -> list[int] | int:
        """The partitions of `count` messages of a bulk send (not for custom routing): an int when
        they all go to one. Keys hash as in choose(). Unkeyed messages follow the routing mode,
        except that with batching round robin moves on after every batch_messages messages (a
        batch fills one partition, as the time-based switch means to) instead of by the clock, and
        blocking-aware skipping does not apply (the send waits for room in each partition)."""
        if num_partitions <= 1:
            return 0
        if self.mode == "single_partition":
            unkeyed: int | None = sign_safe_mod(self._start, num_partitions)
        elif self.batching_enabled:
            unkeyed = None
            start = self.clock.now_ms() // self.partition_switch_ms + self._start
        else:
            unkeyed = None
            start = self._counter
            self._counter += count
        if keys is None or not any(keys):
            if unkeyed is not None:
                return unkeyed
            if self.batching_enabled:
                if count <= batch_messages:
                    return sign_safe_mod(start, num_partitions)
                return [sign_safe_mod(start + j // batch_messages, num_partitions) for j in range(count)]
            return [sign_safe_mod(start + j, num_partitions) for j in range(count)]
        cache: dict[str, int] = {}
        out: list[int] = []
        unkeyed_seen = 0
        for key in keys:
            if key:
                partition = cache.get(key)
                if partition is None:
                    partition = cache[key] = sign_safe_mod(self.hash(key), num_partitions)
                out.append(partition)
            else:
                if unkeyed is not None:
                    out.append(unkeyed)
                else:
                    step = unkeyed_seen // batch_messages if self.batching_enabled else unkeyed_seen
                    out.append(sign_safe_mod(start + step, num_partitions))
                unkeyed_seen += 1
        return out

    def _custom(self, message: ProducerMessage, num_partitions: int) -> int:
        router = self.custom_router
        assert router is not None
        if isinstance(router, MessageRouter):
            partition = router.choose_partition(message, num_partitions)
        else:
            partition = router(message, num_partitions)
        if not 0 <= partition < num_partitions:
            raise ValueError(f"message router chose partition {partition} of {num_partitions}")
        return partition
