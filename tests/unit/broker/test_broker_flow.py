"""Flow control without sockets: dispatch stops for a consumer whose connection is not writable and
resumes when it is; a connection's water marks and the broker-wide outbound bound (recounted on a
ManualClock); partial inbound frames against their bound."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

from broker_testing import T, broker, command, connect, consumer, publish, settled, subscribe, topic_on_storage
from wait_helpers import until

from velamq._clock import ManualClock
from velamq.broker.guards._net_budget import NetworkBudget
from velamq.broker.session._transport_flow import TransportFlow


def test_dispatch_waits_for_a_consumer_that_is_not_writable(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with topic_on_storage(tmp_path, clock) as topic:
            subscription = await subscribe(topic)
            _, channel = consumer(subscription, permits=1_000_000)
            channel.writable = False  # the client stopped reading: its write buffer is full
            await publish(topic, [b"m%d" % i for i in range(50)], clock)
            await settled(subscription)
            assert channel.messages() == []  # permits alone do not decide
            channel.writable = True
            subscription.wake()  # what the connection does when it becomes writable again
            await until(lambda: len(channel.messages()) == 50)
            assert channel.payloads() == [b"m%d" % i for i in range(50)]

    asyncio.run(main())


class BufferingTransport:
    """A transport whose write buffer the test drains (the kernel's pace), with asyncio's water
    mark calls made on the protocol as the selector transport makes them."""

    def __init__(self, flow: TransportFlow) -> None:
        self.flow = flow
        self.buffered = 0
        self.high = self.low = 0
        self.paused = False
        self.reading = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.high, self.low = high or 0, low or 0

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def write(self, data: bytes) -> None:
        self.buffered += len(data)
        if not self.paused and self.buffered > self.high:
            self.paused = True
            self.flow.pause_writing()

    def drain(self, size: int) -> None:
        self.buffered = max(0, self.buffered - size)
        if self.paused and self.buffered <= self.low:
            self.paused = False
            self.flow.resume_writing()

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def flow_with_transport(
    network: NetworkBudget, high: int = 1000, low: int = 500
) -> tuple[TransportFlow, Any, list[int]]:
    flow = TransportFlow(network, high, low)
    transport = BufferingTransport(flow)
    flow.attach(transport)  # type: ignore[arg-type]
    woken: list[int] = []
    flow.on_writable = lambda: woken.append(1)
    return flow, transport, woken


def test_water_marks_of_one_connection() -> None:
    async def main() -> None:
        network = NetworkBudget(1 << 30, 1 << 30, ManualClock())
        flow, transport, woken = flow_with_transport(network)
        flow.write(b"x" * 600)
        assert flow.writable  # queued, under the high mark
        flow.write(b"x" * 600)
        assert not flow.writable  # 1200 queued in this loop iteration
        await asyncio.sleep(0)  # the coalesced write goes out: the transport buffer is over high
        assert transport.buffered == 1200 and not flow.writable and woken == []
        assert network.outbound_bytes == 1200
        assert not transport.reading  # a client that does not read its replies is not read either
        transport.drain(600)  # 600: still above the low mark
        assert not flow.writable and not transport.reading
        transport.drain(100)
        assert flow.writable and woken == [1] and network.outbound_bytes == 500 and transport.reading
        flow.close()
        assert network.outbound_bytes == 0 and not flow.writable

    asyncio.run(main())


def test_the_broker_wide_outbound_bound_stops_every_connection_until_recounted() -> None:
    async def main() -> None:
        clock = ManualClock()
        network = NetworkBudget(2000, 1 << 30, clock)
        flows = [flow_with_transport(network, high=1500, low=700) for _ in range(3)]
        for flow, _, _ in flows:
            flow.write(b"x" * 800)
        await asyncio.sleep(0)
        assert network.outbound_bytes == 2400 and network.outbound_full
        assert not any(flow.writable for flow, _, _ in flows)  # each under its own marks, all stopped
        for _, transport, _ in flows:
            transport.drain(800)  # the kernel took it all, and told nobody
        assert network.outbound_full
        await until(lambda: clock.sleepers == 1)
        clock.advance(0.05)  # the recount finds the buffers empty
        await until(lambda: not network.outbound_full)
        assert network.outbound_bytes == 0
        assert all(flow.writable and woken == [1] for flow, _, woken in flows)

    asyncio.run(main())


def test_partial_frames_over_their_bound_pause_the_big_holders(tmp_path: Path) -> None:
    async def main() -> None:
        # 16 MiB of memory: the network gets 2 MiB, partial frames 512 KiB of it.
        async with broker(tmp_path, ManualClock(), memory_bytes=16 << 20) as service:
            assert service.network.inbound_partial_bytes_max == 512 << 10
            holders = []
            for _ in range(4):
                connection, transport = connect(service)
                connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
                connection.data_received(struct.pack(">II", 4 << 20, 100) + b"\0" * (200 << 10))
                holders.append((connection, transport))
            # 3 x 200 KiB is over the bound: the third is paused; the fourth too.
            assert [t.reading for _, t in holders] == [True, True, False, False]
            small, small_transport = connect(service)
            small.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            small.data_received(command(T.PING, "ping")[:5])  # a small partial frame still flows
            assert small_transport.reading
            holders[0][0].connection_lost(None)  # a holder goes: the others fit again
            holders[1][0].connection_lost(None)
            assert [t.reading for _, t in holders[2:]] == [True, True]
            assert service.network.inbound_partial_bytes == 2 * ((200 << 10) + 8) + 5

    asyncio.run(main())


def test_a_lone_frame_larger_than_the_bound_completes(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, ManualClock(), memory_bytes=16 << 20) as service:
            connection, transport = connect(service)
            connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
            connection.data_received(struct.pack(">II", 2 << 20, 100) + b"\0" * (1 << 20))
            assert transport.reading  # 1 MiB held, over the 512 KiB bound, but nobody else holds any

    asyncio.run(main())


def test_a_connection_paused_for_a_partial_frame_too_long_is_closed(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with broker(tmp_path, clock, memory_bytes=16 << 20) as service:
            holders = []
            for _ in range(3):
                connection, transport = connect(service)
                connection.data_received(command(T.CONNECT, "connect", client_version="t", protocol_version=21))
                connection.data_received(struct.pack(">II", 4 << 20, 100) + b"\0" * (300 << 10))
                holders.append(transport)
            assert [t.reading for t in holders] == [True, False, False]
            for _ in range(10):  # checked every second; closed once paused for 10 s
                assert not any(t.closed for t in holders)
                await until(lambda: clock.sleepers >= 1)
                clock.advance(1)
                await asyncio.sleep(0)
            await until(lambda: holders[1].closed and holders[2].closed)
            assert not holders[0].closed and service.network.paused_peers_closed_total == 2

    asyncio.run(main())
