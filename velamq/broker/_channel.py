"""What command handlers and server-side producers and consumers need of their client connection.

ServerConnection implements `Channel`; the broker unit tests implement it with a recorder of the
frames sent, so that topics, subscriptions and consumers run without sockets.
"""

from __future__ import annotations

from typing import Protocol

from velamq.protocol import pb
from velamq.storage import PublishBuffer

NO_REQUEST_ID = (1 << 64) - 1  # request id of a command the broker sends on its own


class ProducerRef(Protocol):
    """What a channel knows of a producer it is told to forget: its id. The object itself is kept
    and compared, so a producer that a reconnect replaced under the same id is not forgotten."""

    @property
    def producer_id(self) -> int: ...


class ConsumerRef(Protocol):
    """What a channel knows of a consumer it is told to forget (compared as ProducerRef is)."""

    @property
    def consumer_id(self) -> int: ...


class Channel(Protocol):
    @property
    def closed(self) -> bool:
        """True once the connection is closed: late replies are dropped, late registrations undone."""
        ...

    @property
    def writable(self) -> bool:
        """False while the connection's unsent bytes are above its high-water mark (or the broker's
        outbound bound is reached): dispatch sends it nothing until it is writable again."""
        ...

    @property
    def remote_address(self) -> str: ...

    @property
    def protocol_version(self) -> int: ...

    @property
    def client_version(self) -> str:
        """CONNECT's client_version ("Pulsar-CPP-v3.7.0", ...)."""
        ...

    def write(self, data: bytes) -> None:
        """Queue an encoded frame; frames of one loop iteration go out in one write."""
        ...

    def send_command(self, command: pb.BaseCommand) -> None: ...

    def forget_producer(self, producer: ProducerRef) -> None:
        """Drop a producer the broker closed or that a reconnect elsewhere replaced."""
        ...

    def forget_consumer(self, consumer: ConsumerRef) -> None: ...

    def pause_reading_until_room(self, buffer: PublishBuffer) -> None:
        """Backpressure (ME-2): stop reading this client's bytes until the buffer has room again."""
        ...


def success_reply(request_id: int) -> pb.BaseCommand:
    reply = pb.BaseCommand(type=pb.BaseCommand.SUCCESS)
    reply.success.request_id = request_id
    return reply


class ClosedChannel:
    """What a command handler holds once its connection is gone: closed, and writes go nowhere.
    Handlers switch to it when their connection closes, so that they no longer reference the
    connection (which could then only be freed by the garbage collector, with its buffers)."""

    closed = True
    writable = False
    remote_address = "closed"
    protocol_version = 0
    client_version = ""

    def write(self, data: bytes) -> None:
        pass

    def send_command(self, command: pb.BaseCommand) -> None:
        pass

    def forget_producer(self, producer: ProducerRef) -> None:
        pass

    def forget_consumer(self, consumer: ConsumerRef) -> None:
        pass

    def pause_reading_until_room(self, buffer: PublishBuffer) -> None:
        pass


CLOSED_CHANNEL = ClosedChannel()
