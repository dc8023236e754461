"""What makes replicator and remote restarts duplicate nothing (RP-5): a broker with deduplication on
drops a geo-replicator's resent messages by their origin cluster, original producer name and
sequence id, before and after it restarts. Driven with the replicator's own EntryProducer, so every
resend is certain (the end-to-end restart tests cannot choose when a kill lands)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pulsar
from wait_helpers import until

from velamq.client import AdminClient, AsyncClient
from velamq.protocol import build_entry, pb
from velamq.testing import BrokerProcess


class Receipts:
    def __init__(self) -> None:
        self.connected = asyncio.Event()
        self.sequence_ids: list[int] = []

    def on_connected(self) -> None:
        self.connected.set()

    def on_receipt(self, sequence_id: int) -> None:
        self.sequence_ids.append(sequence_id)

    def on_disconnected(self) -> None:
        self.connected.clear()


def _entry(origin: str | None, producer: str, sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1)
    if origin is not None:
        metadata.replicated_from = origin
    return build_entry(metadata, f"{producer}-{sequence_id}".encode())


async def _replicate(service_url: str, topic: str, entries: list[bytes]) -> None:
    """Send entries as the replicator pulsar.repl.east-->west does and wait for every receipt."""
    receipts = Receipts()
    async with AsyncClient(service_url) as client:
        producer = client.create_entry_producer(topic, "pulsar.repl.east-->west", receipts)
        await asyncio.wait_for(receipts.connected.wait(), 30)
        for i, entry in enumerate(entries):
            producer.send(i, entry)
        await until(lambda: len(receipts.sequence_ids) == len(entries), what="every receipt")
        assert sorted(receipts.sequence_ids) == list(range(len(entries)))
        await producer.close()


def _stored(make_client: Any, service_url: str, topic: str) -> list[bytes]:
    reader = make_client(service_url).create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(10_000).data())
    reader.close()
    return got


def test_resent_replicated_messages_are_dropped_before_and_after_a_restart(
    fresh_broker: BrokerProcess, make_client: Any
) -> None:
    AdminClient(fresh_broker.admin_url).request("POST", "/admin/v2/namespaces/public/default/deduplication", True)
    topic = f"persistent://public/default/dedup-{uuid.uuid4().hex[:8]}"
    first = [_entry("east", "p", i) for i in range(10)]
    asyncio.run(_replicate(fresh_broker.service_url, topic, first))
    # A replicator restarted from a cursor that lagged: 5-9 again, then 10-14, under new SEND ids.
    asyncio.run(_replicate(fresh_broker.service_url, topic, [_entry("east", "p", i) for i in range(5, 15)]))
    expected = [f"p-{i}".encode() for i in range(15)]
    assert _stored(make_client, fresh_broker.service_url, topic) == expected
    fresh_broker.kill()
    fresh_broker.start()  # the remote restarted: its deduplication state comes back from the log
    asyncio.run(_replicate(fresh_broker.service_url, topic, [_entry("east", "p", i) for i in range(12, 16)]))
    assert _stored(make_client, fresh_broker.service_url, topic) == [*expected, b"p-15"]


def test_a_failed_over_producer_does_not_hide_the_primary_messages(
    fresh_broker: BrokerProcess, make_client: Any
) -> None:
    """A producer that failed over goes on with its name and sequence ids on this cluster; the
    messages the primary stored under the same name, replicated later, are not duplicates."""
    AdminClient(fresh_broker.admin_url).request("POST", "/admin/v2/namespaces/public/default/deduplication", True)
    topic = f"persistent://public/default/failed-over-{uuid.uuid4().hex[:8]}"
    producer = make_client(fresh_broker.service_url).create_producer(topic, producer_name="p", initial_sequence_id=99)
    producer.send(b"direct-100")
    producer.close()
    asyncio.run(_replicate(fresh_broker.service_url, topic, [_entry("east", "p", i) for i in range(3)]))
    assert _stored(make_client, fresh_broker.service_url, topic) == [b"direct-100", b"p-0", b"p-1", b"p-2"]
