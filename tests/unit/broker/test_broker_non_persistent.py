"""Non-persistent topics without sockets: dispatch by subscription type, drops, the table's rules.

Pulsar's NonPersistentDispatcher* send an entry to the consumer the type picks if it has a permit
and a writable connection, and drop it otherwise (counted in msgDropRate); nothing is stored and
nothing is redelivered. Each test drives a NonPersistentTopic (or the broker's table of them) with
recording channels and a ManualClock.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from broker_testing import RecordingChannel, T, broker, command, connect, entry, until_reply

from velamq._clock import ManualClock
from velamq._topic_name import TopicName
from velamq.broker import BrokerRequestError, DiskUsage
from velamq.broker.nonpersistent._subscription import NonPersistentSubscription
from velamq.broker.nonpersistent._table import NonPersistentTopics
from velamq.broker.nonpersistent._topic import NonPersistentTopic
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._selector import SubType
from velamq.broker.topic._producer import ServerProducer
from velamq.broker.topic._publish import Published
from velamq.metadata import Policies
from velamq.protocol import encode_payload_command, pb
from velamq.storage import Position

NAME = "non-persistent://public/default/np"


class Receipts(Published):
    """Records the position each publish was answered with."""

    def __init__(self, answered: list[Position]) -> None:
        super().__init__()
        self.answered = answered

    def durable(self, position: Position) -> None:
        self.answered.append(position)


def make_topic(clock: ManualClock | None = None) -> NonPersistentTopic:
    return NonPersistentTopic(TopicName.parse(NAME), clock or ManualClock())


def publish(topic: NonPersistentTopic, payloads: list[bytes], key: str | None = None) -> list[Position]:
    producer = topic.producers.get("p")
    if producer is None:
        producer = ServerProducer(RecordingChannel(), 1, "p", topic, 0, pb.Shared)
        topic.add_producer(producer)
    answered: list[Position] = []
    for i, payload in enumerate(payloads):
        data = entry(payload, publish_time=1, sequence_id=i, key=key)
        topic.publish_with(producer, data, 1, i, i, True, Receipts(answered))
    return answered


def attach(
    subscription: NonPersistentSubscription, consumer_id: int, permits: int, name: str | None = None
) -> tuple[ServerConsumer, RecordingChannel]:
    channel = RecordingChannel()
    consumer = ServerConsumer(channel, consumer_id, name or f"c{consumer_id}", 0, -1)
    subscription.add_consumer(consumer)
    subscription.flow(consumer, permits)
    return consumer, channel


async def subscription(topic: NonPersistentTopic, sub_type: SubType, durable: bool = True) -> NonPersistentSubscription:
    return await topic.subscription("sub", sub_type, durable, True, None)


def test_an_entry_goes_to_a_consumer_with_a_permit_and_is_answered_at_once() -> None:
    async def body() -> None:
        topic = make_topic()
        shared = await subscription(topic, SubType.SHARED)
        _, first = attach(shared, 1, permits=1)
        _, second = attach(shared, 2, permits=0)
        answered = publish(topic, [b"a", b"b", b"c"])
        assert answered == [Position(0, 0)] * 3  # Pulsar's receipts for non-persistent topics
        assert first.payloads() == [b"a"]
        assert second.payloads() == []
        assert [p for p, _, _ in first.messages()] == [Position(0, 0)]
        assert shared.drops.messages_total == 2  # no permit left anywhere: dropped, not kept
        assert shared.out.messages_total == 1
        assert topic.has_entries and topic.rate_in.messages_total == 3

    asyncio.run(body())


def test_a_consumer_whose_connection_is_full_gets_nothing_and_nothing_waits_for_it() -> None:
    async def body() -> None:
        topic = make_topic()
        exclusive = await subscription(topic, SubType.EXCLUSIVE)
        _, channel = attach(exclusive, 1, permits=100)
        channel.writable = False
        publish(topic, [b"a", b"b"])
        channel.writable = True
        publish(topic, [b"c"])
        assert channel.payloads() == [b"c"]
        assert exclusive.drops.messages_total == 2

    asyncio.run(body())


def test_failover_sends_to_the_active_consumer_only() -> None:
    async def body() -> None:
        topic = make_topic()
        failover = await subscription(topic, SubType.FAILOVER)
        _, active = attach(failover, 1, permits=10, name="a")
        _, standby = attach(failover, 2, permits=10, name="b")
        publish(topic, [b"x", b"y"])
        assert (active.payloads(), standby.payloads()) == ([b"x", b"y"], [])

    asyncio.run(body())


def test_key_shared_sends_each_key_to_one_consumer() -> None:
    async def body() -> None:
        topic = make_topic()
        key_shared = await subscription(topic, SubType.KEY_SHARED)
        channels = [attach(key_shared, i, permits=1000)[1] for i in (1, 2)]
        for round_ in range(3):
            for k in range(20):
                publish(topic, [f"{k}/{round_}".encode()], key=f"key-{k}")
        owners: dict[str, set[int]] = {}
        for index, channel in enumerate(channels):
            for payload in channel.payloads():
                owners.setdefault(payload.decode().split("/")[0], set()).add(index)
        assert len(owners) == 20 and all(len(o) == 1 for o in owners.values())
        assert {next(iter(o)) for o in owners.values()} == {0, 1}

    asyncio.run(body())


def test_acks_seeks_and_redeliveries_change_nothing() -> None:
    async def body() -> None:
        topic = make_topic()
        shared = await subscription(topic, SubType.SHARED)
        consumer, channel = attach(shared, 1, permits=10)
        publish(topic, [b"a"])
        shared.acknowledge([(Position(0, 0), None)])
        shared.acknowledge_cumulative(Position(0, 0), None)
        shared.redeliver(consumer, None)
        shared.seek(await shared.seek_target((0, 0), None))
        assert channel.payloads() == [b"a"]  # nothing sent again
        assert (shared.backlog, shared.unacked_messages, consumer.unacked_messages) == (0, 0, 0)
        with pytest.raises(BrokerRequestError):
            await shared.last_message_id()

    asyncio.run(body())


def test_a_readers_subscription_goes_with_its_consumer_a_durable_one_stays() -> None:
    async def body() -> None:
        topic = make_topic()
        reader = await topic.subscription("reader", SubType.EXCLUSIVE, False, False, None)
        durable = await topic.subscription("durable", SubType.EXCLUSIVE, True, False, None)
        reading, _ = attach(reader, 1, permits=1)
        holding, _ = attach(durable, 2, permits=1)
        reader.remove_consumer(reading)
        durable.remove_consumer(holding)
        assert list(topic.subscriptions) == ["durable"]
        publish(topic, [b"while-nobody-listens"])
        assert durable.drops.messages_total == 1

    asyncio.run(body())


def _table(clock: ManualClock, enabled: bool = True) -> tuple[NonPersistentTopics, list[str]]:
    opened: list[str] = []

    async def open_row(name: TopicName, create: bool) -> None:
        opened.append(str(name))

    async def policies_for(name: TopicName) -> Policies:
        return Policies()

    return NonPersistentTopics(clock, open_row, policies_for, set(), enabled=enabled, idle_s=60), opened


def test_an_idle_topic_is_dropped_after_idle_s_and_a_used_one_stays() -> None:
    async def body() -> None:
        clock = ManualClock()
        table, opened = _table(clock)
        idle = await table.get_topic(TopicName.parse(NAME), create=True)
        busy = await table.get_topic(TopicName.parse(NAME + "-busy"), create=True)
        attach(await subscription(busy, SubType.SHARED), 1, permits=1)
        assert opened == [NAME, NAME + "-busy"]
        clock.advance(59)
        table.tick()
        assert set(table.topics) == {NAME, NAME + "-busy"}
        clock.advance(1)
        table.tick()
        assert set(table.topics) == {NAME + "-busy"} and idle.closed
        assert table.dropped_idle_total == 1

    asyncio.run(body())


def test_disabled_non_persistent_topics_are_refused() -> None:
    async def body() -> None:
        table, opened = _table(ManualClock(), enabled=False)
        with pytest.raises(BrokerRequestError) as refused:
            await table.get_topic(TopicName.parse(NAME), create=True)
        assert refused.value.code == pb.NotAllowedError and opened == []

    asyncio.run(body())


def test_the_broker_opens_a_non_persistent_topic_without_a_ledger(tmp_path: Path) -> None:
    async def body() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            topic = await service.open_topic(TopicName.parse(NAME), create=True)
            assert isinstance(topic, NonPersistentTopic)
            assert service.find_topic(NAME) is topic and service.loaded_topic(NAME) is None
            assert await service.metadata.topic_exists(NAME)  # listed, looked up, deleted as any topic
            publish(topic, [b"a", b"b"])
            assert not await service.storage.ledger_exists(NAME)
            namespaces = {n.namespace: n for n in (await service.scrape_metrics()).namespaces}
            assert (namespaces["public/default"].topics, namespaces["public/default"].msg_in_total) == (1, 2)

    asyncio.run(body())


def test_a_read_only_broker_still_serves_non_persistent_producers(tmp_path: Path) -> None:
    # A full disk stops what writes (persistent producers, docs/operations.md), not a topic that
    # writes nothing: its producer is admitted, sends, and is not closed.
    async def body() -> None:
        clock = ManualClock()
        used = [0.5]

        def disk(path: Path) -> DiskUsage:
            total = 100_000 * (1 << 20)
            return DiskUsage(total, int(total * (1 - used[0])))

        async with broker(tmp_path, clock, disk) as service:
            used[0] = 0.99
            await service.disk_guard.check_now()
            assert service.disk_guard.read_only
            connection, transport = connect(service)
            connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            connection.data_received(command(T.PRODUCER, "producer", topic=NAME, producer_id=1, request_id=1))
            await until_reply(transport, T.PRODUCER_SUCCESS)
            send = pb.BaseCommand(type=T.SEND)
            send.send.producer_id, send.send.sequence_id = 1, 0
            connection.data_received(encode_payload_command(send, entry(b"m", publish_time=clock.now_ms())))
            (receipt,) = await until_reply(transport, T.SEND_RECEIPT)
            assert (receipt.send_receipt.message_id.ledgerId, receipt.send_receipt.message_id.entryId) == (0, 0)
            assert transport.of_type(T.CLOSE_PRODUCER) == []
            connection.data_received(command(T.PRODUCER, "producer", topic="persistent://public/default/p",
                                             producer_id=2, request_id=2))
            (refused,) = await until_reply(transport, T.ERROR)  # a persistent topic's producer is refused
            assert refused.error.error == pb.ProducerBlockedQuotaExceededException

    asyncio.run(body())
