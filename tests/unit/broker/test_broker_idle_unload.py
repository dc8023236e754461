"""Idle topics unload (issue 10), on a ManualClock: a BrokerService over real storage and metadata in a
temp dir, clients attached as ServerProducers / ServerConsumers over recording channels.

The rule: a topic with no producer, no connected consumer and no pending work (dispatch, delayed
entries, compaction, appends in flight) unloads once `topic_idle_unload_s` have passed since it was
last used; a lookup is a use; the next lookup loads it again, with what it stored and its cursors
as they were.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from broker_testing import RecordingChannel, consumer, entry, payload_of, producer, publish, settled, subscribe
from wait_helpers import until

from velamq._clock import ManualClock
from velamq._topic_name import TopicName
from velamq.broker import BrokerConfig, BrokerService
from velamq.broker._rates import NO_RATE
from velamq.broker.session._eager import start_eagerly
from velamq.broker.subscription._selector import SubType
from velamq.broker.subscription._subscription import Subscription
from velamq.broker.topic._topic import Topic
from velamq.metadata import MetadataStore
from velamq.server import storage_config
from velamq.storage import Storage

IDLE_S = 60.0
NAME = "persistent://public/default/idle"


@asynccontextmanager
async def broker(tmp_path: Path, clock: ManualClock) -> AsyncIterator[BrokerService]:
    """A BrokerService without its listener, its idle unloader running on `clock`."""
    config = BrokerConfig(data_dir=tmp_path, sync_policy="none", topic_idle_unload_s=IDLE_S)
    metadata = MetadataStore(tmp_path / "metadata.db")
    storage = Storage(storage_config(config))  # storage's own timers run on the real clock
    await metadata.start()
    await storage.start()
    service = BrokerService(config, storage, metadata, clock)
    service.idle_unloader.start()
    try:
        yield service
    finally:
        await service.close()
        await storage.close()
        await metadata.close()


def run(tmp_path: Path, body: Callable[[BrokerService, ManualClock], Awaitable[None]]) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with broker(tmp_path, clock) as service:
            await body(service, clock)

    asyncio.run(main())


async def load(service: BrokerService, name: str = NAME) -> Topic:
    return await service.get_topic(TopicName.parse(name), create=True)


async def pass_time(service: BrokerService, clock: ManualClock, seconds: float) -> None:
    """Advance the clock by `seconds` once the unloader sleeps, then let it finish its batch."""
    unloader = service.idle_unloader
    await until(lambda: unloader.sleeping_until is not None)
    batches = unloader.batches_total
    target = clock.monotonic_s() + seconds
    due = unloader.sleeping_until is not None and unloader.sleeping_until <= target
    clock.advance(seconds)
    if due:  # it wakes: wait until it has taken its batch and sleeps (or waits) again
        await until(lambda: unloader.batches_total > batches or unloader.sleeping_until is not None)
        await until(lambda: not any(t.closed for t in service.topics.values()))


def test_an_idle_topic_unloads_after_the_idle_time_and_not_before(tmp_path: Path) -> None:
    async def body(service: BrokerService, clock: ManualClock) -> None:
        topic = await load(service)
        await pass_time(service, clock, IDLE_S - 1)
        assert service.loaded_topic(NAME) is topic
        await pass_time(service, clock, 2)
        await until(lambda: service.idle_unloader.unloaded_total == 1)  # counted once closed
        assert service.loaded_topic(NAME) is None and topic.closed
        assert topic.ledger.closing_or_closed is not None and topic.ledger.closing_or_closed.done()
        assert NAME not in service.storage.open_ledgers

    run(tmp_path, body)


def test_a_lookup_is_a_use_and_moves_the_unload_on(tmp_path: Path) -> None:
    async def body(service: BrokerService, clock: ManualClock) -> None:
        topic = await load(service)
        await pass_time(service, clock, IDLE_S / 2)
        assert await load(service) is topic  # used again: idle from now on
        await pass_time(service, clock, IDLE_S / 2 + 2)
        assert service.loaded_topic(NAME) is topic
        await pass_time(service, clock, IDLE_S / 2)
        await until(lambda: service.loaded_topic(NAME) is None)

    run(tmp_path, body)


def test_a_topic_with_a_producer_never_unloads_and_does_once_it_leaves(tmp_path: Path) -> None:
    async def body(service: BrokerService, clock: ManualClock) -> None:
        topic = await load(service)
        p = producer(topic)
        for _ in range(5):
            await pass_time(service, clock, IDLE_S * 2)
            assert service.loaded_topic(NAME) is topic
        topic.remove_producer(p)
        await pass_time(service, clock, IDLE_S + 2)
        await until(lambda: service.loaded_topic(NAME) is None)

    run(tmp_path, body)


def test_a_topic_with_a_connected_consumer_never_unloads(tmp_path: Path) -> None:
    async def body(service: BrokerService, clock: ManualClock) -> None:
        topic = await load(service)
        subscription = await subscribe(topic, "s")
        c, _ = consumer(subscription)
        for _ in range(5):
            await pass_time(service, clock, IDLE_S * 2)
            assert service.loaded_topic(NAME) is topic
        subscription.remove_consumer(c)
        await pass_time(service, clock, IDLE_S * 2 + 2)  # busy at the last check: idle_s from then
        await until(lambda: service.loaded_topic(NAME) is None)

    run(tmp_path, body)


def test_a_topic_with_a_pending_delayed_message_never_unloads(tmp_path: Path) -> None:
    async def body(service: BrokerService, clock: ManualClock) -> None:
        topic = await load(service)
        subscription = await subscribe(topic, "s", SubType.SHARED)
        c, channel = consumer(subscription, permits=10)
        deliver_at = clock.now_ms() + int(IDLE_S * 100 * 1000)
        p = producer(topic)
        data = entry(b"later", publish_time=clock.now_ms(), deliver_at=deliver_at)
        await topic.publish(p, data, 1, 0, 0, dedup_checked=True)
        topic.remove_producer(p)
        await until(lambda: subscription.delayed_messages == 1)
        subscription.remove_consumer(c)  # gone; the delayed entry still waits in the subscription
        for _ in range(5):
            await pass_time(service, clock, IDLE_S * 2)
            assert service.loaded_topic(NAME) is topic
        assert subscription.delayed_messages == 1 and channel.messages() == []

    run(tmp_path, body)


def test_a_reloaded_topic_has_its_messages_and_cursors(tmp_path: Path) -> None:
    """Unload, then load again transparently: what was sent before is received after, and what
    was acknowledged before is not received again."""
    async def body(service: BrokerService, clock: ManualClock) -> None:
        topic = await load(service)
        subscription = await subscribe(topic, "s")
        c, channel = consumer(subscription, permits=10)
        positions = await publish(topic, [b"one", b"two", b"three"], clock)
        topic.remove_producer(topic.producers["p"])
        await until(lambda: len(channel.messages()) == 3)
        subscription.acknowledge([(positions[0], None)])
        subscription.remove_consumer(c)
        await pass_time(service, clock, IDLE_S * 2 + 2)
        await until(lambda: service.loaded_topic(NAME) is None)

        reloaded = await load(service)
        assert reloaded is not topic and not reloaded.closed
        again = await subscribe(reloaded, "s")
        _, channel = consumer(again, permits=10)
        await until(lambda: len(channel.messages()) == 2)
        await settled(again)
        assert [payload_of(e) for _, _, e in channel.messages()] == [b"two", b"three"]
        await publish(reloaded, [b"four"], clock)
        await until(lambda: len(channel.messages()) == 3)

    run(tmp_path, body)


def test_many_idle_topics_unload_in_batches_and_an_idle_topic_stays_small(tmp_path: Path) -> None:
    async def body(service: BrokerService, clock: ManualClock) -> None:
        names = [f"persistent://public/default/many-{i}" for i in range(30)]
        topics = await asyncio.gather(*(load(service, n) for n in names))
        for topic in topics:
            subscription = await subscribe(topic, "s")
            c, _ = consumer(subscription, permits=5)
            await publish(topic, [b"x"], clock)
            topic.remove_producer(topic.producers["p"])
            subscription.remove_consumer(c)
        await until(lambda: all(t.idle for t in topics))  # the dispatch tasks end with their consumers
        idle = topics[0].subscriptions["s"]
        assert not idle.consumers and idle.dispatch_idle and topics[0].rate_in is not NO_RATE
        await pass_time(service, clock, IDLE_S * 2 + 2)
        await until(lambda: service.idle_unloader.unloaded_total == 30)
        assert not service.topics
        assert service.idle_unloader.tracked == 0
        assert NO_RATE.messages_total == 0 and NO_RATE.bytes_total == 0

    run(tmp_path, body)


def test_a_channel_never_sees_frames_after_the_unload_of_an_idle_topic(tmp_path: Path) -> None:
    """An idle topic has no clients: unloading it sends nothing to anyone."""
    async def body(service: BrokerService, clock: ManualClock) -> None:
        topic = await load(service)
        channel = RecordingChannel()
        p = producer(topic, channel)
        topic.remove_producer(p)
        await pass_time(service, clock, IDLE_S * 2 + 2)
        await until(lambda: service.loaded_topic(NAME) is None)
        assert channel.frames == []

    run(tmp_path, body)


def test_the_same_new_subscription_asked_for_at_once_is_created_once_and_the_topic_is_busy_meanwhile(
    tmp_path: Path,
) -> None:
    async def body(service: BrokerService, clock: ManualClock) -> None:
        topic = await load(service)
        got: dict[str, Subscription] = {}

        async def subscribe(key: str, name: str) -> None:
            got[key] = await topic.subscription(name, SubType.SHARED, True, True, None)

        # Each runs at once up to its first wait (the cursor's journal write, or the first creation
        # of the same name), the rest as a task: the creations are under way right here.
        loop = asyncio.get_running_loop()
        tasks = [start_eagerly(loop, subscribe(key, name)) for key, name in (("a", "s"), ("b", "s"), ("c", "t"))]
        assert all(task is not None for task in tasks)
        assert not topic.idle
        await asyncio.gather(*(task for task in tasks if task is not None))
        a, b, c = got["a"], got["b"], got["c"]
        assert a is b and a is not c
        assert sorted(topic.ledger.cursors) == ["s", "t"]
        assert topic.idle  # nothing left in creation
        assert await topic.subscription("s", SubType.SHARED, True, True, None) is a

    run(tmp_path, body)
