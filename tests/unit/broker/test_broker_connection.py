"""ServerConnection over a recording transport (the socket is the outside world) and a real
BrokerService on storage and metadata in a temp dir: handshake, dispatch, producer and consumer
commands, refusals, keep-alive on a ManualClock."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_testing import T, broker, command, connect, entry, until_reply
from wait_helpers import until

from velamq._clock import ManualClock
from velamq.protocol import encode_payload_command, pb


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
