r"""One subscription on one topic (or one partition): the consumer state machine (CO-1..CO-5, CH-3).

    CONNECTING --SUBSCRIBE ok--> READY --connection lost / CLOSE_CONSUMER / seek--> CONNECTING
         \--fatal error--> FAILED                     READY --close()--> CLOSED

Flow control (CO-2): after each SUBSCRIBE the consumer grants receiver_queue_size permits (FLOW);
the broker spends one per message (a batch entry of n costs n). Every message the application
takes from the receiver queue, and every message the client drops itself, is a permit back; when
half the queue's worth has come back they are granted in one FLOW.

Generations: each (re)subscription starts a new generation. Messages still queued from an older
one are dropped when dequeued, because the broker delivers them again (durable) or the reader
resumes after the last message the application saw (non-durable).

Two helpers hold the rest, each with its own state: MessageIntake (_intake.py) turns a
MESSAGE into Messages (chunks, batches, decompression, the reader's start filter), and
ConsumerAcks (_acks.py) tracks acknowledgements, redeliveries and dead letters, whose
ACK and REDELIVER commands its base ConsumerAckCommands (_ack_commands.py) sends. This
module owns the connection: SUBSCRIBE, FLOW, seek and close.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from velamq.client._config import ConsumerConfig, KeySharedPolicy
from velamq.client._errors import ConnectError, OperationTimeoutError
from velamq.client._message import MessageId, ReceivedBatch, message_at
from velamq.client.consumer._ack_commands import ConsumerAckCommands, State
from velamq.client.consumer._acks import ConsumerAcks
from velamq.client.consumer._intake import MessageIntake
from velamq.client.consumer._receiver_queue import ReceiverQueue, message_available
from velamq.client.transport._connection import Connection
from velamq.client.transport._handler import ClientContext
from velamq.protocol import pb, unsigned64

if TYPE_CHECKING:
    from velamq.client.consumer._dead_letter import DeadLetterSender

log = logging.getLogger("velamq.client")
T = pb.BaseCommand
_SUB_TYPES = {"exclusive": pb.CommandSubscribe.Exclusive, "shared": pb.CommandSubscribe.Shared,
              "failover": pb.CommandSubscribe.Failover, "key_shared": pb.CommandSubscribe.Key_Shared}
ready_poll_interval_s = 0.05


def _fill_key_shared_meta(meta: pb.KeySharedMeta, policy: KeySharedPolicy | None) -> None:
    if policy is not None and policy.mode == "sticky":
        meta.keySharedMode = pb.STICKY
        for start_hash, end_hash in policy.sticky_ranges:
            meta.hashRanges.add(start=start_hash, end=end_hash)
    else:
        meta.keySharedMode = pb.AUTO_SPLIT
    if policy is not None:
        meta.allowOutOfOrderDelivery = policy.allow_out_of_order_delivery


class TopicConsumer(ConsumerAckCommands):
    """The consumer of one subscription on one topic or partition, over one connection at a time.

    It subscribes (again after every reconnect, as a new generation), grants the broker FLOW
    permits as the application takes messages from the shared receiver queue, and sends the ACK,
    REDELIVER, SEEK and CLOSE commands of that subscription. MESSAGEs are decoded by its
    MessageIntake and acknowledgement state is kept by its ConsumerAcks (the commands leave from
    its base, ConsumerAckCommands); the application's
    Consumer holds one TopicConsumer per partition and routes each call to the right one.
    """

    def __init__(self, client: ClientContext, topic: str, partition: int, subscription: str, config: ConsumerConfig,
                 queue: ReceiverQueue, consumer_id: int, receiver_queue_size: int, *, durable: bool = True,
                 start_message_id: MessageId | None = None, dead_letters: DeadLetterSender | None = None,
                 owner: Any = None) -> None:
        super().__init__(client, topic)
        self.partition = partition
        self.subscription = subscription
        self.config = config
        self.queue = queue
        self.consumer_id = consumer_id
        self.receiver_queue_size = max(1, receiver_queue_size)
        self._flow_threshold = max(1, self.receiver_queue_size // 2)
        self.durable = durable
        self.owner = owner
        self.state = State.CONNECTING
        self.consumer_name = config.consumer_name or ""
        self.generation = 0
        self.is_active: bool | None = None
        # The broker said the topic is terminated and this consumer has consumed it all.
        self.reached_end_of_topic = False
        self._available_permits = 0
        # Readers: where to (re)start, and whether the start message itself is delivered.
        self._start: MessageId | None = start_message_id
        self._configured_start = start_message_id  # a seek moves _start; a failover goes back here
        self._start_inclusive = config.start_message_id_inclusive
        # The last message the application took (its batch and position): readers resume after it.
        self._last_taken: tuple[ReceivedBatch, int] | None = None
        self._seek_pending = False
        self.first_generation_of_cluster = 0  # generations before it were on another cluster
        self.acks = ConsumerAcks(self, config, client.clock, dead_letters)
        self.intake = MessageIntake(self, config, client.clock, self.acks)
        self.intake.start_filter = self._configured_start_filter()

    def __repr__(self) -> str:
        return f"TopicConsumer({self.topic!r}, {self.subscription!r}, {self.state.value})"

    @property
    def shared(self) -> bool:
        return self.config.subscription_type in ("shared", "key_shared")

    @property
    def is_closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def is_connected(self) -> bool:
        return self.state is State.READY and self.connection is not None and self.connection.is_ready

    # ---- subscribing ---------------------------------------------------------------------------

    def _subscribe_command(self, request_id: int) -> pb.BaseCommand:
        command = pb.BaseCommand(type=T.SUBSCRIBE)
        s = command.subscribe
        s.topic = self.topic
        s.subscription = self.subscription
        s.subType = _SUB_TYPES[self.config.subscription_type]
        s.consumer_id = self.consumer_id
        s.request_id = request_id
        if self.consumer_name:
            s.consumer_name = self.consumer_name
        s.priority_level = self.config.priority_level
        s.durable = self.durable
        s.read_compacted = self.config.read_compacted
        s.initialPosition = (pb.CommandSubscribe.Earliest if self.config.initial_position == "earliest"
                             else pb.CommandSubscribe.Latest)
        s.replicate_subscription_state = self.config.replicate_subscription_state_enabled
        for k, v in self.config.properties.items():
            s.metadata.add(key=k, value=v)
        schema = self.config.schema.protocol_schema() if self.config.schema is not None else None
        if schema is not None:
            s.schema.CopyFrom(schema)  # the broker checks it against the topic's (IncompatibleSchema)
        if not self.durable:
            start = self._resubscribe_start()
            if start.first_chunk is not None:
                start = start.first_chunk  # a chunked message starts at its first chunk (CH-2)
            s.start_message_id.ledgerId = unsigned64(start.ledger_id)
            s.start_message_id.entryId = unsigned64(start.entry_id)
            if start.partition >= 0:
                s.start_message_id.partition = start.partition
            if start.batch_index >= 0:
                s.start_message_id.batch_index = start.batch_index
        if self.config.subscription_type == "key_shared":
            _fill_key_shared_meta(s.keySharedMeta, self.config.key_shared_policy)
        return command

    def _resubscribe_start(self) -> MessageId:
        if self.last_dequeued is not None:
            # Resume after what the application already has (delivered at it, dropped by the filter).
            self.intake.start_filter = (self.last_dequeued, False)
            return self.last_dequeued
        return self._start if self._start is not None else MessageId.latest

    async def _register(self, connection: Connection) -> None:
        request_id = self.new_request_id()
        command = self._subscribe_command(request_id)
        connection.add_consumer(self.consumer_id, self)
        try:
            await connection.request(command, request_id)
        except BaseException:
            connection.remove_consumer(self.consumer_id, self)
            raise
        if self.state in (State.CLOSED, State.FAILED):
            connection.remove_consumer(self.consumer_id, self)
            return
        self.connection = connection
        self.state = State.READY
        self.generation += 1
        self._seek_pending = False
        self.intake.clear_chunks()
        self._available_permits = 0
        self.acks.flush()  # acks made while disconnected go before any new delivery
        self._send_flow(self.receiver_queue_size)

    def _configured_start_filter(self) -> tuple[MessageId, bool] | None:
        start = self._start
        if start is None or start in (MessageId.earliest, MessageId.latest):
            return None
        return start, self._start_inclusive

    def _on_cluster_switch(self) -> None:
        """Failover to another cluster (as the C++ client's onClusterSwitching): message ids are
        per cluster, so a reader starts again from its configured start, a durable subscription
        from the new cluster's cursor; unsent acknowledgements and ack timeouts are dropped, and
        acknowledgements of messages received before the switch are ignored from now on."""
        self._last_taken = None
        self._start = self._configured_start
        self.intake.start_filter = self._configured_start_filter()
        self.acks.discard()
        self.acks.clear_ack_timeouts()
        # What is still queued from the old cluster is stale from now on, not only once the
        # consumer has subscribed on the new one: taking it would make it the reader's resume point.
        self.generation += 1
        self.first_generation_of_cluster = self.generation

    def on_connection_lost(self, connection: Connection) -> None:
        self._connection_gone(connection)

    def on_closed_by_broker(self, connection: Connection, assigned_url: str | None = None) -> None:
        self._connection_gone(connection, assigned_url)

    def _on_disconnected(self) -> None:
        if self.state is State.READY:
            self.state = State.CONNECTING

    def _on_fatal(self, error: BaseException) -> None:
        self.state = State.FAILED
        self.queue.close(error)

    def on_reached_end_of_topic(self) -> None:
        self.reached_end_of_topic = True

    def on_active_consumer_change(self, is_active: bool) -> None:
        self.is_active = is_active
        listener = self.config.consumer_event_listener
        if listener is not None:
            try:
                listener(self.owner, is_active)
            except Exception:
                log.exception("%s: consumer_event_listener failed", self.topic)

    # ---- flow control and delivery -------------------------------------------------------------

    def _send_flow(self, permits: int) -> None:
        connection = self.connection
        if permits <= 0 or connection is None or not connection.is_ready:
            return
        command = pb.BaseCommand(type=T.FLOW)
        command.flow.consumer_id = self.consumer_id
        command.flow.messagePermits = permits
        try:
            connection.send_command(command)
        except ConnectError:
            pass

    def permits_back(self, count: int = 1) -> None:
        """Messages the application took or the client dropped: their permits, granted again in
        one FLOW once half the receiver queue's worth has come back."""
        self._available_permits += count
        if self._available_permits >= self._flow_threshold:
            permits, self._available_permits = self._available_permits, 0
            self._send_flow(permits)

    def on_message(self, command: pb.CommandMessage, entry: bytes, checksum_valid: bool) -> None:
        if self._seek_pending or self.state is not State.READY:
            return
        self.intake.on_message(command, entry, checksum_valid)

    def deliver(self, batch: ReceivedBatch) -> None:
        """A decoded entry goes to the receiver queue, unless its messages are to be dead-lettered
        (they share the entry's redelivery count, so it is all of them or none)."""
        if self.config.dead_letter_policy is not None and \
                batch.redelivery_count >= self.config.dead_letter_policy.max_redeliver_count:
            held = [m for m in (message_at(batch, j) for j in range(len(batch))) if self.acks.used_up_redeliveries(m)]
            if held:
                self.permits_back(len(held))
                self.acks.redeliver([m.message_id for m in held])
                return
        self.queue.put(batch)

    def take(self, batch: ReceivedBatch, first: int, end: int, handed_out: bool = True) -> bool:
        """Messages first..end-1 of a batch leave the receiver queue for the application; False if
        they are stale (an older subscription generation, or the consumer closed). handed_out=False
        (the blocking client's prefetch): the application does not have them yet, and the prefetch
        records each one it hands out as the last taken."""
        if batch.generation != self.generation or self.state is State.CLOSED:
            return False
        self.permits_back(end - first)
        if handed_out:
            self._last_taken = (batch, end - 1)
        if self.acks.tracks_ids:
            for j in range(first, end):
                self.acks.on_taken(batch.message_id(j))
        return True

    def take_one(self, batch: ReceivedBatch, j: int) -> bool:
        """take(batch, j, j + 1), for receive(): the per-message path, kept short."""
        if batch.generation != self.generation or self.state is State.CLOSED:
            return False
        self._available_permits += 1
        if self._available_permits >= self._flow_threshold:
            self.permits_back(0)
        self._last_taken = (batch, j)
        if self.acks.ack_timeouts_enabled:
            self.acks.on_taken(batch.message_id(j))
        return True

    @property
    def last_dequeued(self) -> MessageId | None:
        if self._last_taken is None:
            return None
        batch, j = self._last_taken
        return batch.message_id(j)

    # ---- seek, last message id, close ----------------------------------------------------------

    async def _ready_connection(self) -> Connection:
        deadline = self.client.clock.monotonic_s() + self.client.config.operation_timeout_s
        while True:
            self._check_open()
            if self.state is State.FAILED:
                raise self._failed or ConnectError(f"{self.topic}: consumer failed")
            connection = self.connection
            if connection is not None and connection.is_ready and self.state is State.READY:
                return connection
            if self.client.clock.monotonic_s() > deadline:
                raise OperationTimeoutError(f"{self.topic}: consumer not connected")
            await asyncio.sleep(ready_poll_interval_s)

    async def seek(self, message_id: MessageId | None = None, publish_time_ms: int | None = None) -> None:
        connection = await self._ready_connection()
        request_id = self.new_request_id()
        command = pb.BaseCommand(type=T.SEEK)
        command.seek.consumer_id = self.consumer_id
        command.seek.request_id = request_id
        self.acks.flush()  # acks made before the seek belong before it
        previous = (self._start, self.intake.start_filter, self._last_taken)
        if message_id is not None:
            target = message_id.first_chunk or message_id
            command.seek.message_id.ledgerId = unsigned64(target.ledger_id)
            command.seek.message_id.entryId = unsigned64(target.entry_id)
            self._start = message_id
            self.intake.start_filter = (
                (message_id, True) if message_id not in (MessageId.earliest, MessageId.latest) else None)
        else:
            assert publish_time_ms is not None
            command.seek.message_publish_time = publish_time_ms
            self.intake.start_filter = None
        self._last_taken = None
        self._seek_pending = True
        try:
            await connection.request(command, request_id)
        except BaseException:
            self._start, self.intake.start_filter, self._last_taken = previous
            self._seek_pending = False
            raise
        # The broker dropped this consumer before answering; what is still queued is stale.
        self.generation += 1
        self._seek_pending = False
        self.acks.discard()

    async def get_last_message_id(self) -> tuple[MessageId, MessageId | None]:
        """(last message id of the topic, this subscription's mark-delete position or None)."""
        connection = await self._ready_connection()
        request_id = self.new_request_id()
        command = pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID)
        command.getLastMessageId.consumer_id = self.consumer_id
        command.getLastMessageId.request_id = request_id
        reply = (await connection.request(command, request_id)).getLastMessageIdResponse
        last = MessageId.from_proto(reply.last_message_id, self.topic)
        mark_delete = (MessageId.from_proto(reply.consumer_mark_delete_position, self.topic)
                       if reply.HasField("consumer_mark_delete_position") else None)
        return last, mark_delete

    async def has_message_available(self) -> bool:
        last, mark_delete = await self.get_last_message_id()
        queued = self.queue.has_from(self, self.generation)
        return message_available(last, mark_delete, self.last_dequeued, queued, self._start, self._start_inclusive)

    async def unsubscribe(self) -> None:
        connection = await self._ready_connection()
        request_id = self.new_request_id()
        command = pb.BaseCommand(type=T.UNSUBSCRIBE)
        command.unsubscribe.consumer_id = self.consumer_id
        command.unsubscribe.request_id = request_id
        await connection.request(command, request_id)
        await self.close(send_close=False)

    async def close(self, send_close: bool = True) -> None:
        if self.state is State.CLOSED:
            return
        self.acks.close()  # pending acks leave while the consumer can still send them
        self._stop_reconnecting()
        self.state = State.CLOSED
        self.intake.close()
        connection, self.connection = self.connection, None
        if connection is not None and connection.is_ready:
            connection.remove_consumer(self.consumer_id, self)
            if send_close:
                request_id = self.new_request_id()
                command = pb.BaseCommand(type=T.CLOSE_CONSUMER)
                command.close_consumer.consumer_id = self.consumer_id
                command.close_consumer.request_id = request_id
                await self._request_close(connection, command, request_id)
