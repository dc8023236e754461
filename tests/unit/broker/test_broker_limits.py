"""A connection's limits over a recording transport: the handshake deadline and frame size before
CONNECT, string fields that are not UTF-8 (refused, nothing registered or stored), and the
-partition-N rule when a topic loads."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from broker_testing import RecordingTransport, T, broker, command, connect, entry, until_reply
from wait_helpers import until

from velamq import _limits
from velamq._clock import ManualClock
from velamq.broker import BrokerService
from velamq.broker.session._connection import ServerConnection
from velamq.protocol import encode_command, encode_payload_command, pb, with_checksum

TOPIC = "persistent://public/default/t"
BAD = b"bad\xff\xfe"  # five bytes that are not UTF-8


def garbled(data: bytes, placeholder: bytes = b"XXXXX") -> bytes:
    """The frame with its placeholder text replaced by bytes that are not UTF-8 (same length, so
    every length prefix stays right)."""
    assert len(placeholder) == len(BAD) and data.count(placeholder) == 1
    return data.replace(placeholder, BAD)


def connected(service: BrokerService) -> tuple[ServerConnection, RecordingTransport]:
    connection, transport = connect(service)
    connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
    return connection, transport


def test_a_connection_that_never_sends_connect_is_closed_by_the_deadline(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with broker(tmp_path, clock) as service:
            _, transport = connect(service)
            await until(lambda: clock.sleepers == 1)
            clock.advance(_limits.handshake_timeout_s - 0.1)
            await asyncio.sleep(0)
            assert not transport.closed
            clock.advance(0.1)
            await until(lambda: transport.closed)

    asyncio.run(main())


def test_only_a_small_frame_is_read_before_connect(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            early, early_transport = connect(service)
            early.data_received(struct.pack(">II", 1 << 20, 100))  # announces 1 MiB, sends 8 bytes
            assert early_transport.closed
            late, late_transport = connect(service)
            late.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            await until_reply(late_transport, T.CONNECTED)
            late.data_received(struct.pack(">II", 1 << 20, 100))  # after CONNECT: up to maxMessageSize
            assert not late_transport.closed
            assert service.network.inbound_partial_bytes == 8
            late.connection_lost(None)
            assert service.network.inbound_partial_bytes == 0

    asyncio.run(main())


def test_non_utf8_names_are_refused_and_nothing_is_registered(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            connection, transport = connected(service)
            bad_producer = command(T.PRODUCER, "producer", topic=TOPIC, producer_id=1, request_id=1,
                                   producer_name="XXXXX")
            connection.data_received(garbled(bad_producer))
            (error,) = await until_reply(transport, T.ERROR)
            assert (error.error.request_id, error.error.error) == (1, pb.NotAllowedError)
            assert error.error.message == "producer.producer_name is not valid UTF-8"
            assert service.loaded_topic(TOPIC) is None  # not even loaded: refused before the handler

            bad_sub = command(T.SUBSCRIBE, "subscribe", topic=TOPIC, subscription="XXXXX", subType=0,
                              consumer_id=1, request_id=2)
            connection.data_received(garbled(bad_sub))
            await until_reply(transport, T.ERROR, 2)
            assert "subscription is not valid UTF-8" in transport.of_type(T.ERROR)[1].error.message

            props = pb.BaseCommand(type=T.PRODUCER)
            props.producer.topic, props.producer.producer_id, props.producer.request_id = TOPIC, 2, 3
            props.producer.metadata.add(key="k", value="XXXXX")
            connection.data_received(garbled(encode_command(props)))
            await until_reply(transport, T.ERROR, 3)
            assert "producer.metadata.value" in transport.of_type(T.ERROR)[2].error.message

            lookup = command(T.LOOKUP, "lookupTopic", topic="persistent://public/default/XXXXX", request_id=4)
            connection.data_received(garbled(lookup))
            (failed,) = await until_reply(transport, T.LOOKUP_RESPONSE)
            assert failed.lookupTopicResponse.error == pb.InvalidTopicName
            assert not transport.closed  # each refusal answered, the connection kept
            assert service.loaded_topic(TOPIC) is None

            send = pb.BaseCommand(type=T.SEND)
            send.send.producer_id, send.send.sequence_id = 1, 0
            connection.data_received(encode_payload_command(send, entry(b"x", publish_time=1)))
            assert transport.closed  # SEND for a producer that was never registered

    asyncio.run(main())


def test_a_send_with_non_utf8_metadata_is_not_stored(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with broker(tmp_path, clock) as service:
            connection, transport = connected(service)
            connection.data_received(command(T.PRODUCER, "producer", topic=TOPIC, producer_id=1, request_id=1))
            await until_reply(transport, T.PRODUCER_SUCCESS)
            send = pb.BaseCommand(type=T.SEND)
            send.send.producer_id, send.send.sequence_id = 1, 0
            data = entry(b"payload", publish_time=clock.now_ms(), properties=[pb.KeyValue(key="k", value="XXXXX")])
            data = with_checksum(garbled(data[6:]))  # a right checksum over the wrong text
            connection.data_received(encode_payload_command(send, data))
            assert transport.closed  # no request id to answer: this connection goes
            connection.connection_lost(None)
            topic = service.loaded_topic(TOPIC)
            assert topic is not None and topic.ledger.last_confirmed is None and topic.producers == {}

    asyncio.run(main())


def test_a_connect_with_non_utf8_fields_closes_the_connection(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            connection, transport = connect(service)
            hello = command(T.CONNECT, "connect", client_version="XXXXX", protocol_version=21)
            connection.data_received(garbled(hello))
            assert transport.closed and transport.of_type(T.CONNECTED) == []

    asyncio.run(main())


def test_a_partition_name_without_a_partitioned_parent_is_an_ordinary_topic(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            connection, transport = connected(service)
            ordinary = "persistent://public/default/bar-partition-3"
            connection.data_received(command(T.PRODUCER, "producer", topic=ordinary, producer_id=1, request_id=1))
            await until_reply(transport, T.PRODUCER_SUCCESS)
            assert await service.metadata.topic_exists(ordinary)
            await service.metadata.create_partitioned_topic("persistent://public/default/baz", 2)
            beyond = "persistent://public/default/baz-partition-2"
            connection.data_received(command(T.PRODUCER, "producer", topic=beyond, producer_id=2, request_id=2))
            (error,) = await until_reply(transport, T.ERROR)
            assert error.error.error == pb.NotAllowedError and "beyond the 2 partitions" in error.error.message
            assert not await service.metadata.topic_exists(beyond)

    asyncio.run(main())
