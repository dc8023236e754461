"""Helpers of the broker unit tests: a real Topic over a real Storage in a temp dir, on a ManualClock,
and a recording Channel in place of the client connection (the transport is the outside world).

No sockets: a test builds the topic, attaches ServerProducers / ServerConsumers whose channel
records every frame the broker sends, and drives time with the clock. Each test runs its own
coroutine with asyncio.run (pytest-asyncio is not a dependency).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from wait_helpers import until

from velamq._clock import ManualClock
from velamq._topic_name import TopicName
from velamq.broker import BrokerConfig, BrokerService, DiskUsage
from velamq.broker._channel import ConsumerRef, ProducerRef
from velamq.broker.session._connection import ServerConnection
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._selector import SubType
from velamq.broker.subscription._subscription import Subscription
from velamq.broker.topic._producer import ServerProducer
from velamq.broker.topic._topic import Topic
from velamq.metadata import MetadataStore
from velamq.protocol import FrameDecoder, build_entry, encode_command, pb, signed64, split_entry
from velamq.protocol._frames import Frame
from velamq.server import storage_config
from velamq.storage import Position, PublishBuffer, Storage, StorageConfig

TOPIC = "persistent://public/default/t"
T = pb.BaseCommand


class RecordingChannel:
    """A client connection that records what the broker sends it (decoded), and nothing else."""

    def __init__(self, protocol_version: int = 21) -> None:
        self.closed = False
        self.writable = True  # a test sets False to play a client that stopped reading
        self.remote_address = "127.0.0.1:40000"
        self.protocol_version = protocol_version
        self.frames: list[Frame] = []
        self.forgotten: list[object] = []
        self.paused_by: PublishBuffer | None = None
        self._decoder = FrameDecoder(64 * 1024 * 1024)

    def write(self, data: bytes) -> None:
        self.frames.extend(self._decoder.feed(data))

    def send_command(self, command: pb.BaseCommand) -> None:
        self.write(encode_command(command))

    def forget_producer(self, producer: ProducerRef) -> None:
        self.forgotten.append(producer)

    def forget_consumer(self, consumer: ConsumerRef) -> None:
        self.forgotten.append(consumer)

    def pause_reading_until_room(self, buffer: PublishBuffer) -> None:
        self.paused_by = buffer

    def of_type(self, command_type: int) -> list[pb.BaseCommand]:
        return [f.command for f in self.frames if f.command.type == command_type]

    def messages(self) -> list[tuple[Position, int, bytes]]:
        """MESSAGE frames as (position, redelivery count, entry bytes)."""
        out = []
        for f in self.frames:
            if f.command.type == T.MESSAGE:
                mid = f.command.message.message_id
                assert f.entry is not None
                position = Position(signed64(mid.ledgerId), signed64(mid.entryId))
                out.append((position, f.command.message.redelivery_count, f.entry))
        return out

    def payloads(self) -> list[bytes]:
        """The payload of each MESSAGE (the entry after its metadata)."""
        return [payload_of(entry) for _, _, entry in self.messages()]


def payload_of(entry: bytes) -> bytes:
    return split_entry(entry)[1]


def entry(
    payload: bytes,
    *,
    publish_time: int,
    key: str | None = None,
    deliver_at: int | None = None,
    producer: str = "p",
    sequence_id: int = 0,
    num_messages: int | None = None,
    **fields: Any,
) -> bytes:
    """A stored entry as a producer would send it (MessageMetadata + payload, checksummed)."""
    metadata = pb.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=publish_time, **fields)
    if key is not None:
        metadata.partition_key = key
    if deliver_at is not None:
        metadata.deliver_at_time = deliver_at
    if num_messages is not None:
        metadata.num_messages_in_batch = num_messages
    return build_entry(metadata, payload)


@asynccontextmanager
async def topic_on_storage(
    data_dir: Path, clock: ManualClock, name: str = TOPIC, **storage: Any
) -> AsyncIterator[Topic]:
    """A loaded Topic over its own Storage, both on `clock`; closed (and storage flushed) after."""
    config = StorageConfig(data_dir=data_dir, sync_policy="none", **storage)
    store = Storage(config, clock)
    await store.start()
    topic = Topic(TopicName.parse(name), await store.open_ledger(name), clock)
    topic.storage = store  # as the broker does: durable subscriptions store their delayed index
    try:
        yield topic
    finally:
        await topic.close()
        await store.close()


def producer(topic: Topic, channel: RecordingChannel | None = None, name: str = "p") -> ServerProducer:
    p = ServerProducer(channel or RecordingChannel(), 1, name, topic, 0, pb.Shared)
    topic.add_producer(p)
    return p


async def publish(topic: Topic, payloads: list[bytes], clock: ManualClock, **fields: Any) -> list[Position]:
    """Append entries (one message each) through Topic.publish, as SEND does, and wait for them."""
    p = topic.producers.get("p") or producer(topic)
    futures = []
    for i, payload in enumerate(payloads):
        data = entry(payload, publish_time=clock.now_ms(), sequence_id=i, **fields)
        futures.append(topic.publish(p, data, 1, i, i, dedup_checked=True))
    return list(await asyncio.gather(*futures))


async def subscribe(
    topic: Topic, name: str = "sub", sub_type: SubType = SubType.EXCLUSIVE, earliest: bool = True
) -> Subscription:
    return await topic.subscription(name, sub_type, durable=True, initial_earliest=earliest, start=None)


def consumer(
    subscription: Subscription,
    consumer_id: int = 1,
    name: str | None = None,
    permits: int = 0,
    channel: RecordingChannel | None = None,
    priority: int = 0,
    sticky: list[tuple[int, int]] | None = None,
) -> tuple[ServerConsumer, RecordingChannel]:
    channel = channel or RecordingChannel()
    c = ServerConsumer(channel, consumer_id, name or f"c{consumer_id}", priority, -1)
    subscription.add_consumer(c, sticky)
    if permits:
        subscription.flow(c, permits)
    return c, channel


async def settled(subscription: Subscription) -> None:
    """Until the subscription's dispatcher has done all it can and waits for a change."""
    await until(lambda: subscription.dispatch_idle)


# ---- a ServerConnection over a recording transport, on a BrokerService without its listener ----


class RecordingTransport(asyncio.Transport):
    """What asyncio gives a protocol: here it records the bytes written and whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Frame] = []
        self.closed = False
        self.reading = True
        self._decoder = FrameDecoder(64 * 1024 * 1024)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.frames.extend(self._decoder.feed(bytes(data)))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0  # everything written is taken at once

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def of_type(self, command_type: int) -> list[pb.BaseCommand]:
        return [f.command for f in self.frames if f.command.type == command_type]


@asynccontextmanager
async def broker(
    tmp_path: Path, clock: ManualClock, disk_stat: Callable[[Path], DiskUsage] | None = None, **config: Any
) -> AsyncIterator[BrokerService]:
    """A BrokerService without its listener: connections are made by the test. Its disk guard
    reads `disk_stat` (a fake filesystem) if given, after one check at start."""
    config = BrokerConfig(data_dir=tmp_path, sync_policy="none", keepalive_interval_s=30).with_overrides(**config)
    metadata = MetadataStore(tmp_path / "metadata.db")
    # Storage keeps its own timers (write cache age, cursor persistence) on a clock of its own, so
    # the broker's clock has only the connection's sleepers on it.
    storage = Storage(storage_config(config), ManualClock())
    await metadata.start()
    await storage.start()
    service = BrokerService(config, storage, metadata, clock, disk_stat=disk_stat)
    await service.disk_guard.check_now()
    try:
        yield service
    finally:
        await service.close()
        await storage.close()
        await metadata.close()


def connect(service: BrokerService) -> tuple[ServerConnection, RecordingTransport]:
    connection = ServerConnection(service)
    transport = RecordingTransport()
    connection.connection_made(transport)
    return connection, transport


def command(kind: int, field: str, **values: Any) -> bytes:
    message = pb.BaseCommand(type=kind)
    getattr(message, field).SetInParent()
    for key, value in values.items():
        setattr(getattr(message, field), key, value)
    return encode_command(message)


async def until_reply(transport: RecordingTransport, kind: int, count: int = 1) -> list[pb.BaseCommand]:
    def told() -> str:
        sent = [pb.BaseCommand.Type.Name(f.command.type) for f in transport.frames]
        error = [f"{c.error.message}" for c in transport.of_type(pb.BaseCommand.ERROR)]
        return f"{count} {pb.BaseCommand.Type.Name(kind)} from the broker (it sent {sent[-10:]}, errors {error[-3:]})"

    await until(lambda: len(transport.of_type(kind)) >= count, told)
    return transport.of_type(kind)
