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

A MESSAGE becomes Messages here: checksum and metadata checked, chunks reassembled (see
velamq/protocol/_chunks.py), the payload decompressed, a batch split (skipping indexes the broker says were
acknowledged, CommandMessage.ack_set), and for readers, what precedes the start id dropped (the
broker starts AT the start id; exclusivity is the client's job).

Dead letters (CO-3): a message whose redelivery_count reached max_redeliver_count is delivered
once more and remembered; when it is redelivered again (negative ack, ack timeout, or arriving
with a higher count) the client publishes it to the dead-letter topic and acknowledges it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING, Any

from velamq._errors import ProtocolError
from velamq.client._acks import AckGroupingTracker, BatchAcks, decode_ack_set
from velamq.client._config import ConsumerConfig
from velamq.client._connection import Connection
from velamq.client._errors import AlreadyClosedError, ConnectError, OperationTimeoutError
from velamq.client._handler import ClientContext, ConnectionHandler
from velamq.client._message import Message, MessageId, received_message
from velamq.client._receiver_queue import ReceiverQueue, message_available
from velamq.client._redelivery import AckTimeouts, NegativeAcks
from velamq.protocol import (
    ChunkAssembler,
    EvictedMessage,
    decompress,
    parse_batch,
    pb,
    signed64,
    split_entry,
    unsigned64,
)

if TYPE_CHECKING:
    from velamq.client._dead_letter import DeadLetterSender

log = logging.getLogger("velamq.client")
T = pb.BaseCommand
_SUB_TYPES = {"exclusive": pb.CommandSubscribe.Exclusive, "shared": pb.CommandSubscribe.Shared,
              "failover": pb.CommandSubscribe.Failover, "key_shared": pb.CommandSubscribe.Key_Shared}
chunk_expiry_check_interval_s = 1.0


class State(enum.Enum):
    CONNECTING = "connecting"
    READY = "ready"
    CLOSED = "closed"
    FAILED = "failed"


class TopicConsumer(ConnectionHandler):
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
        self.durable = durable
        self.owner = owner
        self.state = State.CONNECTING
        self.consumer_name = config.consumer_name or ""
        self.generation = 0
        self.is_active: bool | None = None
        self._available_permits = 0
        # Readers: where to (re)start, and whether the start message itself is delivered.
        self._start: MessageId | None = start_message_id
        self._start_inclusive = config.start_message_id_inclusive
        self._filter: tuple[MessageId, bool] | None = (
            (start_message_id, config.start_message_id_inclusive)
            if start_message_id is not None and start_message_id not in (MessageId.earliest, MessageId.latest)
            else None
        )
        self.last_dequeued: MessageId | None = None
        self._seek_pending = False
        self._chunks: ChunkAssembler[MessageId] = ChunkAssembler(
            config.max_pending_chunked_message, config.expire_time_of_incomplete_chunked_message_ms,
            config.auto_ack_oldest_chunked_message_on_queue_full)
        self._chunk_timer: asyncio.TimerHandle | None = None
        self._batch_acks = BatchAcks()
        self._acks = AckGroupingTracker(self._send_ack, config.ack_grouping_time_ms, config.ack_grouping_max_size)
        self._nacks = NegativeAcks(self.redeliver, config.negative_ack_redelivery_delay_ms, client.clock)
        self._ack_timeouts = AckTimeouts(self.redeliver, config.ack_timeout_ms, config.ack_timeout_tick_ms,
                                         client.clock)
        self._dead_letters = dead_letters
        self._dead_letter_candidates: dict[MessageId, Message] = {}

    def __repr__(self) -> str:
        return f"TopicConsumer({self.topic!r}, {self.subscription!r}, {self.state.value})"

    @property
    def shared(self) -> bool:
        return self.config.subscription_type in ("shared", "key_shared")

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
        policy = self.config.key_shared_policy
        if self.config.subscription_type == "key_shared":
            meta = s.keySharedMeta
            if policy is not None and policy.mode == "sticky":
                meta.keySharedMode = pb.STICKY
                for start_hash, end_hash in policy.sticky_ranges:
                    meta.hashRanges.add(start=start_hash, end=end_hash)
            else:
                meta.keySharedMode = pb.AUTO_SPLIT
            if policy is not None:
                meta.allowOutOfOrderDelivery = policy.allow_out_of_order_delivery
        return command

    def _resubscribe_start(self) -> MessageId:
        if self.last_dequeued is not None:
            # Resume after what the application already has (delivered at it, dropped by the filter).
            self._filter = (self.last_dequeued, False)
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
        self._chunks.clear()
        self._available_permits = 0
        self._acks.flush()  # acks made while disconnected go before any new delivery
        self._send_flow(self.receiver_queue_size)

    def on_connection_lost(self, connection: Connection) -> None:
        self._connection_gone(connection)

    def on_closed_by_broker(self, connection: Connection) -> None:
        self._connection_gone(connection)

    def _on_disconnected(self) -> None:
        if self.state is State.READY:
            self.state = State.CONNECTING

    def _on_fatal(self, error: BaseException) -> None:
        self.state = State.FAILED
        self.queue.close(error)

    def on_active_consumer_change(self, is_active: bool) -> None:
        self.is_active = is_active
        listener = self.config.consumer_event_listener
        if listener is not None:
            try:
                listener(self.owner, is_active)
            except Exception:
                log.exception("%s: consumer_event_listener failed", self.topic)

    # ---- flow control --------------------------------------------------------------------------

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

    def _permits_back(self, count: int = 1) -> None:
        self._available_permits += count
        if self._available_permits >= max(1, self.receiver_queue_size // 2):
            permits, self._available_permits = self._available_permits, 0
            self._send_flow(permits)

    def take(self, message: Message) -> bool:
        """A message leaves the receiver queue for the application; False if it is stale."""
        if message._generation != self.generation or self.state is State.CLOSED:
            return False
        self._permits_back(message_permits(message))
        self.last_dequeued = message.message_id
        self._ack_timeouts.add(message.message_id)
        return True

    # ---- receiving -----------------------------------------------------------------------------

    def on_message(self, command: pb.CommandMessage, entry: bytes, checksum_valid: bool) -> None:
        if self._seek_pending or self.state is not State.READY:
            return
        ledger_id, entry_id = signed64(command.message_id.ledgerId), signed64(command.message_id.entryId)
        entry_id_only = MessageId(ledger_id, entry_id, self.partition, topic=self.topic)
        if not checksum_valid:
            log.warning("%s: message %s fails its checksum; dropping it", self.topic, entry_id_only)
            self._send_ack(pb.CommandAck.Individual, [entry_id_only.to_proto()], pb.CommandAck.ChecksumMismatch)
            self._permits_back()
            return
        try:
            metadata, payload = split_entry(entry)
        except ProtocolError as exc:
            log.warning("%s: undecodable message %s: %s", self.topic, entry_id_only, exc)
            self._permits_back()
            return
        redelivery_count = command.redelivery_count
        if metadata.num_chunks_from_msg > 1 and not metadata.HasField("num_messages_in_batch"):
            assembled = self._on_chunk(metadata, payload, entry_id_only)
            if assembled is None:
                return
            payload, message_id = assembled
        else:
            message_id = entry_id_only
        try:
            payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
        except ProtocolError as exc:
            log.warning("%s: cannot decompress message %s: %s", self.topic, message_id, exc)
            self._permits_back()
            return
        if metadata.HasField("num_messages_in_batch"):
            self._on_batch(metadata, payload, message_id, command, redelivery_count)
        else:
            self._deliver(self._message(metadata, None, payload, message_id, redelivery_count, metadata.sequence_id))

    def _on_batch(self, metadata: pb.MessageMetadata, payload: bytes, entry_id: MessageId,
                  command: pb.CommandMessage, redelivery_count: int) -> None:
        n = metadata.num_messages_in_batch
        try:
            items = parse_batch(payload, n)
        except ProtocolError as exc:
            log.warning("%s: undecodable batch %s: %s", self.topic, entry_id, exc)
            self._permits_back(n)
            return
        unacked = decode_ack_set(command.ack_set, n) if command.ack_set else set(range(n))
        self._batch_acks.register(entry_id.entry_key(), n, unacked)
        skipped = 0
        for i, (single, data) in enumerate(items):
            if i not in unacked or single.compacted_out:
                skipped += 1
                continue
            mid = MessageId(entry_id.ledger_id, entry_id.entry_id, self.partition, i, n, topic=self.topic)
            sequence_id = single.sequence_id if single.HasField("sequence_id") else metadata.sequence_id + i
            self._deliver(self._message(metadata, single, data, mid, redelivery_count, sequence_id))
        if skipped:
            self._permits_back(skipped)

    def _message(self, metadata: pb.MessageMetadata, single: pb.SingleMessageMetadata | None, value: bytes,
                 message_id: MessageId, redelivery_count: int, sequence_id: int) -> Message:
        return received_message(metadata, single, value, message_id, self.topic, redelivery_count, sequence_id,
                                 self, self.generation)

    def _excluded_by_start(self, message_id: MessageId) -> bool:
        if self._filter is None:
            return False
        start, inclusive = self._filter
        a: tuple[int, ...] = message_id.entry_key()
        b: tuple[int, ...] = start.entry_key()
        if start.batch_index >= 0 and message_id.batch_index >= 0:
            a, b = (*a, message_id.batch_index), (*b, start.batch_index)
        return a < b if inclusive else a <= b

    def _deliver(self, message: Message) -> None:
        if self._excluded_by_start(message.message_id):
            self._permits_back()
            return
        policy = self.config.dead_letter_policy
        if policy is not None and self._dead_letters is not None and \
                message.redelivery_count >= policy.max_redeliver_count:
            self._dead_letter_candidates[message.message_id] = message
            if message.redelivery_count > policy.max_redeliver_count:
                self._permits_back()
                self.redeliver([message.message_id])
                return
        self.queue.put(message)

    # ---- chunks --------------------------------------------------------------------------------

    def _on_chunk(self, metadata: pb.MessageMetadata, payload: bytes,
                  chunk_id: MessageId) -> tuple[bytes, MessageId] | None:
        outcome = self._chunks.add(metadata.uuid, metadata.chunk_id, metadata.num_chunks_from_msg,
                                   metadata.total_chunk_msg_size, chunk_id, payload, self.client.clock.now_ms())
        for evicted in outcome.evicted:
            self._evict_chunks(evicted)
        if outcome.assembled is None:
            self._permits_back()  # a chunk the application will never see as such
            self._arm_chunk_timer()
            return None
        first, last = outcome.assembled.first_id, outcome.assembled.last_id
        message_id = MessageId(last.ledger_id, last.entry_id, self.partition, first_chunk=first, topic=self.topic)
        return outcome.assembled.payload, message_id

    def _evict_chunks(self, evicted: EvictedMessage[MessageId]) -> None:
        log.info("%s: dropping chunked message %s (%s)", self.topic, evicted.uuid, evicted.reason)
        if evicted.acknowledge:
            for mid in evicted.chunk_ids:
                self._acks.add_individual(mid)
        else:
            for mid in evicted.chunk_ids:
                self._ack_timeouts.add(mid)

    def _arm_chunk_timer(self) -> None:
        if self._chunk_timer is not None or not len(self._chunks):
            return
        self._chunk_timer = asyncio.get_running_loop().call_later(chunk_expiry_check_interval_s, self._expire_chunks)

    def _expire_chunks(self) -> None:
        self._chunk_timer = None
        for evicted in self._chunks.expire(self.client.clock.now_ms()):
            self._evict_chunks(evicted)
        self._arm_chunk_timer()

    # ---- acknowledging -------------------------------------------------------------------------

    def _send_ack(self, ack_type: int, ids: list[pb.MessageIdData], validation_error: int | None = None) -> bool:
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

    def _forget(self, message_id: MessageId) -> None:
        self._ack_timeouts.remove(message_id)
        self._nacks.remove(message_id)
        self._dead_letter_candidates.pop(message_id, None)

    def acknowledge(self, message_id: MessageId) -> None:
        self._check_open()
        self._forget(message_id)
        if message_id.first_chunk is not None:
            self._ack_chunked(message_id)
            return
        if message_id.batch_index >= 0:
            done, ack_set = self._batch_acks.ack(
                message_id.entry_key(), message_id.batch_index, encode=self.config.batch_index_ack_enabled
            )
            if done:
                self._acks.add_individual(message_id)
            elif self.config.batch_index_ack_enabled:
                self._acks.add_individual(message_id, ack_set)
            return
        self._acks.add_individual(message_id)

    def _ack_chunked(self, message_id: MessageId) -> None:
        first = message_id.first_chunk
        assert first is not None
        if first.ledger_id == message_id.ledger_id:
            for entry_id in range(first.entry_id, message_id.entry_id + 1):
                self._acks.add_individual(MessageId(first.ledger_id, entry_id, self.partition))
        else:
            self._acks.add_individual(first)
            self._acks.add_individual(message_id)

    def acknowledge_cumulative(self, message_id: MessageId) -> None:
        self._check_open()
        if self.shared:
            raise ValueError("cumulative acknowledgement is not allowed on Shared / Key_Shared subscriptions")
        self._ack_timeouts.remove_up_to(message_id)
        if message_id.batch_index >= 0 and message_id.batch_size > 0 and \
                message_id.batch_index < message_id.batch_size - 1:
            done, ack_set = self._batch_acks.ack_up_to(message_id.entry_key(), message_id.batch_index)
            if not done:
                if self.config.batch_index_ack_enabled:
                    self._acks.add_cumulative(message_id, ack_set)
                elif message_id.entry_id > 0:
                    self._acks.add_cumulative(MessageId(message_id.ledger_id, message_id.entry_id - 1))
                return
        self._batch_acks.forget_up_to(message_id.entry_key())
        self._acks.add_cumulative(message_id)

    def negative_acknowledge(self, message_id: MessageId) -> None:
        self._check_open()
        self._ack_timeouts.remove(message_id)
        self._nacks.add(message_id)

    def redeliver(self, ids: list[MessageId]) -> None:
        """Redeliver these ids (dead-lettering the ones that used up their redeliveries)."""
        if self.state is State.CLOSED:
            return
        remaining = []
        for mid in ids:
            candidate = self._dead_letter_candidates.pop(mid, None)
            if candidate is not None and self._dead_letters is not None:
                asyncio.get_running_loop().create_task(self._dead_letter(candidate))
            else:
                remaining.append(mid)
        if not remaining:
            return
        if self.shared:
            self._send_redeliver(remaining)
        else:
            self.redeliver_all()

    async def _dead_letter(self, message: Message) -> None:
        assert self._dead_letters is not None
        try:
            await self._dead_letters.send(message)
        except Exception as exc:
            log.warning("%s: could not dead-letter %s (%s); redelivering", self.topic, message.message_id, exc)
            self._dead_letter_candidates[message.message_id] = message
            if self.shared:
                self._send_redeliver([message.message_id])
            return
        self._forget(message.message_id)
        self.acknowledge(message.message_id)

    def _send_redeliver(self, ids: list[MessageId] | None) -> None:
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
        self._ack_timeouts.clear()
        dropped = 0
        if len(self.queue):
            kept = []
            while (m := self.queue.get_nowait()) is not None:
                if m._owner is self and m._generation == self.generation:
                    dropped += message_permits(m)
                elif m._owner is not self:
                    kept.append(m)
            for m in kept:
                self.queue.put(m)
        self._send_redeliver(None)
        if dropped:
            self._permits_back(dropped)

    # ---- seek, last message id, close ----------------------------------------------------------

    def _check_open(self) -> None:
        if self.state is State.CLOSED:
            raise AlreadyClosedError(f"{self.topic}: consumer is closed")

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
            await asyncio.sleep(0.05)

    async def seek(self, message_id: MessageId | None = None, publish_time_ms: int | None = None) -> None:
        connection = await self._ready_connection()
        request_id = self.new_request_id()
        command = pb.BaseCommand(type=T.SEEK)
        command.seek.consumer_id = self.consumer_id
        command.seek.request_id = request_id
        self._acks.flush()  # acks made before the seek belong before it
        previous = (self._start, self._filter, self.last_dequeued)
        if message_id is not None:
            target = message_id.first_chunk or message_id
            command.seek.message_id.ledgerId = unsigned64(target.ledger_id)
            command.seek.message_id.entryId = unsigned64(target.entry_id)
            self._start = message_id
            self._filter = (message_id, True) if message_id not in (MessageId.earliest, MessageId.latest) else None
        else:
            assert publish_time_ms is not None
            command.seek.message_publish_time = publish_time_ms
            self._filter = None
        self.last_dequeued = None
        self._seek_pending = True
        try:
            await connection.request(command, request_id)
        except BaseException:
            self._start, self._filter, self.last_dequeued = previous
            self._seek_pending = False
            raise
        # The broker dropped this consumer before answering; what is still queued is stale.
        self.generation += 1
        self._seek_pending = False
        self._acks.discard()

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
        queued = any(m._owner is self and m._generation == self.generation for m in self.queue.snapshot())
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
        self._acks.close()
        self._stop_reconnecting()
        self.state = State.CLOSED
        for tracker in (self._nacks, self._ack_timeouts):
            tracker.close()
        if self._chunk_timer is not None:
            self._chunk_timer.cancel()
            self._chunk_timer = None
        connection, self.connection = self.connection, None
        if connection is not None and connection.is_ready:
            connection.remove_consumer(self.consumer_id, self)
            if send_close:
                request_id = self.new_request_id()
                command = pb.BaseCommand(type=T.CLOSE_CONSUMER)
                command.close_consumer.consumer_id = self.consumer_id
                command.close_consumer.request_id = request_id
                try:
                    await connection.request(command, request_id)
                except Exception as exc:
                    log.debug("%s: CLOSE_CONSUMER failed: %s", self.topic, exc)

    @property
    def is_connected(self) -> bool:
        return self.state is State.READY and self.connection is not None and self.connection.is_ready


def message_permits(message: Message) -> int:
    return 1
