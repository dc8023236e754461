"""ACK with a request id (ack receipts, Tencent's 600 k topics): the broker answers ACK_RESPONSE, with an
error when no consumer of that id exists, so a receipt never confirms an ack nobody applied."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_testing import T, broker, command, connect, until_reply

from velamq._clock import ManualClock


def test_an_ack_for_an_unknown_consumer_gets_an_error_receipt(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock()) as service:
            connection, transport = connect(service)
            connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            await until_reply(transport, T.CONNECTED)
            connection.data_received(command(T.ACK, "ack", consumer_id=99, ack_type=0, request_id=7))
            (reply,) = await until_reply(transport, T.ACK_RESPONSE)
            assert reply.ackResponse.request_id == 7 and reply.ackResponse.HasField("error")

    asyncio.run(main())
