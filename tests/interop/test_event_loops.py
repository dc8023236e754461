"""The broker on either event loop (`velamq standalone --uvloop` or the default asyncio): the official
client's sends get their receipts in send order, the entries survive a kill -9 (a receipt means
durable), and everything is consumed back. Issue 12: uvloop is measured against asyncio in
benchmarks/produce_consume.py; here both only have to be correct."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest
from interop_helpers import SendTracker, ack_all, assert_no_more, datas, receive_n

from velamq.testing import run_broker

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_receipts_in_order_durable_across_a_kill_and_consumed_back(
    loop: str, topic: str, make_client: Any
) -> None:
    args = ["--uvloop"] if loop == "uvloop" else []
    with run_broker(extra_args=args) as broker:
        client = make_client(broker.service_url)
        client.subscribe(topic, "sub").close()
        sent: list[bytes] = []
        for batched, n in ((False, 500), (True, 2000)):
            producer = client.create_producer(topic, batching_enabled=batched, batching_max_messages=100,
                                              block_if_queue_full=True, max_pending_messages=200)
            tracker = SendTracker(n)
            payloads = [b"%s-%d" % (loop.encode(), len(sent) + i) for i in range(n)]
            for i, payload in enumerate(payloads):
                producer.send_async(payload, tracker.callback(i))
            producer.flush()
            tracker.wait()
            assert all(r == pulsar.Result.Ok for r in tracker.results)
            assert tracker.order == list(range(n))  # receipts follow the sends
            ids = [(m.ledger_id(), m.entry_id(), m.batch_index()) for m in tracker.ids]
            assert ids == sorted(ids)
            producer.close()
            sent += payloads
        client.close()

        broker.kill()  # no clean shutdown: what was acknowledged must be on disk
        broker.start()
        client = make_client(broker.service_url)
        consumer = client.subscribe(topic, "sub")
        messages = receive_n(consumer, len(sent))
        assert datas(messages) == sent
        ack_all(consumer, messages)
        assert_no_more(consumer)
