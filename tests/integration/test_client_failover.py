"""velamq's own client fails over between clusters (RP-11): an AutoClusterFailover given as the
service URL moves producers, consumers and readers of the AsyncClient and of the blocking Client
to the secondary when the primary's port stops answering, and back when it answers again; each
cluster with its own credentials. Real brokers, killed with SIGKILL; the failover's delays run on
a ManualClock, so the test says exactly which check switches."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from replication_helpers import clusters, link, wait_quiet
from security_helpers import grant, secure_setup, secured_broker, tls_port
from wait_helpers import until, wait_until

from velamq._clock import ManualClock
from velamq.client import (
    AdminClient,
    AsyncClient,
    AuthenticationToken,
    AutoClusterFailover,
    Client,
    ControlledClusterFailover,
    InvalidConfigurationError,
    ServiceInfo,
)
from velamq.testing import BrokerProcess


def _backlog(broker: BrokerProcess, topic: str, subscription: str) -> int | None:
    """The subscription's backlog; None while it does not exist."""
    stats = AdminClient(broker.admin_url).request("GET", AdminClient.topic_path(topic, "stats"))
    subscription_stats = stats["subscriptions"].get(subscription)
    return None if subscription_stats is None else int(subscription_stats["msgBacklog"])


async def _receive(consumer: Any, n: int) -> list[bytes]:
    got = []
    for _ in range(n):
        message = await consumer.receive(timeout_ms=30_000)
        await consumer.acknowledge(message)
        got.append(message.data())
    return got


async def _read(reader: Any, n: int) -> list[bytes]:
    return [(await reader.read_next(timeout_ms=30_000)).data() for _ in range(n)]


class _Checks:
    """Drives the failover's checks one by one on its ManualClock."""

    def __init__(self, failover: AutoClusterFailover, clock: ManualClock) -> None:
        self.failover = failover
        self.clock = clock

    async def run(self, seconds: float) -> None:
        done = self.failover.checks
        await until(lambda: self.clock.sleepers == 1, "the failover waiting for its next check")
        self.clock.advance(seconds)
        await until(lambda: self.failover.checks == done + 1, "the failover's next check")


def test_async_client_fails_over_after_the_delay_and_switches_back() -> None:
    with clusters("east", "west") as (east, west):  # not linked: each cluster keeps its own messages
        topic = f"persistent://public/default/failover-{uuid.uuid4().hex[:8]}"
        a, b, c = ([f"{x}-{i}".encode() for i in range(10)] for x in "abc")
        clock = ManualClock()
        failover = AutoClusterFailover(ServiceInfo(east.broker.service_url), [ServiceInfo(west.broker.service_url)],
                                       check_interval_ms=1000, failover_delay_ms=3000, switch_back_threshold=2,
                                       clock=clock)
        checks = _Checks(failover, clock)

        async def main() -> None:
            async with AsyncClient(failover, initial_backoff_s=0.05, max_backoff_s=0.5) as client:
                assert client.get_service_info().service_url == east.broker.service_url
                producer = await client.create_producer(topic)
                consumer = await client.subscribe(topic, "sub", initial_position="earliest",
                                                  ack_receipt_enabled=True)
                reader = await client.create_reader(topic, "earliest")
                for payload in a:
                    await producer.send(payload)
                assert await _receive(consumer, 10) == a
                assert await _read(reader, 10) == a
                await checks.run(1)  # east answers: nothing changes
                east.broker.kill()
                pending = [asyncio.ensure_future(producer.send(p)) for p in b]  # no receipt while east is down
                for _ in range(3):  # failed at t=2, 3, 4 s: 2 s of failure, under the 3 s delay
                    await checks.run(1)
                    assert client.get_service_info().service_url == east.broker.service_url
                assert not any(f.done() for f in pending)
                await checks.run(1)  # 3 s of failure: to west
                assert client.get_service_info().service_url == west.broker.service_url
                await asyncio.wait_for(asyncio.gather(*pending), 60)  # resent to west
                assert await _receive(consumer, 10) == b  # west's new subscription, from the earliest
                assert await _read(reader, 10) == b  # the reader starts again from its start there
                await until(lambda: _backlog(west.broker, topic, "sub") == 0, "acks applied on west")
                east.broker.start()
                await checks.run(1)  # east answers once: one of the two good probes needed
                assert client.get_service_info().service_url == west.broker.service_url
                await checks.run(1)
                assert client.get_service_info().service_url == east.broker.service_url
                for payload in c:
                    await producer.send(payload)
                got = await _receive(consumer, 10)
                while not set(c) <= set(got):  # east may redeliver some of a (acks not yet on disk at the kill)
                    got += await _receive(consumer, 1)
                assert set(got) <= set(a) | set(c)
                assert [m for m in got if m in c] == c
                assert await _read(reader, 20) == a + c  # east's log: b was never there

        asyncio.run(main())


def test_blocking_client_fails_over_under_load_and_back() -> None:
    with clusters("east", "west") as (east, west):
        topic = f"persistent://public/default/blocking-{uuid.uuid4().hex[:8]}"
        failover = AutoClusterFailover(ServiceInfo(east.broker.service_url), [ServiceInfo(west.broker.service_url)],
                                       check_interval_ms=100, failover_threshold=2, switch_back_threshold=2)
        with Client(failover, initial_backoff_s=0.05, max_backoff_s=0.5) as client:
            producer = client.create_producer(topic, send_timeout_ms=60_000)
            consumer = client.subscribe(topic, "sub", initial_position="earliest")
            futures = [producer.send_async(f"east-{i}".encode()) for i in range(200)]
            east.broker.kill()  # some of the 200 may not be on east's disk yet: resent to west
            wait_until(lambda: client.get_service_info().service_url == west.broker.service_url,
                       what="the client on west")
            assert len([f.result(60) for f in futures]) == 200  # every one got a receipt, from east or west
            for i in range(50):
                producer.send(f"west-{i}".encode())
            got = set()
            while not {f"west-{i}".encode() for i in range(50)} <= got:
                message = consumer.receive(timeout_ms=30_000)
                consumer.acknowledge(message)
                got.add(message.data())
            east.broker.start()
            wait_until(lambda: client.get_service_info().service_url == east.broker.service_url,
                       what="the client back on east")
            producer.send(b"back-on-east")
            while (message := consumer.receive(timeout_ms=30_000)).data() != b"back-on-east":
                consumer.acknowledge(message)  # east's own earlier messages, not yet acknowledged there
        with Client(east.broker.service_url) as plain:
            reader = plain.create_reader(topic, "earliest")
            on_east = []
            while reader.has_message_available():
                on_east.append(reader.read_next(timeout_ms=30_000).data())
            assert on_east[-1] == b"back-on-east"
            assert not any(m.startswith(b"west-") for m in on_east)


def test_each_cluster_with_its_own_credentials(tmp_path: Path) -> None:
    setup = secure_setup(tmp_path / "west", clusterName="west")
    with secured_broker(setup) as west, clusters("east") as (east,):
        grant(west, "public/default", "app", ["produce", "consume"])
        secure = ServiceInfo(f"pulsar+ssl://localhost:{tls_port(west)}", authentication=AuthenticationToken(
            setup.token("app")), tls_trust_certs_file_path=str(setup.pki.ca_cert))
        failover = AutoClusterFailover(ServiceInfo(east.broker.service_url), [secure], check_interval_ms=100)
        topic = f"persistent://public/default/secure-{uuid.uuid4().hex[:8]}"
        with Client(failover) as client:
            producer = client.create_producer(topic)
            producer.send(b"on-east")
            east.broker.kill()
            wait_until(lambda: client.get_service_info() is secure, what="the client on the secured west")
            producer.send(b"on-west")  # over TLS, with the token: app may produce there
            reader = client.create_reader(topic, "earliest")
            assert reader.read_next(timeout_ms=30_000).data() == b"on-west"


def test_failover_settings_are_checked() -> None:
    primary, secondary = ServiceInfo("pulsar://a:6650"), ServiceInfo("pulsar://b:6650")
    with pytest.raises(InvalidConfigurationError, match="secondary"):
        AutoClusterFailover(primary, [])
    with pytest.raises(InvalidConfigurationError, match="> 0"):
        AutoClusterFailover(primary, [secondary], failover_threshold=0)
    with pytest.raises(InvalidConfigurationError, match="service URL"):
        ServiceInfo("kafka://a:9092")

    async def with_client_credentials() -> None:
        AsyncClient(AutoClusterFailover(primary, [secondary]), authentication=AuthenticationToken("t"))

    with pytest.raises(InvalidConfigurationError, match="per cluster"):
        asyncio.run(with_client_credentials())
    with pytest.raises(InvalidConfigurationError, match="running event loop"):
        AsyncClient(AutoClusterFailover(primary, [secondary]))


def _entries(broker: BrokerProcess, topic: str) -> int:
    stats = AdminClient(broker.admin_url).request("GET", AdminClient.topic_path(topic, "internalStats"))
    return int(stats["numberOfEntries"])


def test_a_replicated_subscription_resumes_on_the_secondary_after_kill_9() -> None:
    """The whole story with velamq's client: two linked clusters, a consumer with a replicated
    subscription on the primary, the primary killed: the same consumer object goes on at the
    secondary near where it was, losing nothing."""
    with clusters("east", "west") as (east, west):
        link(east, west)
        topic = f"persistent://public/geo/resume-{uuid.uuid4().hex[:8]}"
        first = [f"a-{i:03d}".encode() for i in range(50)]
        second = [f"b-{i:03d}".encode() for i in range(50)]
        failover = AutoClusterFailover(ServiceInfo(east.broker.service_url), [ServiceInfo(west.broker.service_url)],
                                       check_interval_ms=100, switch_back_threshold=1_000_000)

        async def main() -> None:
            async with AsyncClient(failover, initial_backoff_s=0.05, max_backoff_s=0.5) as client:
                producer = await client.create_producer(topic)
                for payload in first:
                    await producer.send(payload)
                consumer = await client.subscribe(topic, "sub", initial_position="earliest", ack_receipt_enabled=True,
                                                  replicate_subscription_state_enabled=True)
                await until(lambda: _entries(east.broker, topic) == 53, "a snapshot after the first half")
                for payload in second:
                    await producer.send(payload)
                assert sorted(await _receive(consumer, 50)) == first
                wait_quiet([east, west], topic)
                await until(lambda: _backlog(west.broker, topic, "sub") in range(61), "west's sub moved near east's")
                east.broker.kill()
                await until(lambda: client.get_service_info().service_url == west.broker.service_url, "on west")
                got: list[bytes] = []
                while not set(second) <= set(got):
                    got += await _receive(consumer, 1)
                assert len(got) <= len(second) + 5  # near the mirrored position: at most a few again
                await producer.send(b"on-west")
                assert await _receive(consumer, 1) == [b"on-west"]

        asyncio.run(main())


class _Endpoint:
    """An operator's failover endpoint: a real HTTP server answering what the test sets."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b"{}"
        self.headers_seen: list[dict[str, str]] = []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                endpoint.headers_seen.append(dict(self.headers))
                self.send_response(endpoint.status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(endpoint.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/pulsar-cluster"

    def answer(self, status: int, body: object) -> None:
        self.status, self.body = status, json.dumps(body).encode()


def test_controlled_failover_follows_the_operators_endpoint() -> None:
    with clusters("east", "west") as (east, west):
        topic = f"persistent://public/default/controlled-{uuid.uuid4().hex[:8]}"
        endpoint = _Endpoint()
        clock = ManualClock()
        failover = ControlledClusterFailover(east.broker.service_url, endpoint.url, check_interval_ms=30_000,
                                             url_provider_headers={"X-Ops-Key": "k1"}, clock=clock)

        async def check() -> None:
            done = failover.checks
            await until(lambda: clock.sleepers == 1, "the provider waiting for its next check")
            clock.advance(30)
            await until(lambda: failover.checks == done + 1, "the provider's next check")

        async def main() -> None:
            async with AsyncClient(failover, initial_backoff_s=0.05, max_backoff_s=0.5) as client:
                producer = await client.create_producer(topic)
                reader = await client.create_reader(topic, "earliest")
                await producer.send(b"on-east")
                endpoint.answer(200, {"serviceUrl": east.broker.service_url})
                await check()  # the endpoint names the cluster in use: nothing moves
                assert client.get_service_info().service_url == east.broker.service_url
                assert endpoint.headers_seen[-1]["X-Ops-Key"] == "k1"
                endpoint.answer(503, {"serviceUrl": west.broker.service_url})
                await check()  # an error status is not an instruction
                endpoint.status, endpoint.body = 200, b"not json"
                await check()
                assert client.get_service_info().service_url == east.broker.service_url
                endpoint.answer(200, {"serviceUrl": west.broker.service_url})
                await check()  # both brokers are up: the operator alone moves the client
                assert client.get_service_info().service_url == west.broker.service_url
                await producer.send(b"on-west")
                assert await _read(reader, 1) == [b"on-west"]  # the reader starts over on west

        try:
            asyncio.run(main())
        finally:
            endpoint.server.shutdown()
