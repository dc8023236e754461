"""velamq's client does not ask twice where a topic lives while one of its handles is attached there
(velamq/client/transport/_live_topics.py), against a real broker.

Counted with the client's own DiscoveryStats: PARTITIONED_METADATA and LOOKUP requests sent, and the
answers a live handle gave instead. Each test has its own client, so the counts start at 0.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from client_helpers import run_with_client as run
from wait_helpers import until

from velamq._bundles import NamespaceBundles
from velamq.client import AdminClient, AsyncClient, DiscoveryStats, TopicNotFoundError
from velamq.testing import BrokerProcess, run_broker

receive_timeout_ms = 15_000


def counts(client: AsyncClient) -> tuple[int, int, int, int]:
    """(PARTITIONED_METADATA sent, LOOKUP sent, partition counts remembered, lookups remembered)."""
    s: DiscoveryStats = client.discovery_stats()
    return s.partitioned_metadata, s.lookups, s.partitions_remembered, s.lookups_remembered


def test_a_producer_next_to_a_consumer_asks_nothing_and_works(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        consumer = await client.subscribe(topic, "sub", initial_position="earliest")
        assert counts(client) == (1, 1, 0, 0)
        producer = await client.create_producer(topic)
        assert counts(client) == (1, 1, 1, 1)  # the producer was made without a second PM or LOOKUP
        assert producer.partition_producers[0].connection is consumer.children[0].connection
        await producer.send(b"hello")
        message = await consumer.receive(receive_timeout_ms)
        assert message.value == b"hello"
        await consumer.acknowledge(message)
        reader = await client.create_reader(topic, "earliest")  # a reader is a handle too
        assert counts(client) == (1, 1, 2, 2)
        assert (await reader.read_next(receive_timeout_ms)).value == b"hello"
        await reader.close()
        await producer.close()
        await consumer.close()
        assert client.live_topics.topic_count == 0 and client.live_topics.handle_count == 0

    run(broker, body)


def test_after_the_last_handle_closes_a_new_producer_asks_again(broker: BrokerProcess, topic: str) -> None:
    async def body(client: AsyncClient) -> None:
        consumer = await client.subscribe(topic, "sub", initial_position="earliest")
        first = await client.create_producer(topic)
        await first.close()
        assert counts(client) == (1, 1, 1, 1)
        second = await client.create_producer(topic)  # the consumer is still attached
        assert counts(client) == (1, 1, 2, 2)
        await second.close()
        await consumer.close()
        third = await client.create_producer(topic)  # nothing of this topic is attached now
        assert counts(client) == (2, 2, 2, 2)
        await third.send(b"x")
        await third.close()
        # The memory holds live handles only: many topics made and closed leave nothing behind.
        for i in range(20):
            c = await client.subscribe(f"{topic}-{i}", "sub")
            p = await client.create_producer(f"{topic}-{i}")
            await p.close()
            await c.close()
        assert client.live_topics.topic_count == 0 and client.live_topics.handle_count == 0

    run(broker, body)


def test_handles_closed_by_an_unload_reconnect_through_a_lookup_and_work(broker: BrokerProcess, topic: str) -> None:
    admin = AdminClient(broker.admin_url)

    async def body(client: AsyncClient) -> None:
        consumer = await client.subscribe(topic, "sub", initial_position="earliest")
        producer = await client.create_producer(topic)
        await producer.send(b"before")
        before = counts(client)
        assert before == (1, 1, 1, 1)
        await asyncio.to_thread(admin.request, "PUT", AdminClient.topic_path(topic, "unload"))
        # The broker closed both; each reconnect asked the broker where the topic lives (a LOOKUP
        # each at least), none was answered by the other one's memory.
        await until(lambda: counts(client)[1] >= before[1] + 2 and producer.is_connected() and consumer.is_connected(),
                    lambda: f"both handles reconnected through a lookup: {counts(client)}")
        pm, _, partitions_remembered, lookups_remembered = counts(client)
        assert (pm, partitions_remembered, lookups_remembered) == (1, 1, 1)
        await producer.send(b"after")
        values = [(await consumer.receive(receive_timeout_ms)).value for _ in range(2)]
        assert values == [b"before", b"after"]
        await producer.close()
        await consumer.close()

    run(broker, body)


def test_after_the_broker_deletes_the_topic_the_next_create_asks_again(broker: BrokerProcess) -> None:
    """The broker closes the handles (a forced delete) and they cannot come back (no auto-creation in
    this namespace): a new producer asks the broker, which says the topic is gone."""
    admin = AdminClient(broker.admin_url)
    namespace = f"public/live-{uuid.uuid4().hex[:8]}"
    admin.request("PUT", AdminClient.namespace_path(namespace))
    admin.request("POST", AdminClient.namespace_path(namespace, "autoTopicCreation"),
                  {"allowAutoTopicCreation": False, "topicType": "non-partitioned"})
    topic = f"persistent://{namespace}/gone"
    admin.request("PUT", AdminClient.topic_path(topic))

    async def body(client: AsyncClient) -> None:
        consumer = await client.subscribe(topic, "sub")
        producer = await client.create_producer(topic)
        assert counts(client) == (1, 1, 1, 1)
        await asyncio.to_thread(admin.request, "DELETE", AdminClient.topic_path(topic), None, {"force": "true"})
        await until(lambda: client.live_topics.topic_count == 0, "the closed handles forgotten")
        with pytest.raises(TopicNotFoundError):
            await client.create_producer(topic)
        pm, _, partitions_remembered, lookups_remembered = counts(client)
        assert (pm, partitions_remembered, lookups_remembered) == (2, 1, 1)
        await producer.close()
        await consumer.close()

    run(broker, body)


def test_a_partitioned_topic_is_still_asked_and_works(broker: BrokerProcess, topic: str) -> None:
    AdminClient(broker.admin_url).request("PUT", AdminClient.topic_path(topic, "partitions"), 3)

    async def body(client: AsyncClient) -> None:
        consumer = await client.subscribe(topic, "sub", initial_position="earliest")
        assert counts(client) == (1, 3, 0, 0)
        producer = await client.create_producer(topic)
        # The partition count is asked again (the partitions' handles say nothing of their parent);
        # each partition's owner is known from the consumer's handle of that partition.
        assert counts(client) == (2, 3, 0, 3)
        assert len(producer.partition_producers) == 3
        for i in range(6):
            await producer.send(b"%d" % i, key=f"k{i}")
        values = sorted([(await consumer.receive(receive_timeout_ms)).value for _ in range(6)])
        assert values == [b"%d" % i for i in range(6)]
        # A partition's own name, with a live handle of it, is a topic of its own: not partitioned.
        assert await client.partitions_of(f"{topic}-partition-1") == 0
        assert counts(client) == (2, 3, 1, 3)
        await producer.close()
        await consumer.close()

    run(broker, body)


@pytest.mark.timeout(300)
def test_a_hand_over_to_another_worker_moves_the_memory_with_the_handles(topic: str) -> None:
    """A bundle unloaded to the other worker: the broker closes the handles naming the new owner
    (assignedBrokerServiceUrl), they go there, and a new producer next to them goes there too."""
    with run_broker(workers=2) as broker:
        admin = AdminClient(broker.admin_url)
        own = {int(line.split("velamq worker ", 1)[1].split(" ", 1)[0]): line.split("service_url=", 1)[1].split()[0]
               for line in broker.worker_lines()}
        name = f"persistent://public/default/{topic}"
        bundle = NamespaceBundles.even(4).bundle_of(name)

        async def main() -> None:
            async with AsyncClient(broker.service_url, operation_timeout_s=30) as client:
                consumer = await client.subscribe(name, "sub", initial_position="earliest")
                producer = await client.create_producer(name)
                await producer.send(b"before")
                first = consumer.children[0].connection
                assert first is not None and producer.partition_producers[0].connection is first
                old = next(k for k, url in own.items() if url == first.logical_url)
                await asyncio.to_thread(admin.request, "PUT",
                                        AdminClient.namespace_path("public/default", bundle.name, "unload"))

                def moved() -> bool:
                    handles = [consumer.children[0], producer.partition_producers[0]]
                    return all(h.is_connected and h.connection is not None
                               and h.connection.logical_url == own[1 - old] for h in handles)

                await until(moved, "both handles on the bundle's new owner")
                # Unnamed: the new owner makes its name ({cluster}-{worker}-{n}), which never repeats
                # the one the other worker gave the producer that moved with the bundle.
                second = await client.create_producer(name)
                assert second.producer_name != producer.producer_name
                assert second.partition_producers[0].connection is consumer.children[0].connection
                await producer.send(b"after")
                await second.send(b"second")
                values = [(await consumer.receive(receive_timeout_ms)).value for _ in range(3)]
                assert values == [b"before", b"after", b"second"]
                for handle in (second, producer, consumer):
                    await handle.close()
                assert client.live_topics.topic_count == 0

        asyncio.run(main())
