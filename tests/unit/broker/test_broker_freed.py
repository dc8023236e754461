"""A closed connection is freed at once, by reference counting: no reference cycle keeps it (or the
partial frame it was receiving) alive until a garbage collection that may come much later.

A server in this process (real sockets); the garbage collector is switched off for the test, so
anything that is only freed by it stays, and the weak references would not die."""

from __future__ import annotations

import gc
import socket
import struct
import weakref
from collections.abc import Iterator

import pytest
from wait_helpers import wait_until

from velamq.broker.session._connection import ServerConnection
from velamq.protocol import _pulsar_api_pb2 as pb
from velamq.protocol import encode_command
from velamq.testing import BrokerThread, run_broker_in_thread

T = pb.BaseCommand
connections = 8


@pytest.fixture
def no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def command(kind: int, field: str, **values: object) -> bytes:
    message = pb.BaseCommand(type=kind)
    getattr(message, field).SetInParent()
    for key, value in values.items():
        setattr(getattr(message, field), key, value)
    return encode_command(message)


def open_client(port: int, index: int) -> socket.socket:
    """CONNECT, a producer and a consumer, then most of a 1 MiB frame that never completes."""
    sock = socket.create_connection(("127.0.0.1", port))
    topic = f"persistent://public/default/freed-{index}"
    sock.sendall(command(T.CONNECT, "connect", client_version="t", protocol_version=20)
                 + command(T.PRODUCER, "producer", topic=topic, producer_id=1, request_id=1)
                 + command(T.SUBSCRIBE, "subscribe", topic=topic, subscription="s", subType=0, consumer_id=1,
                           request_id=2)
                 + command(T.FLOW, "flow", consumer_id=1, messagePermits=1000)
                 + struct.pack(">II", 1 << 20, 100) + b"\0" * (900 << 10))
    return sock


def server_connections(broker: BrokerThread) -> list[ServerConnection]:
    async def get() -> list[ServerConnection]:
        return list(broker.server.broker._connections)

    return broker.run(get())


def test_closed_connections_and_their_buffers_die_without_the_garbage_collector(no_gc: None) -> None:
    with run_broker_in_thread() as broker:
        clients = [open_client(broker.server.broker_port, i) for i in range(connections)]
        network = broker.server.broker.network
        wait_until(lambda: network.inbound_partial_bytes >= connections * (900 << 10))
        wait_until(lambda: all(t.producers for t in broker.server.broker.topics.values())
                   and len(broker.server.broker.topics) == connections)
        live = server_connections(broker)
        refs = [weakref.ref(c) for c in live] + [weakref.ref(c._decoder) for c in live]
        refs += [weakref.ref(c._flow) for c in live]
        del live
        for client in clients:
            client.close()
        wait_until(lambda: all(ref() is None for ref in refs))
        assert network.inbound_partial_bytes == 0 and network.outbound_bytes == 0
        assert all(not t.producers for t in broker.server.broker.topics.values())
