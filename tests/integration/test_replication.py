"""Geo-replication between real brokers, each its own cluster (RP-1..RP-9).

Every test waits for a condition (the replicators connected with no backlog), then counts: after
that nothing more can arrive, so exact counts prove there is no loop, no duplicate and no gap.
"""

from __future__ import annotations

import uuid
from typing import Any

import pulsar
from replication_helpers import Cluster, clusters, link, messages_in, wait_quiet
from wait_helpers import wait_until

from velamq.client import AdminClient
from velamq.testing import free_port


def _topic(name: str) -> str:
    return f"persistent://public/geo/{name}-{uuid.uuid4().hex[:8]}"


def produce(client: Any, topic: str, payloads: list[bytes], *, batching: bool = False,
            **send_options: Any) -> None:
    """Send every payload and wait for every receipt (batched sends go out asynchronously)."""
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=20)
    errors: list[Any] = []
    for payload in payloads:
        if batching:
            producer.send_async(payload, lambda res, _id: errors.append(res) if res != pulsar.Result.Ok else None,
                                **send_options)
        else:
            producer.send(payload, **send_options)
    producer.flush()
    producer.close()
    assert errors == []


def read_all(client: Any, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(10_000).data())
    reader.close()
    return got


def _payloads(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def test_two_clusters_replicate_both_ways_with_no_loop(make_client: Any) -> None:
    with clusters("east", "west") as (east, west):
        link(east, west)
        topic = _topic("both-ways")
        from_east, from_west = _payloads("east", 120), _payloads("west", 80)
        produce(make_client(east.broker.service_url), topic, from_east, batching=True)
        produce(make_client(west.broker.service_url), topic, from_west)
        wait_quiet([east, west], topic)
        for cluster in (east, west):
            got = read_all(make_client(cluster.broker.service_url), topic)
            assert len(got) == 200  # no loop: nothing came back a second time
            assert [m for m in got if m.startswith(b"east")] == from_east  # per-topic order kept
            assert [m for m in got if m.startswith(b"west")] == from_west
        out = east.replication(topic)["west"]
        assert out["connected"] is True and out["replicationBacklog"] == 0
        assert out["msgOutCount"] == 120 and out["producerName"] == "pulsar.repl.east-->west"
        assert west.replication(topic)["east"]["msgOutCount"] == 80
        assert "pulsar.repl.west" not in east.stats(topic)["subscriptions"]  # a cursor, not a subscription
        assert "pulsar.repl.west" in east.admin.request("GET", AdminClient.topic_path(topic, "internalStats"))[
            "cursors"]
        console = east.admin.request("GET", "/console/namespaces/public/geo")
        assert "data-replication-clusters='east, west'" in console and "data-remote='west'" in console
        page = east.admin.request("GET", "/console/topics/persistent/public/geo/" + topic.rsplit("/", 1)[1])
        assert "Replication (1)" in page and "data-stat='replicationBacklog' data-value='0'" in page
        metrics = east.admin.request("GET", "/metrics")
        assert 'pulsar_replication_backlog{cluster="east"' in metrics
        assert 'remote_cluster="west"' in metrics


def test_replicate_to_and_disable_replication_are_honoured(make_client: Any) -> None:
    with clusters("east", "west") as (east, west):
        link(east, west)
        topic = _topic("routing")
        client = make_client(east.broker.service_url)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"local-only", disable_replication=True)
        producer.send(b"east-only", replication_clusters=["east"])
        producer.send(b"to-west", replication_clusters=["west"])
        producer.send(b"everywhere")
        producer.close()
        wait_quiet([east, west], topic)
        assert read_all(make_client(west.broker.service_url), topic) == [b"to-west", b"everywhere"]
        assert read_all(client, topic) == [b"local-only", b"east-only", b"to-west", b"everywhere"]


def test_three_clusters_full_mesh_exact_counts(make_client: Any) -> None:
    with clusters("a", "b", "c") as members:
        link(*members)
        topic = _topic("mesh")
        sent: dict[str, list[bytes]] = {}
        for cluster in members:
            sent[cluster.name] = _payloads(cluster.name, 40)
            produce(make_client(cluster.broker.service_url), topic, sent[cluster.name], batching=True)
        wait_quiet(members, topic)
        for cluster in members:
            got = read_all(make_client(cluster.broker.service_url), topic)
            assert len(got) == 120
            for origin, payloads in sent.items():
                assert [m for m in got if m.startswith(origin.encode() + b"-")] == payloads


def test_chunks_are_forwarded_as_chunks(make_client: Any) -> None:
    with clusters("east", "west", extra_args=["--max-message-size", "65536"]) as (east, west):
        link(east, west)
        topic = _topic("chunks")
        big = [bytes([i]) * 150_000 for i in range(3)]  # three chunks each
        producer = make_client(east.broker.service_url).create_producer(
            topic, batching_enabled=False, chunking_enabled=True)
        for payload in big:
            producer.send(payload)
        producer.close()
        wait_quiet([east, west], topic)
        assert messages_in(west, topic) == 9  # the chunks, stored as they were sent
        assert read_all(make_client(west.broker.service_url), topic) == big


def _kill_remote_while_replicating(east: Cluster, west: Cluster, make_client: Any, topic: str,
                                   payloads: list[bytes]) -> None:
    half = len(payloads) // 2
    produce(make_client(east.broker.service_url), topic, payloads[:half], batching=True)
    wait_until(lambda: messages_in(west, topic) > 0, what="the first messages on west")
    west.broker.kill()  # receipts in flight are lost; the replicator sends again after the restart
    # Local producers are never blocked by a remote that is down: the backlog grows instead.
    produce(make_client(east.broker.service_url), topic, payloads[half:], batching=True)
    wait_until(lambda: east.replication(topic)["west"]["connected"] is False, what="west seen down")
    assert east.replication(topic)["west"]["replicationBacklog"] > 0
    west.broker.start()


def test_remote_killed_and_restarted_no_duplicate_no_gap(make_client: Any) -> None:
    with clusters("east", "west") as (east, west):
        link(east, west)
        topic = _topic("remote-restart")
        payloads = _payloads("m", 600)
        _kill_remote_while_replicating(east, west, make_client, topic, payloads)
        wait_quiet([east, west], topic)
        assert read_all(make_client(west.broker.service_url), topic) == payloads


def test_source_restarted_resumes_from_its_cursor(make_client: Any) -> None:
    with clusters("east", "west") as (east, west):
        link(east, west)
        topic = _topic("source-restart")
        payloads = _payloads("m", 300)
        west.broker.stop()
        produce(make_client(east.broker.service_url), topic, payloads, batching=True)
        east.broker.kill()  # the replicator dies with everything still to send
        west.broker.start()
        east.broker.start()  # the replicated namespace's topics load, their replicators resume
        wait_quiet([east, west], topic)
        assert read_all(make_client(west.broker.service_url), topic) == payloads


def test_removing_a_cluster_stops_replication_to_it(make_client: Any) -> None:
    with clusters("east", "west") as (east, west):
        link(east, west)
        topic = _topic("remove")
        produce(make_client(east.broker.service_url), topic, [b"before"])
        wait_quiet([east, west], topic)
        east.admin.request("POST", "/admin/v2/namespaces/public/geo/replication", ["east"])
        wait_until(lambda: east.replication(topic) == {}, what="the replicator to west stopped")
        assert east.admin.request("GET", "/admin/v2/namespaces/public/geo/replication") == ["east"]
        produce(make_client(east.broker.service_url), topic, [b"after"])
        assert "pulsar.repl.west" not in east.admin.request("GET", AdminClient.topic_path(topic, "internalStats"))[
            "cursors"]
        assert read_all(make_client(west.broker.service_url), topic) == [b"before"]


def test_a_corrected_cluster_url_and_an_unload_keep_replication_going(make_client: Any) -> None:
    with clusters("east", "west") as (east, west):
        link(east, west)
        wrong = {"serviceUrl": west.broker.admin_url, "brokerServiceUrl": f"pulsar://127.0.0.1:{free_port()}"}
        east.admin.request("POST", "/admin/v2/clusters/west", wrong)
        topic = _topic("corrected")
        produce(make_client(east.broker.service_url), topic, [b"one", b"two"])
        wait_until(lambda: east.replication(topic).get("west", {}).get("replicationBacklog") == 2,
                   what="a backlog toward the unreachable west")
        assert east.replication(topic)["west"]["connected"] is False
        east.admin.request("POST", "/admin/v2/clusters/west",
                           {**wrong, "brokerServiceUrl": west.broker.service_url})
        wait_quiet([east, west], topic)
        east.admin.request("PUT", AdminClient.topic_path(topic, "unload"))
        produce(make_client(east.broker.service_url), topic, [b"three"])
        wait_quiet([east, west], topic)
        assert read_all(make_client(west.broker.service_url), topic) == [b"one", b"two", b"three"]


def test_a_partitioned_topic_replicates_partition_by_partition(make_client: Any) -> None:
    with clusters("east", "west") as (east, west):
        link(east, west)
        topic = _topic("partitioned")
        for cluster in (east, west):
            cluster.admin.request("PUT", AdminClient.topic_path(topic, "partitions"), 3)
        payloads = _payloads("p", 60)
        producer = make_client(east.broker.service_url).create_producer(
            topic, batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
        for payload in payloads:
            producer.send(payload)
        producer.close()
        partitions = [f"{topic}-partition-{i}" for i in range(3)]
        for partition in partitions:
            wait_quiet([east, west], partition)
        got = [m for p in partitions for m in read_all(make_client(west.broker.service_url), p)]
        assert sorted(got) == payloads


def test_the_replication_backlog_counts_against_the_backlog_quota(make_client: Any) -> None:
    """A remote that is down holds the replicator's cursor: the backlog quota sees it as it sees a
    slow subscription (RP-6), and lets producers in again once the remote has caught up."""
    with clusters("east", "west") as (east, west):
        link(east, west)
        east.admin.request("POST", AdminClient.namespace_path("public/geo", "backlogQuota"),
                           {"limitSize": 2000, "limitTime": -1, "policy": "producer_exception"})
        topic = _topic("quota")
        producer = make_client(east.broker.service_url).create_producer(
            topic, batching_enabled=False, send_timeout_millis=5000)
        producer.send(b"first")
        wait_quiet([east, west], topic)
        west.broker.stop()
        sent, failed = 0, False
        while not failed and sent < 100:
            try:
                producer.send(b"x" * 200)
                sent += 1
            except pulsar.PulsarException:
                failed = True
        assert failed and sent <= 2000 // 200 + 1  # refused within about one entry of the quota
        west.broker.start()
        wait_quiet([east, west], topic)

        def sends() -> bool:
            try:
                producer.send(b"again")
                return True
            except pulsar.PulsarException:
                return False

        wait_until(sends, what="the producer let in again once west caught up")
