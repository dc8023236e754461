"""ServerConnection over a recording transport (the socket is the outside world) and a real
BrokerService on storage and metadata in a temp dir: handshake, dispatch, producer and consumer
commands, refusals, keep-alive on a ManualClock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from broker_testing import T, entry, until

from velamq._clock import ManualClock
from velamq.broker import BrokerConfig, BrokerService
from velamq.broker._connection import ServerConnection
from velamq.metadata import MetadataStore
from velamq.protocol import FrameDecoder, encode_command, encode_payload_command, pb
from velamq.protocol._frames import Frame
from velamq.server import storage_config
from velamq.storage import Storage


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

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def of_type(self, command_type: int) -> list[pb.BaseCommand]:
        return [f.command for f in self.frames if f.command.type == command_type]


@asynccontextmanager
async def broker(tmp_path: Path, clock: ManualClock) -> AsyncIterator[BrokerService]:
    """A BrokerService without its listener: connections are made by the test."""
    config = BrokerConfig(data_dir=tmp_path, sync_policy="none", keepalive_interval_s=30)
    metadata = MetadataStore(tmp_path / "metadata.db")
    # Storage keeps its own timers (write cache age, cursor persistence) on a clock of its own, so
    # the broker's clock has only the connection's sleepers on it.
    storage = Storage(storage_config(config), ManualClock())
    await metadata.start()
    await storage.start()
    service = BrokerService(config, storage, metadata, clock)
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
    await until(lambda: len(transport.of_type(kind)) >= count)
    return transport.of_type(kind)


def test_handshake_then_produce_and_consume(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with broker(tmp_path, clock) as service:
            connection, transport = connect(service)
            connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            (connected,) = await until_reply(transport, T.CONNECTED)
            assert connected.connected.server_version.startswith("velamq")
            topic = "persistent://public/default/t"
            connection.data_received(command(T.PRODUCER, "producer", topic=topic, producer_id=1, request_id=1))
            (ok,) = await until_reply(transport, T.PRODUCER_SUCCESS)
            assert ok.producer_success.producer_name.startswith("standalone-")
            send = pb.BaseCommand(type=T.SEND)
            send.send.producer_id, send.send.sequence_id = 1, 0
            connection.data_received(encode_payload_command(send, entry(b"hello", publish_time=clock.now_ms())))
            (receipt,) = await until_reply(transport, T.SEND_RECEIPT)
            assert receipt.send_receipt.sequence_id == 0
            connection.data_received(command(T.SUBSCRIBE, "subscribe", topic=topic, subscription="s", subType=0,
                                             consumer_id=7, request_id=2, initialPosition=pb.CommandSubscribe.Earliest))
            await until_reply(transport, T.SUCCESS)
            connection.data_received(command(T.FLOW, "flow", consumer_id=7, messagePermits=10))
            (message,) = await until_reply(transport, T.MESSAGE)
            assert message.message.message_id.entryId == receipt.send_receipt.message_id.entryId
            connection.connection_lost(None)
            loaded = service.loaded_topic(topic)
            assert loaded is not None and loaded.producers == {} and not loaded.subscriptions["s"].consumers

    asyncio.run(main())


def test_refusals_get_the_pulsar_error_code(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            connection, transport = connect(service)
            connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            connection.data_received(command(T.SUBSCRIBE, "subscribe", topic="persistent://public/ghost/t",
                                             subscription="s", subType=0, consumer_id=1, request_id=5))
            (error,) = await until_reply(transport, T.ERROR)
            assert (error.error.request_id, error.error.error) == (5, pb.TopicNotFound)
            connection.data_received(command(T.LOOKUP, "lookupTopic", topic="bad//name", request_id=6))
            (lookup,) = await until_reply(transport, T.LOOKUP_RESPONSE)
            assert lookup.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
            assert lookup.lookupTopicResponse.error == pb.InvalidTopicName
            assert not transport.closed  # a refused request keeps the connection

    asyncio.run(main())


def test_a_command_before_connect_closes_only_this_connection(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            bad, bad_transport = connect(service)
            good, good_transport = connect(service)
            bad.data_received(command(T.PING, "ping"))
            assert bad_transport.closed
            good.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            await until_reply(good_transport, T.CONNECTED)
            assert not good_transport.closed

    asyncio.run(main())


def test_keep_alive_pings_then_closes_a_silent_client(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with broker(tmp_path, clock) as service:
            connection, transport = connect(service)
            connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            await until(lambda: clock.sleepers == 1)  # the keep-alive timer waits on the clock
            clock.advance(30)  # the client spoke during the first interval: it gets a PING
            await until_reply(transport, T.PING)
            connection.data_received(command(T.PONG, "pong"))
            clock.advance(30)  # it answered: another PING
            await until_reply(transport, T.PING, 2)
            assert not transport.closed
            clock.advance(30)  # silence for a whole interval after a PING: gone
            await until(lambda: transport.closed)

    asyncio.run(main())
