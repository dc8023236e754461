"""EntryProducer: sends entries that are already built (metadata and payload, checksummed) as they
are. It is what a broker's geo-replicator needs of a client: the entry it read from its own log
goes to the remote topic unchanged, a batch as one batch, a chunk as one chunk (WC-5).

    producer = client.create_entry_producer("persistent://t/ns/x", "pulsar.repl.a-->b", listener)
    # it connects in the background: listener.on_connected() when it is ready
    producer.send(sequence_id, entry, num_messages=1, is_chunk=False)
    # listener.on_receipt(sequence_id) for each stored entry, in the order the broker answers;
    # listener.on_disconnected() when the connection went away: what had no receipt may be lost
    # and is the caller's to send again after the next on_connected()
    await producer.close()

Unlike Producer it keeps no pending queue, no batch, no timeout: the caller owns what is in
flight. It reconnects with backoff until closed, whatever the broker answered (a missing
namespace on the remote, a refused role: an operator can fix either while it waits).
"""

from __future__ import annotations

import logging
from typing import Protocol

from velamq.client.transport._connection import Connection
from velamq.client.transport._handler import ClientContext, ConnectionHandler
from velamq.protocol import encode_payload_command, pb

log = logging.getLogger("velamq.client")
T = pb.BaseCommand


class EntryListener(Protocol):
    """What an EntryProducer tells its owner (called on the client's loop, must not raise)."""

    def on_connected(self) -> None: ...
    def on_receipt(self, sequence_id: int) -> None: ...
    def on_disconnected(self) -> None: ...


class EntryProducer(ConnectionHandler):
    def __init__(self, client: ClientContext, topic: str, producer_name: str, producer_id: int,
                 listener: EntryListener) -> None:
        super().__init__(client, topic)
        self.producer_name = producer_name
        self.producer_id = producer_id
        self.listener = listener
        self.refusal: str | None = None  # why the last attempt to connect failed, if it did

    @property
    def is_connected(self) -> bool:
        return self.connection is not None and self.connection.is_ready

    def connect(self) -> None:
        """Connect in the background (and again after every loss) until closed."""
        self.schedule_reconnect()

    async def _register(self, connection: Connection) -> None:
        request_id = self.new_request_id()
        command = pb.BaseCommand(type=T.PRODUCER)
        p = command.producer
        p.topic = self.topic
        p.producer_id = self.producer_id
        p.request_id = request_id
        p.producer_name = self.producer_name
        p.user_provided_producer_name = True
        connection.add_producer(self.producer_id, self)
        try:
            await connection.request(command, request_id)
        except BaseException as exc:
            connection.remove_producer(self.producer_id, self)
            if str(exc) != self.refusal:  # once per reason, not at every retry
                log.warning("%s: producer %s not accepted (%s); retrying", self.topic, self.producer_name, exc)
            self.refusal = str(exc)
            raise
        if self._closing:
            connection.remove_producer(self.producer_id, self)
            return
        self.refusal = None
        self.connection = connection
        self.listener.on_connected()

    def _retry_after_refusal(self, error: BaseException) -> bool:
        return True  # whatever the refusal: an operator may fix it while this waits

    def send(self, sequence_id: int, entry: bytes, num_messages: int = 1, is_chunk: bool = False) -> None:
        """Write one SEND (nothing while disconnected: a loss shows as on_disconnected, not here)."""
        connection = self.connection
        if connection is None:
            return
        command = pb.BaseCommand(type=T.SEND)
        s = command.send
        s.producer_id = self.producer_id
        s.sequence_id = sequence_id
        if num_messages != 1:
            s.num_messages = num_messages
        if is_chunk:
            s.is_chunk = True
        try:
            connection.send_frame(encode_payload_command(command, entry))
        except Exception as exc:  # closed under us: the loss is reported by the connection
            log.debug("%s: send on a closed connection: %s", self.topic, exc)

    # ---- the connection's side (ProducerListener) ------------------------------------------------

    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        self.listener.on_receipt(receipt.sequence_id)

    def on_send_error(self, error: pb.CommandSendError) -> None:
        # As the C++ client: drop the connection; the owner sends again after reconnecting.
        log.warning("%s: SEND_ERROR %s (%s); reconnecting", self.topic, error.error, error.message)
        if self.connection is not None:
            self.connection.close(f"send error {error.error}")

    def on_closed_by_broker(self, connection: Connection, assigned_url: str | None = None) -> None:
        connection.remove_producer(self.producer_id, self)
        self._connection_gone(connection, assigned_url)

    def on_connection_lost(self, connection: Connection) -> None:
        self._connection_gone(connection)

    def _on_disconnected(self) -> None:
        self.listener.on_disconnected()

    async def close(self) -> None:
        self._stop_reconnecting()
        connection, self.connection = self.connection, None
        if connection is None or not connection.is_ready:
            return
        request_id = self.new_request_id()
        command = pb.BaseCommand(type=T.CLOSE_PRODUCER)
        command.close_producer.producer_id = self.producer_id
        command.close_producer.request_id = request_id
        await self._request_close(connection, command, request_id)
        connection.remove_producer(self.producer_id, self)
