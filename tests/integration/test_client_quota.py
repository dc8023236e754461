"""velamq's own client under backlog quotas (issue 13, BR-3), against a broker process: with
producer_request_hold its sends wait and go through once the backlog drains; with
producer_exception the pending sends fail with ProducerBlockedQuotaExceededError, the producer
stays usable and new sends succeed after the drain. The broker stops a producer within one entry
of the size limit and admits one as soon as the backlog is under it (no periodic check needed).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from interop_helpers import http
from wait_helpers import until

from velamq.client import AsyncClient, Consumer, ProducerBlockedQuotaExceededError
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(120)
LIMIT = 2000
PAYLOAD = b"x" * 200


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # A slow periodic check: what the tests see comes from the checks at publish and creation.
    config = tmp_path_factory.mktemp("conf") / "broker.conf"
    config.write_text("policyCheckIntervalSeconds=3600\n")
    with run_broker(extra_args=["--config", str(config)]) as broker:
        yield broker


def new_namespace(broker: BrokerProcess, policy: str) -> str:
    ns = f"public/q-{uuid.uuid4().hex[:8]}"
    assert http("PUT", f"{broker.admin_url}/admin/v2/namespaces/{ns}")[0] == 204
    quota = {"limitSize": LIMIT, "limitTime": -1, "policy": policy}
    status, body = http("POST", f"{broker.admin_url}/admin/v2/namespaces/{ns}/backlogQuota", json.dumps(quota))
    assert status in (200, 204), body
    return ns


def publishers(broker: BrokerProcess, topic: str) -> list[Any]:
    status, body = http("GET", f"{broker.admin_url}/admin/v2/persistent/{topic}/stats")
    assert status == 200, body
    return list(json.loads(body)["publishers"])


def backlog(broker: BrokerProcess, topic: str) -> int:
    status, body = http("GET", f"{broker.admin_url}/admin/v2/persistent/{topic}/stats")
    assert status == 200, body
    return int(json.loads(body)["subscriptions"]["sub"]["msgBacklog"])


async def drain(broker: BrokerProcess, topic: str, consumer: Consumer) -> int:
    """Receive and acknowledge what the broker stored (its stats say how much: a receive that times
    out is no proof of the end on a loaded machine), until the acks are applied; how many."""
    stored = backlog(broker, topic)
    for _ in range(stored):
        await consumer.acknowledge(await consumer.receive(timeout_ms=30_000))
    await until(lambda: backlog(broker, topic) == 0, "every acknowledgement applied")
    return stored


def client(broker: BrokerProcess) -> AsyncClient:
    return AsyncClient(broker.service_url, operation_timeout_s=10, initial_backoff_s=0.05, max_backoff_s=0.3)


def test_producer_exception_fails_pending_sends_then_recovers(quota_broker: BrokerProcess) -> None:
    topic = new_namespace(quota_broker, "producer_exception") + "/t"

    async def main() -> None:
        async with client(quota_broker) as c:
            consumer = await c.subscribe(f"persistent://{topic}", "sub", initial_position="earliest")
            producer = await c.create_producer(f"persistent://{topic}", batching_enabled=False,
                                               send_timeout_ms=10_000)
            sent = 0
            with pytest.raises(ProducerBlockedQuotaExceededError):
                while sent < 100:
                    await producer.send(PAYLOAD)
                    sent += 1
            # Stopped within one entry of the limit (entries are ~250 bytes with their metadata).
            assert LIMIT // 260 <= sent <= LIMIT // 200 + 1
            assert await drain(quota_broker, topic, consumer) == sent
            # The same producer works again: it reconnects once the backlog is under the limit.
            await producer.send(b"again")
            assert (await consumer.receive(timeout_ms=10_000)).data() == b"again"

    asyncio.run(main())


def test_producer_request_hold_sends_wait_until_the_backlog_drains(quota_broker: BrokerProcess) -> None:
    topic = new_namespace(quota_broker, "producer_request_hold") + "/t"

    async def main() -> None:
        async with client(quota_broker) as c:
            consumer = await c.subscribe(f"persistent://{topic}", "sub", initial_position="earliest")
            producer = await c.create_producer(f"persistent://{topic}", batching_enabled=False,
                                               send_timeout_ms=60_000)
            sent: list[asyncio.Future[Any]] = []
            while await _has_publishers(quota_broker, topic):  # until the broker stops it
                future = await producer.send_async(PAYLOAD)
                await until(lambda f=future: _done_or_blocked(quota_broker, topic, f))
                sent.append(future)
            # What the broker stored, from its own stats: the last send's receipt may still be on
            # its way, or that send may be held by the client to go again after the drain.
            stored = backlog(quota_broker, topic)
            assert LIMIT // 260 <= stored <= LIMIT // 200 + 1  # within one entry of the limit
            held = [await producer.send_async(b"held-%d" % i) for i in range(3)]
            assert not any(f.done() for f in held)  # nothing is admitted while nothing is acked
            received = []
            while len(received) < len(sent) + 3:
                message = await consumer.receive(timeout_ms=20_000)
                received.append(message.data())
                await consumer.acknowledge(message)
            assert received[:len(sent)] == [PAYLOAD] * len(sent)  # every send, in order
            assert received[len(sent):] == [b"held-0", b"held-1", b"held-2"]
            await asyncio.gather(*sent, *held)  # every held send went through, none failed

    asyncio.run(main())


async def _has_publishers(broker: BrokerProcess, topic: str) -> bool:
    return publishers(broker, topic) != []


async def _done_or_blocked(broker: BrokerProcess, topic: str, future: asyncio.Future[Any]) -> bool:
    return future.done() or publishers(broker, topic) == []


def test_a_producer_created_right_after_the_drain_is_admitted(quota_broker: BrokerProcess) -> None:
    topic = new_namespace(quota_broker, "producer_exception") + "/t"

    async def main() -> None:
        async with client(quota_broker) as c:
            consumer = await c.subscribe(f"persistent://{topic}", "sub", initial_position="earliest")
            producer = await c.create_producer(f"persistent://{topic}", batching_enabled=False)
            with pytest.raises(ProducerBlockedQuotaExceededError):
                for _ in range(100):
                    await producer.send(PAYLOAD)
            await producer.close()
            with pytest.raises(ProducerBlockedQuotaExceededError):
                await c.create_producer(f"persistent://{topic}")  # refused while over the limit
            await drain(quota_broker, topic, consumer)
            again = await c.create_producer(f"persistent://{topic}")  # no periodic check since
            await again.send(b"admitted")

    asyncio.run(main())


def test_round_robin_skips_a_partition_whose_producer_is_reconnecting(quota_broker: BrokerProcess) -> None:
    """PR-11: partition 1's backlog goes over the quota (producer_request_hold), so its producer
    is disconnected and keeps being refused while it reconnects; unkeyed messages go to the other
    partitions meanwhile and none waits. Keyed messages keep their partition."""
    ns = new_namespace(quota_broker, "producer_request_hold")
    topic = f"persistent://{ns}/parted"
    status, body = http("PUT", f"{quota_broker.admin_url}/admin/v2/persistent/{ns}/parted/partitions", "3")
    assert status in (200, 204), body

    async def main() -> None:
        async with client(quota_broker) as c:
            consumer = await c.subscribe(topic, "sub", initial_position="earliest", subscription_type="shared")
            producer = await c.create_producer(topic, batching_enabled=False, send_timeout_ms=60_000)
            key = next(k for k in (f"k{i}" for i in range(100)) if producer._chooser.choose(
                producer.build_message(b"", key=k), 3) == 1)
            blocked = producer.partition_producers[1]
            sent = []
            while blocked.is_connected:  # fill partition 1 until the broker stops its producer
                future = await producer.send_async(PAYLOAD, key=key)
                await until(lambda f=future: _settled(f, blocked))
                sent.append(future)
            assert not blocked.is_connected
            unkeyed = [await producer.send_async(b"free-%d" % i) for i in range(30)]
            ids = await asyncio.gather(*unkeyed)  # none waits for partition 1
            assert {mid.partition for mid in ids} == {0, 2}
            held = await producer.send_async(b"keyed", key=key)
            assert not held.done()  # a keyed message stays with its partition, and waits
            got = []
            # Every send arrives: the last one's receipt may still have been on its way when the
            # producer was stopped, or the client holds it to go again after the drain.
            while len(got) < 30 + len(sent) + 1:
                message = await consumer.receive(timeout_ms=20_000)
                got.append(message.data())
                await consumer.acknowledge(message)  # partition 1 drains: its producer comes back
            await asyncio.gather(*sent)
            assert (await held).partition == 1

    asyncio.run(main())


async def _settled(future: asyncio.Future[Any], producer: Any) -> bool:
    return future.done() or not producer.is_connected
