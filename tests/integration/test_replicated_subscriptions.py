"""Replicated subscriptions between two real brokers (RP-10): a consumer that acknowledged half of a
topic on east and moves to west resumes near where it was there, losing nothing; markers never
reach consumers or readers."""

from __future__ import annotations

import uuid
from typing import Any

import pulsar
from replication_helpers import clusters, link, wait_quiet
from wait_helpers import wait_until

from velamq.client import AdminClient


def _send(client: Any, topic: str, payloads: list[bytes]) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for payload in payloads:
        producer.send(payload)
    producer.close()


def _entries(admin: AdminClient, topic: str) -> int:
    return int(admin.request("GET", AdminClient.topic_path(topic, "internalStats"))["numberOfEntries"])


def test_a_consumer_resumes_on_the_other_cluster_near_its_position(make_client: Any) -> None:
    with clusters("east", "west") as (east, west):
        link(east, west)
        topic = f"persistent://public/geo/replsub-{uuid.uuid4().hex[:8]}"
        first = [f"m-{i:03d}".encode() for i in range(50)]
        second = [f"m-{i:03d}".encode() for i in range(50, 100)]
        east_client = make_client(east.broker.service_url)
        _send(east_client, topic, first)
        # The subscription is replicated from now on: the next snapshot comes after the first half,
        # as east's request, west's response (replicated back) and east's snapshot marker.
        consumer = east_client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                         initial_position=pulsar.InitialPosition.Earliest,
                                         replicate_subscription_state_enabled=True)
        wait_until(lambda: _entries(east.admin, topic) == 53, what="a snapshot after the first half")
        _send(east_client, topic, second)
        for _ in first:
            consumer.acknowledge(consumer.receive(10_000))
        wait_quiet([east, west], topic)
        # West's subscription follows east's: created, and moved up to the snapshot.
        wait_until(lambda: "sub" in west.stats(topic)["subscriptions"]
                   and west.stats(topic)["subscriptions"]["sub"]["msgBacklog"] <= 60,
                   what="west's sub moved near east's position")
        consumer.close()
        on_west = make_client(west.broker.service_url).subscribe(
            topic, "sub", consumer_type=pulsar.ConsumerType.Shared, replicate_subscription_state_enabled=True)
        got = []
        while len(set(got) & set(second)) < len(second):
            got.append(on_west.receive(10_000).data())
        assert set(second) <= set(got)  # nothing lost
        assert len(got) <= len(second) + 5  # and close to where east's consumer was
        assert all(m.startswith(b"m-") for m in got)  # no marker delivered
        reader = make_client(west.broker.service_url).create_reader(topic, pulsar.MessageId.earliest)
        read = []
        while reader.has_message_available():
            read.append(reader.read_next(10_000).data())
        assert read == first + second  # readers never see markers either


def test_three_clusters_carry_a_subscription_to_both_others(make_client: Any) -> None:
    """Full mesh of three (messages from two origins): east's snapshots take two request rounds
    (RP-10), and its consumer's position reaches west and north."""
    with clusters("east", "west", "north") as members:
        east, west, north = members
        link(*members)
        topic = f"persistent://public/geo/replsub3-{uuid.uuid4().hex[:8]}"
        from_east = [f"e-{i:03d}".encode() for i in range(25)]
        from_north = [f"n-{i:03d}".encode() for i in range(25)]
        second = [f"s-{i:03d}".encode() for i in range(50)]
        east_client = make_client(east.broker.service_url)
        _send(east_client, topic, from_east)
        _send(make_client(north.broker.service_url), topic, from_north)
        wait_quiet(members, topic)  # all 50 on each cluster before the subscription is replicated
        consumer = east_client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                         initial_position=pulsar.InitialPosition.Earliest,
                                         replicate_subscription_state_enabled=True)
        # One snapshot: a request, west's and north's responses, a second request and responses, the snapshot.
        wait_until(lambda: _entries(east.admin, topic) == 50 + 7, what="a two-round snapshot on east")
        _send(east_client, topic, second)
        first = set(from_east + from_north)
        for _ in first:
            message = consumer.receive(10_000)
            assert message.data() in first
            consumer.acknowledge(message)
        wait_quiet(members, topic)
        for other in (west, north):
            wait_until(lambda other=other: "sub" in other.stats(topic)["subscriptions"]
                       and other.stats(topic)["subscriptions"]["sub"]["msgBacklog"] <= 60,
                       what=f"{other.name}'s sub moved near east's position")
        consumer.close()
        for other in (west, north):
            moved = make_client(other.broker.service_url).subscribe(
                topic, "sub", consumer_type=pulsar.ConsumerType.Shared, replicate_subscription_state_enabled=True)
            got = []
            while not set(second) <= set(got):
                got.append(moved.receive(10_000).data())
            assert len(got) <= len(second) + 5  # resumed close to east's position, nothing lost
            assert all(m.startswith((b"e-", b"n-", b"s-")) for m in got)  # no marker delivered
            moved.close()
