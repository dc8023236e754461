"""The commands of a consumer's acknowledgements: ACK, ACK with a receipt, REDELIVER.

The acknowledgement state of a TopicConsumer (pending grouped acks, ack timeouts, negative acks,
dead letters) is in ConsumerAcks (_acks.py); the commands it decides to send leave from
here, over the TopicConsumer's connection, and not at all while it is not subscribed: the tracker
keeps them and they are flushed after the next SUBSCRIBE.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from velamq.client._errors import AlreadyClosedError, ConnectError
from velamq.client._message import MessageId, ReceivedBatch
from velamq.client.consumer._acks import ConsumerAcks
from velamq.client.consumer._receiver_queue import ReceiverQueue
from velamq.client.transport._handler import ConnectionHandler
from velamq.protocol import pb

T = pb.BaseCommand


class State(enum.Enum):
    CONNECTING = "connecting"
    READY = "ready"
    CLOSED = "closed"
    FAILED = "failed"



class ConsumerAckCommands(ConnectionHandler):
    """A base of TopicConsumer: owns the acknowledgement and redelivery commands of one
    subscription on one topic or partition (the state they act on is in ConsumerAcks, the
    connection's life cycle in TopicConsumer)."""

    state: State
    consumer_id: int
    generation: int
    first_generation_of_cluster: int  # messages of older generations came from another cluster
    queue: ReceiverQueue
    acks: ConsumerAcks

    if TYPE_CHECKING:

        def permits_back(self, count: int = 1) -> None: ...  # TopicConsumer's flow control

    def _check_open(self) -> None:
        if self.state is State.CLOSED:
            raise AlreadyClosedError(f"{self.topic}: consumer is closed")


    def acknowledge(self, message_id: MessageId) -> None:
        self._check_open()
        self.acks.acknowledge(message_id)

    def acknowledge_range(self, batch: ReceivedBatch, first: int, end: int) -> None:
        self._check_open()
        if batch.generation >= self.first_generation_of_cluster:
            self.acks.acknowledge_range(batch, first, end)

    def acknowledge_one(self, batch: ReceivedBatch, j: int) -> None:
        if self.state is State.CLOSED:
            raise AlreadyClosedError(f"{self.topic}: consumer is closed")
        if batch.generation >= self.first_generation_of_cluster:  # else: received on the cluster left
            self.acks.acknowledge_one(batch, j)

    def acknowledge_cumulative(self, message_id: MessageId) -> None:
        self._check_open()
        self.acks.acknowledge_cumulative(message_id)

    def negative_acknowledge(self, message_id: MessageId) -> None:
        self._check_open()
        self.acks.negative_acknowledge(message_id)

    def send_ack(self, ack_type: int, ids: list[pb.MessageIdData], validation_error: int | None = None) -> bool:
        connection = self.connection
        if connection is None or not connection.is_ready or self.state is not State.READY:
            return False  # kept by the tracker; flushed after the next SUBSCRIBE
        command = pb.BaseCommand(type=T.ACK)
        command.ack.consumer_id = self.consumer_id
        command.ack.ack_type = ack_type  # type: ignore[assignment]
        command.ack.message_id.extend(ids)
        if validation_error is not None:
            command.ack.validation_error = validation_error  # type: ignore[assignment]
        try:
            connection.send_command(command)
        except ConnectError:
            return False
        return True

    async def confirm_acks(self) -> None:
        """Ack receipts: send the acks not sent yet now, each command with a request id, and wait
        for the broker's ACK_RESPONSE. Raises ConnectError without a connection and the broker's
        error if it refused; the acks then stay queued (sent again after a reconnect)."""
        commands = self.acks.grouped.take()
        if not commands:
            return
        try:
            connection = self.connection
            if connection is None or not connection.is_ready or self.state is not State.READY:
                raise ConnectError(f"{self.topic}: not connected, the acknowledgement is not confirmed")
            for i, (ack_type, ids) in enumerate(commands):
                command = pb.BaseCommand(type=T.ACK)
                command.ack.consumer_id = self.consumer_id
                command.ack.ack_type = ack_type  # type: ignore[assignment]
                command.ack.message_id.extend(ids)
                request_id = self.new_request_id()
                command.ack.request_id = request_id
                await connection.request(command, request_id)
                commands[i] = (ack_type, [])
        except BaseException:
            self.acks.grouped.restore([(t, ids) for t, ids in commands if ids])
            raise

    def send_redeliver(self, ids: list[MessageId] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES for these entries, or for everything unacked (None)."""
        connection = self.connection
        if connection is None or not connection.is_ready:
            return
        command = pb.BaseCommand(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
        command.redeliverUnacknowledgedMessages.consumer_id = self.consumer_id
        if ids:
            entries = {mid.entry_key(): mid for mid in ids}
            for mid in entries.values():
                command.redeliverUnacknowledgedMessages.message_ids.append(
                    MessageId(mid.ledger_id, mid.entry_id, mid.partition).to_proto())
        try:
            connection.send_command(command)
        except ConnectError:
            pass

    def redeliver_all(self) -> None:
        """Everything unacknowledged comes again: the queued messages are dropped first (they
        would otherwise arrive twice) and their permits given back, as the official clients do."""
        self.acks.clear_ack_timeouts()
        generation = self.generation
        dropped = self.queue.drop(lambda b: b.owner is self and b.generation == generation)
        self.queue.drop(lambda b: b.owner is self)
        # Messages already handed out in bulk but not yet to the application (the blocking client's
        # prefetch) are stale too: they come again.
        self.generation += 1
        self.send_redeliver(None)
        if dropped:
            self.permits_back(dropped)
