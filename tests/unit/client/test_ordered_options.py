"""OrderedConsumer options: what it refuses, and how it tells async handlers from plain ones."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from velamq.client import AsyncClient, ConsumerConfig, DeadLetterPolicy, InvalidConfigurationError, OrderedConsumer
from velamq.client.ordered._consumer import is_async_handler


async def handler(message: Any) -> None:
    return None


def plain(message: Any) -> None:
    return None


class AsyncCallable:
    async def __call__(self, message: Any) -> None:
        return None


def test_async_and_plain_handlers_are_told_apart() -> None:
    assert is_async_handler(handler) and is_async_handler(AsyncCallable())
    assert is_async_handler(functools.partial(handler))
    assert not is_async_handler(plain) and not is_async_handler(functools.partial(plain))
    assert not is_async_handler(lambda m: None)


@pytest.mark.parametrize("options", [
    {"partition_parallelism": 0},
    {"max_in_flight": 0},
    {"ack_mode": "sometimes"},
    {"unkeyed": "anywhere"},
    {"subscription_type": "shared"},
    {"subscription_type": "key_shared"},
    {"consumer_config": ConsumerConfig(ack_timeout_ms=5000)},
    {"consumer_config": ConsumerConfig(dead_letter_policy=DeadLetterPolicy(3))},
    {"max_attempts": 3},  # giving up needs somewhere to put the message
    {"retry_initial_backoff_ms": 500, "retry_max_backoff_ms": 100},
    {"handler_mode": "sometimes"},
    {"handler_mode": "thread"},  # the handler is a coroutine function: it needs the loop
    {"handler_mode": "process"},
    {"processes": 0},
    {"key_assignment": "random"},
])
def test_refused_options(options: dict[str, Any]) -> None:
    async def main() -> None:
        client = AsyncClient("pulsar://127.0.0.1:1")  # never connects: options are checked first
        with pytest.raises(InvalidConfigurationError):
            OrderedConsumer(client, "t", "s", handler, **options)
        await client.close()

    asyncio.run(main())


def test_partition_consumers_get_a_small_queue_and_batch_index_acks() -> None:
    async def main() -> None:
        client = AsyncClient("pulsar://127.0.0.1:1")
        consumer = OrderedConsumer(client, "t", "s", handler, max_in_flight=40, consumer_name="me",
                                   consumer_config=ConsumerConfig(ack_grouping_time_ms=5))
        c = consumer.consumer_config
        assert (c.subscription_type, c.receiver_queue_size, c.batch_index_ack_enabled, c.consumer_name,
                c.ack_grouping_time_ms) == ("failover", 40, True, "me", 5)
        assert OrderedConsumer(client, "t", "s", handler).consumer_config.receiver_queue_size == 100
        assert consumer.topic == "persistent://public/default/t"
        assert consumer.metrics().partitions == ()
        await consumer.close()  # never started: nothing to do
        await client.close()

    asyncio.run(main())


def test_handler_modes_follow_the_handler_unless_named() -> None:
    async def main() -> None:
        client = AsyncClient("pulsar://127.0.0.1:1")
        assert OrderedConsumer(client, "t", "s", handler).handler_mode == "async"
        assert OrderedConsumer(client, "t", "s", plain).handler_mode == "thread"
        assert OrderedConsumer(client, "t", "s", plain, handler_mode="process", processes=2).handler_mode == "process"
        with pytest.raises(InvalidConfigurationError):
            OrderedConsumer(client, "t", "s", plain, handler_mode="async")
        await client.close()

    asyncio.run(main())


def test_a_process_handler_must_be_picklable() -> None:
    async def main() -> None:
        client = AsyncClient("pulsar://127.0.0.1:1")
        with pytest.raises(InvalidConfigurationError, match="picklable"):
            OrderedConsumer(client, "t", "s", lambda m: None, handler_mode="process", processes=1)
        await client.close()

    asyncio.run(main())


def test_free_workers_are_for_the_loop_and_threads_not_processes() -> None:
    async def main() -> None:
        client = AsyncClient("pulsar://127.0.0.1:1")
        with pytest.raises(InvalidConfigurationError, match="free_worker"):
            OrderedConsumer(client, "t", "s", plain, handler_mode="process", key_assignment="free_worker")
        for h in (handler, plain):
            consumer = OrderedConsumer(client, "t", "s", h, key_assignment="free_worker")
            assert consumer.settings.key_assignment == "free_worker"
        await client.close()

    asyncio.run(main())
