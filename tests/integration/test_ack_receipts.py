"""Ack receipts (Tencent's 600 k topics, CO-2): with ack_receipt_enabled, velamq's consumer returns from
acknowledge only once the broker applied the ack, and raises when it cannot confirm it (the
broker is gone, or refuses); an unconfirmed ack is kept and applied after the reconnect."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from interop_helpers import http
from wait_helpers import until

from velamq.client import AsyncClient, ConnectError, OperationTimeoutError
from velamq.testing import BrokerProcess, run_broker

pytestmark = pytest.mark.timeout(120)
TOPIC = "persistent://public/default/receipts"


def backlog(broker: BrokerProcess) -> int:
    status, body = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/receipts/stats")
    assert status == 200, body
    return int(json.loads(body)["subscriptions"]["sub"]["msgBacklog"])


def test_acknowledge_waits_for_the_receipt_and_raises_when_it_cannot_get_one(tmp_path: Path) -> None:
    with run_broker(tmp_path / "data") as broker:

        async def main() -> None:
            async with AsyncClient(broker.service_url, operation_timeout_s=3, initial_backoff_s=0.05,
                                   max_backoff_s=0.3) as client:
                consumer = await client.subscribe(TOPIC, "sub", subscription_type="shared",
                                                  initial_position="earliest", ack_receipt_enabled=True,
                                                  ack_grouping_time_ms=60_000)
                producer = await client.create_producer(TOPIC)
                for i in range(3):
                    await producer.send(b"m%d" % i)
                first, second, third = [await consumer.receive(timeout_ms=10_000) for _ in range(3)]
                await consumer.acknowledge(first)
                # Confirmed means applied: the broker's stats say so at once, although grouping
                # would otherwise hold the ack for a minute.
                assert backlog(broker) == 2
                # Forced failure: the broker is gone; the ack cannot be confirmed and says so.
                broker.kill()
                with pytest.raises((ConnectError, OperationTimeoutError)):
                    await consumer.acknowledge(second)
                broker.start()
                # The unconfirmed ack was kept: it is applied after the consumer is back.
                await until(lambda: backlog(broker) == 1, "the kept ack applied after the reconnect")
                await consumer.acknowledge(third)  # sent again (redelivered), or already in hand
                assert backlog(broker) == 0

        asyncio.run(main())

