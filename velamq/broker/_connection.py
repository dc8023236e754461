"""One client connection: frames in, handlers, frames out.

Lifecycle (state table):

    state            command                      next state    action
    AWAIT_CONNECT    CONNECT                      CONNECTED     reply CONNECTED (version, max size)
    AWAIT_CONNECT    anything else                CLOSED        close: the client must connect first
    CONNECTED        a handled command            CONNECTED     handle it
    CONNECTED        bad frame / unknown command  CLOSED        log, close this connection only (OP-6)
    any              socket lost                  CLOSED        detach producers and consumers

Writes are coalesced: every frame produced during one loop iteration goes out in one write.
Requests that need the metadata store or storage run as tasks; SEND is handled inline so
appends keep the order in which frames arrived.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine
from enum import Enum
from functools import partial
from typing import TYPE_CHECKING, Any

from velamq import _limits
from velamq._errors import InvalidTopicNameError, ProtocolError
from velamq._topic_name import TopicName
from velamq.broker._consumer import Consumer
from velamq.broker._errors import BrokerRequestError
from velamq.broker._key_shared import HashRangeOverlapError
from velamq.broker._subscription import SubType, entry_info
from velamq.broker._topic import Producer, Topic
from velamq.protocol import I64_MAX, FrameDecoder, encode_command, parse_entry_metadata, pb, signed64, unsigned64
from velamq.protocol._frames import Frame
from velamq.storage import Position

if TYPE_CHECKING:
    from velamq.broker._service import BrokerService

log = logging.getLogger(__name__)

T = pb.BaseCommand


class State(Enum):
    AWAIT_CONNECT = 1
    CONNECTED = 2
    CLOSED = 3


class ServerConnection(asyncio.Protocol):
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.state = State.AWAIT_CONNECT
        self.protocol_version = 0
        self.remote_address = "?"
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(service.config.frame_bytes_max)
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._producers: dict[int, Producer] = {}
        self._consumers: dict[int, Consumer] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._reading_paused = False
        self._received_since_ping = True
        self._ping_outstanding = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._handlers: dict[int, Callable[[Frame], None]] = {
            T.PING: self._on_ping,
            T.PONG: lambda f: None,
            T.PARTITIONED_METADATA: self._spawn(self._on_partitioned_metadata),
            T.LOOKUP: self._spawn(self._on_lookup),
            T.PRODUCER: self._spawn(self._on_producer),
            T.SEND: self._on_send,
            T.SUBSCRIBE: self._spawn(self._on_subscribe),
            T.FLOW: self._on_flow,
            T.ACK: self._on_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._on_redeliver,
            T.UNSUBSCRIBE: self._spawn(self._on_unsubscribe),
            T.CLOSE_PRODUCER: self._on_close_producer,
            T.CLOSE_CONSUMER: self._spawn(self._on_close_consumer),
            T.SEEK: self._spawn(self._on_seek),
            T.GET_LAST_MESSAGE_ID: self._spawn(self._on_get_last_message_id),
            T.GET_TOPICS_OF_NAMESPACE: self._spawn(self._on_get_topics),
            T.GET_SCHEMA: self._on_get_schema,
            T.CONSUMER_STATS: self._on_consumer_stats,
            T.AUTH_RESPONSE: lambda f: None,
        }

    # ---- transport ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.service.connection_opened(self)
        self._schedule_keepalive()

    def data_received(self, data: bytes) -> None:
        self._received_since_ping = True
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing connection %s: %s", self.remote_address, exc)
            self.close()
            return
        for frame in frames:
            if self.state is State.CLOSED:
                return
            try:
                self._handle(frame)
            except ProtocolError as exc:
                log.warning("closing connection %s: %s", self.remote_address, exc)
                self.close()
            except Exception:
                log.exception("closing connection %s after an internal error", self.remote_address)
                self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.state = State.CLOSED
        self.service.storage.publish_buffer.cancel(self._resume_reading)
        if self._keepalive is not None:
            self._keepalive.cancel()
        for producer in list(self._producers.values()):
            producer.topic.remove_producer(producer)
        self._producers.clear()
        for consumer in list(self._consumers.values()):
            self._detach_consumer(consumer)
        self._consumers.clear()
        for task in list(self._tasks):
            task.cancel()
        self.service.connection_closed(self)

    def close(self) -> None:
        if self.state is State.CLOSED:
            return
        self.state = State.CLOSED
        self._flush()
        if self._transport is not None:
            self._transport.close()

    def write(self, data: bytes) -> None:
        if self.state is State.CLOSED and self._transport is None:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def send_command(self, command: pb.BaseCommand) -> None:
        self.write(encode_command(command))

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(self._out))
        self._out.clear()

    # ---- keep-alive --------------------------------------------------------------------------

    def _schedule_keepalive(self) -> None:
        interval = self.service.config.keepalive_interval_s
        self._keepalive = asyncio.get_running_loop().call_later(interval, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        if self.state is State.CLOSED:
            return
        if self._received_since_ping:
            self._received_since_ping = False
            self._ping_outstanding = False
        elif self._ping_outstanding:
            log.info("closing connection %s: no answer to keep-alive", self.remote_address)
            self.close()
            return
        if self.state is State.CONNECTED and self.protocol_version >= 1:
            self._ping_outstanding = True
            self.send_command(pb.BaseCommand(type=T.PING, ping=pb.CommandPing()))
        self._schedule_keepalive()

    # ---- dispatch ----------------------------------------------------------------------------

    def _handle(self, frame: Frame) -> None:
        command = frame.command
        if self.state is State.AWAIT_CONNECT:
            if command.type != T.CONNECT:
                raise ProtocolError(f"{T.Type.Name(command.type)} before CONNECT")
            self._on_connect(command.connect)
            return
        handler = self._handlers.get(command.type)
        if handler is None:
            name = T.Type.Name(command.type) if command.type in T.Type.values() else str(command.type)
            raise ProtocolError(f"unsupported command {name}")
        handler(frame)

    def _spawn(self, handler: Callable[[Frame], Coroutine[Any, Any, None]]) -> Callable[[Frame], None]:
        def start(frame: Frame) -> None:
            task = asyncio.get_running_loop().create_task(self._guarded(handler, frame))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return start

    async def _guarded(self, handler: Callable[[Frame], Coroutine[Any, Any, None]], frame: Frame) -> None:
        request_id = _request_id(frame.command)
        try:
            await handler(frame)
        except BrokerRequestError as exc:
            self._reply_error(frame.command, request_id, exc.code, exc.message)
        except InvalidTopicNameError as exc:
            self._reply_error(frame.command, request_id, pb.InvalidTopicName, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("request %s failed", T.Type.Name(frame.command.type))
            self._reply_error(frame.command, request_id, pb.UnknownError, f"internal error: {exc}")

    def _reply_error(self, command: pb.BaseCommand, request_id: int | None, code: int, message: str) -> None:
        if request_id is None:
            return
        # Lookups answer with a Failed response of their own type; every other request with ERROR.
        response_type, field, failed = _FAILED_RESPONSES.get(command.type, (T.ERROR, "error", None))
        reply = pb.BaseCommand(type=response_type)
        body = getattr(reply, field)
        body.request_id = request_id
        if failed is not None:
            body.response = failed
        body.error = code
        body.message = message
        self.send_command(reply)

    def _success(self, request_id: int) -> None:
        reply = pb.BaseCommand(type=T.SUCCESS)
        reply.success.request_id = request_id
        self.send_command(reply)

    # ---- handshake, keep-alive, discovery ------------------------------------------------------

    def _on_connect(self, connect: pb.CommandConnect) -> None:
        self.protocol_version = min(connect.protocol_version, _limits.protocol_version_max)
        self.state = State.CONNECTED
        reply = pb.BaseCommand(type=T.CONNECTED)
        reply.connected.server_version = self.service.server_version
        reply.connected.protocol_version = self.protocol_version
        reply.connected.max_message_size = self.service.config.max_message_bytes
        reply.connected.feature_flags.supports_auth_refresh = False
        self.send_command(reply)

    def _on_ping(self, frame: Frame) -> None:
        self.send_command(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong()))

    async def _on_partitioned_metadata(self, frame: Frame) -> None:
        request = frame.command.partitionMetadata
        name = TopicName.parse(request.topic)
        await self.service.check_namespace(name)
        partitions = await self.service.metadata.get_partitions(str(name))
        reply = pb.BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
        reply.partitionMetadataResponse.request_id = request.request_id
        reply.partitionMetadataResponse.partitions = partitions
        reply.partitionMetadataResponse.response = pb.CommandPartitionedTopicMetadataResponse.Success
        self.send_command(reply)

    async def _on_lookup(self, frame: Frame) -> None:
        request = frame.command.lookupTopic
        if request.advertised_listener_name and request.advertised_listener_name not in self.service.listeners:
            raise BrokerRequestError(
                pb.ServiceNotReady, f"the broker do not have {request.advertised_listener_name} listener"
            )
        name = TopicName.parse(request.topic)
        await self.service.check_namespace(name)
        reply = pb.BaseCommand(type=T.LOOKUP_RESPONSE)
        r = reply.lookupTopicResponse
        r.request_id = request.request_id
        r.response = pb.CommandLookupTopicResponse.Connect
        r.brokerServiceUrl = self.service.service_url
        if self.service.service_url_tls:
            r.brokerServiceUrlTls = self.service.service_url_tls
        r.authoritative = True
        r.proxy_through_service_url = False
        self.send_command(reply)

    async def _on_get_topics(self, frame: Frame) -> None:
        request = frame.command.getTopicsOfNamespace
        topics = await self.service.topics_of_namespace(request.namespace, int(request.mode))
        reply = pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
        r = reply.getTopicsOfNamespaceResponse
        r.request_id = request.request_id
        r.topics.extend(topics)
        r.filtered = False
        r.changed = True
        self.send_command(reply)

    # ---- producers -----------------------------------------------------------------------------

    async def _on_producer(self, frame: Frame) -> None:
        request = frame.command.producer
        existing = self._producers.get(request.producer_id)
        if existing is not None:
            if existing.topic.full_name != str(TopicName.parse(request.topic)):
                raise BrokerRequestError(pb.ProducerBusy, f"producer id {request.producer_id} is in use")
            self._producer_success(request, existing)
            return
        name = TopicName.parse(request.topic)
        topic = await self.service.get_topic(name, create=True)
        producer_name = request.producer_name or self.service.new_producer_name()
        producer = Producer(
            connection=self,
            producer_id=request.producer_id,
            name=producer_name,
            topic=topic,
            epoch=request.epoch,
            access_mode=int(request.producer_access_mode),
            connected_since_ms=self.service.clock.now_ms(),
        )
        await topic.apply_policies(await self.service.policies_for(name))
        self._check_producer_limits(topic, producer_name)
        # No await between admission and registration: admission decisions stay valid.
        await topic.admit_producer(
            producer,
            request.topic_epoch if request.HasField("topic_epoch") else None,
            lambda: self._producer_queued(request, producer_name),
        )
        error = None if self.state is not State.CLOSED else "connection closed"
        error = error or topic.add_producer(producer)
        if error is not None:
            if topic.exclusive_producer == producer_name and producer_name not in topic.producers:
                topic.exclusive_producer = None
            if self.state is State.CLOSED:
                return
            raise BrokerRequestError(pb.ProducerBusy, error)
        self._producers[request.producer_id] = producer
        if request.HasField("schema"):
            self.service.remember_schema(topic.full_name, request.schema)
        self._producer_success(request, producer)

    def _check_producer_limits(self, topic: Topic, producer_name: str) -> None:
        exceeded = topic.backlog_quota_exceeded
        if exceeded is not None:
            code = (
                pb.ProducerBlockedQuotaExceededException
                if exceeded == "producer_exception"
                else pb.ProducerBlockedQuotaExceededError
            )
            raise BrokerRequestError(code, f"Cannot create producer on topic with backlog quota exceeded ({exceeded})")
        limit = topic.policies.max_producers
        if limit > 0 and len([p for p in topic.producers if p != producer_name]) >= limit:
            raise BrokerRequestError(pb.ProducerBusy, f"Topic reached max producers limit {limit}")

    def _producer_queued(self, request: pb.CommandProducer, producer_name: str) -> None:
        """WaitForExclusive: tell the client it is queued (it then waits without a timeout)."""
        reply = pb.BaseCommand(type=T.PRODUCER_SUCCESS)
        reply.producer_success.request_id = request.request_id
        reply.producer_success.producer_name = producer_name
        reply.producer_success.producer_ready = False
        self.send_command(reply)

    def _producer_success(self, request: pb.CommandProducer, producer: Producer) -> None:
        reply = pb.BaseCommand(type=T.PRODUCER_SUCCESS)
        r = reply.producer_success
        r.request_id = request.request_id
        r.producer_name = producer.name
        dedup = producer.topic.dedup
        r.last_sequence_id = dedup.last_sequence_id(producer.name) if dedup is not None else -1
        if request.HasField("schema"):
            r.schema_version = self.service.schema_version(producer.topic.full_name)
        if producer.access_mode != pb.Shared:
            r.topic_epoch = producer.topic.topic_epoch
        r.producer_ready = True
        self.send_command(reply)

    def forget_producer(self, producer: Producer) -> None:
        """Drop a producer this connection held (replaced by a reconnect elsewhere)."""
        if self._producers.get(producer.producer_id) is producer:
            del self._producers[producer.producer_id]

    def _on_send(self, frame: Frame) -> None:
        send = frame.command.send
        producer = self._producers.get(send.producer_id)
        if producer is None:
            raise ProtocolError(f"SEND for unknown producer id {send.producer_id}")
        if frame.entry is None:
            raise ProtocolError("SEND without a payload")
        if not frame.checksum_valid:
            self._send_error(send.producer_id, send.sequence_id, pb.ChecksumError, "checksum mismatch")
            return
        entry = frame.entry
        # Stored entries must be readable by every consumer: a send whose metadata does not
        # decode is refused here (ProtocolError closes this connection only).
        metadata = parse_entry_metadata(entry)
        limit = producer.topic.policies.max_message_bytes
        if limit is not None and not send.is_chunk and len(entry) > limit + 10:
            # As Pulsar: NotAllowed for this send (the client treats it as a connection error).
            self._send_error(
                send.producer_id, send.sequence_id, pb.NotAllowedError, f"Exceed maximum message size {limit}"
            )
            return
        dedup_checked = True
        if send.is_chunk:
            dedup_checked = metadata.chunk_id == metadata.num_chunks_from_msg - 1
            producer.chunks_in.add(1, len(entry))
            producer.topic.chunks_published += 1
        future = producer.topic.publish(
            producer,
            entry,
            send.num_messages if send.HasField("num_messages") else 1,
            send.sequence_id,
            send.highest_sequence_id,
            dedup_checked,
        )
        # ME-2: above the broker-wide publish buffer (bytes received, not yet durable), stop reading
        # from this producer's socket until storage has drained; producers see backpressure.
        buffer = self.service.storage.publish_buffer
        if buffer.full and not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()
            buffer.on_room(self._resume_reading)
        highest = send.highest_sequence_id if send.HasField("highest_sequence_id") else None
        future.add_done_callback(partial(self._receipt, producer, send.sequence_id, highest))

    def _send_error(self, producer_id: int, sequence_id: int, code: int, message: str) -> None:
        reply = pb.BaseCommand(type=T.SEND_ERROR)
        reply.send_error.producer_id = producer_id
        reply.send_error.sequence_id = sequence_id
        reply.send_error.error = code  # type: ignore[assignment]
        reply.send_error.message = message
        self.send_command(reply)

    def _resume_reading(self) -> None:
        self._reading_paused = False
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def _receipt(
        self, producer: Producer, sequence_id: int, highest: int | None, future: asyncio.Future[Position]
    ) -> None:
        if self.state is State.CLOSED:
            return
        if future.cancelled() or future.exception() is not None:
            log.error("append failed on %s: %s", producer.topic.full_name, future.exception())
            self._send_error(producer.producer_id, sequence_id, pb.PersistenceError, "could not store the message")
            return
        position = future.result()
        reply = pb.BaseCommand(type=T.SEND_RECEIPT)
        r = reply.send_receipt
        r.producer_id = producer.producer_id
        r.sequence_id = sequence_id
        if highest is not None:
            r.highest_sequence_id = highest
        r.message_id.ledgerId = unsigned64(position.ledger_id)
        r.message_id.entryId = unsigned64(position.entry_id)
        self.send_command(reply)

    def _on_close_producer(self, frame: Frame) -> None:
        request = frame.command.close_producer
        producer = self._producers.pop(request.producer_id, None)
        if producer is not None:
            producer.topic.remove_producer(producer)
        self._success(request.request_id)

    # ---- consumers -----------------------------------------------------------------------------

    async def _on_subscribe(self, frame: Frame) -> None:
        request = frame.command.subscribe
        if request.consumer_id in self._consumers:
            self._success(request.request_id)
            return
        name = TopicName.parse(request.topic)
        if not request.subscription or "\n" in request.subscription:
            raise BrokerRequestError(pb.NotAllowedError, "invalid subscription name")
        topic = await self.service.get_topic(name, create=request.force_topic_creation)
        sub_type = SubType(int(request.subType))
        start = self._start_mark_delete(topic, request) if not request.durable else None
        subscription = await topic.subscription(
            request.subscription,
            sub_type,
            request.durable,
            request.initialPosition == pb.CommandSubscribe.Earliest,
            start,
            self.service.non_durable_cursor,
        )
        if subscription.consumers and subscription.sub_type != sub_type:
            raise BrokerRequestError(
                pb.ConsumerBusy, f"subscription {request.subscription} is of type {subscription.sub_type.name}"
            )
        if not subscription.consumers:
            subscription.sub_type = sub_type
            subscription.read_compacted = request.read_compacted
        if sub_type == SubType.EXCLUSIVE and subscription.consumers:
            raise BrokerRequestError(pb.ConsumerBusy, "Exclusive consumer is already connected")
        policies = topic.policies
        if policies.max_consumers > 0 and sum(len(s.consumers) for s in topic.subscriptions.values()) >= (
            policies.max_consumers
        ):
            raise BrokerRequestError(pb.ConsumerBusy, f"Topic reached max consumers limit {policies.max_consumers}")
        if 0 < policies.max_consumers_per_subscription <= len(subscription.consumers):
            raise BrokerRequestError(
                pb.ConsumerBusy, f"Subscription reached max consumers limit {policies.max_consumers_per_subscription}"
            )
        consumer = Consumer(
            self,
            request.consumer_id,
            request.consumer_name or f"consumer-{request.consumer_id}",
            subscription,
            request.priority_level,
            topic.partition_index,
        )
        consumer.connected_since_ms = self.service.clock.now_ms()
        sticky: list[tuple[int, int]] | None = None
        if sub_type == SubType.KEY_SHARED and request.HasField("keySharedMeta"):
            meta = request.keySharedMeta
            if meta.keySharedMode == pb.STICKY:
                sticky = [(r.start, r.end) for r in meta.hashRanges]
                if not sticky:
                    raise BrokerRequestError(pb.ConsumerAssignError, "sticky Key_Shared consumer without ranges")
        if self.state is State.CLOSED:
            return
        try:
            subscription.add_consumer(consumer, sticky)
        except HashRangeOverlapError as exc:
            raise BrokerRequestError(pb.ConsumerAssignError, str(exc)) from None
        subscription.resetting = False
        self._consumers[request.consumer_id] = consumer
        self._success(request.request_id)

    def _start_mark_delete(self, topic: Topic, request: pb.CommandSubscribe) -> Position | None:
        """Non-durable start: delivery starts AT the start id (inclusive); the client drops what
        it must for exclusive starts."""
        ledger = topic.ledger
        if not request.HasField("start_message_id"):
            return None  # latest
        ledger_id = signed64(request.start_message_id.ledgerId)
        entry_id = signed64(request.start_message_id.entryId)
        if ledger_id < 0:  # earliest
            first = ledger.first_position
            return Position(first.ledger_id, first.entry_id - 1) if first else Position(ledger.current_ledger_id, -1)
        if ledger_id == I64_MAX:  # latest
            return None
        return Position(ledger_id, entry_id - 1)

    def _on_flow(self, frame: Frame) -> None:
        flow = frame.command.flow
        consumer = self._consumers.get(flow.consumer_id)
        if consumer is not None:
            consumer.subscription.flow(consumer, flow.messagePermits)

    def _on_ack(self, frame: Frame) -> None:
        ack = frame.command.ack
        consumer = self._consumers.get(ack.consumer_id)
        if consumer is not None and ack.message_id:
            subscription = consumer.subscription
            if ack.ack_type == pb.CommandAck.Cumulative:
                mid = ack.message_id[0]
                subscription.acknowledge_cumulative(
                    consumer, Position(signed64(mid.ledgerId), signed64(mid.entryId)), list(mid.ack_set) or None
                )
            else:
                subscription.acknowledge(
                    consumer,
                    [
                        (Position(signed64(m.ledgerId), signed64(m.entryId)), list(m.ack_set) or None)
                        for m in ack.message_id
                    ],
                )
        if ack.HasField("request_id"):
            reply = pb.BaseCommand(type=T.ACK_RESPONSE)
            reply.ackResponse.consumer_id = ack.consumer_id
            reply.ackResponse.request_id = ack.request_id
            self.send_command(reply)

    def _on_redeliver(self, frame: Frame) -> None:
        request = frame.command.redeliverUnacknowledgedMessages
        consumer = self._consumers.get(request.consumer_id)
        if consumer is None:
            return
        subscription = consumer.subscription
        if request.message_ids and subscription.sub_type in (SubType.SHARED, SubType.KEY_SHARED):
            positions = [Position(signed64(m.ledgerId), signed64(m.entryId)) for m in request.message_ids]
            subscription.redeliver(consumer, positions)
        else:
            subscription.redeliver(consumer, None)

    async def _on_unsubscribe(self, frame: Frame) -> None:
        request = frame.command.unsubscribe
        consumer = self._consumers.get(request.consumer_id)
        if consumer is None:
            raise BrokerRequestError(pb.ConsumerNotFound, f"consumer {request.consumer_id} not found")
        subscription = consumer.subscription
        if any(c is not consumer for c in subscription.consumers):
            raise BrokerRequestError(pb.UnknownError, "Unconnected or shared consumer attempting to unsubscribe")
        self._consumers.pop(request.consumer_id, None)
        subscription.remove_consumer(consumer)
        topic = self.service.loaded_topic(subscription.ledger.name)
        if topic is not None:
            await topic.remove_subscription(subscription.name, delete_cursor=True)
        self._success(request.request_id)

    async def _on_close_consumer(self, frame: Frame) -> None:
        request = frame.command.close_consumer
        consumer = self._consumers.pop(request.consumer_id, None)
        if consumer is not None:
            self._detach_consumer(consumer)
        self._success(request.request_id)

    def _detach_consumer(self, consumer: Consumer) -> None:
        subscription = consumer.subscription
        subscription.remove_consumer(consumer)
        if not subscription.durable and not subscription.consumers and not subscription.resetting:
            topic = self.service.loaded_topic(subscription.ledger.name)
            if topic is not None:
                self.service.spawn(topic.remove_subscription(subscription.name, delete_cursor=False))

    def forget_consumer(self, consumer: Consumer) -> None:
        if self._consumers.get(consumer.consumer_id) is consumer:
            del self._consumers[consumer.consumer_id]

    async def _on_seek(self, frame: Frame) -> None:
        request = frame.command.seek
        consumer = self._consumers.get(request.consumer_id)
        if consumer is None:
            raise BrokerRequestError(pb.ConsumerNotFound, f"consumer {request.consumer_id} not found")
        subscription = consumer.subscription
        ledger = subscription.ledger
        if request.HasField("message_id"):
            ledger_id = signed64(request.message_id.ledgerId)
            entry_id = signed64(request.message_id.entryId)
            if ledger_id < 0:
                first = ledger.first_position
                mark_delete = (
                    Position(first.ledger_id, first.entry_id - 1) if first else Position(ledger.current_ledger_id, -1)
                )
            elif ledger_id == I64_MAX:
                mark_delete = ledger.last_confirmed or Position(ledger.current_ledger_id, -1)
            else:
                mark_delete = Position(ledger_id, entry_id - 1)
        elif request.HasField("message_publish_time"):
            timestamp = request.message_publish_time
            found = await ledger.find_first(lambda data: parse_entry_metadata(data).publish_time >= timestamp)
            if found is None:
                mark_delete = ledger.last_confirmed or Position(ledger.current_ledger_id, -1)
            else:
                mark_delete = Position(found.ledger_id, found.entry_id - 1)
        else:
            raise BrokerRequestError(pb.NotAllowedError, "seek needs a message id or a publish time")
        self.service.reset_subscription(subscription, mark_delete)
        self._success(request.request_id)

    async def _on_get_last_message_id(self, frame: Frame) -> None:
        request = frame.command.getLastMessageId
        consumer = self._consumers.get(request.consumer_id)
        if consumer is None:
            raise BrokerRequestError(pb.ConsumerNotFound, f"consumer {request.consumer_id} not found")
        subscription = consumer.subscription
        ledger = subscription.ledger
        last = ledger.last_confirmed
        batch_index = -1
        view = subscription.compacted_view if subscription.read_compacted else None
        if view is not None and last is not None and last <= view.horizon:
            # Everything is compacted: the newest message a compacted reader can get.
            newest = await view.last_message()
            last, batch_index = newest if newest is not None else (Position(ledger.current_ledger_id, -1), -1)
        elif last is None:
            last = Position(ledger.current_ledger_id, -1)
        else:
            entries = await ledger.read_entries(last, 1)
            if entries:
                info = entry_info(entries[0].data)
                if parse_entry_metadata(entries[0].data).HasField("num_messages_in_batch"):
                    batch_index = info.num_messages - 1
        reply = pb.BaseCommand(type=T.GET_LAST_MESSAGE_ID_RESPONSE)
        r = reply.getLastMessageIdResponse
        r.request_id = request.request_id
        r.last_message_id.ledgerId = unsigned64(last.ledger_id)
        r.last_message_id.entryId = unsigned64(last.entry_id)
        if consumer.partition_index >= 0:
            r.last_message_id.partition = consumer.partition_index
        r.last_message_id.batch_index = batch_index
        md = subscription.cursor.mark_delete_position
        r.consumer_mark_delete_position.ledgerId = unsigned64(md.ledger_id)
        r.consumer_mark_delete_position.entryId = unsigned64(md.entry_id)
        self.send_command(reply)

    def _on_get_schema(self, frame: Frame) -> None:
        request = frame.command.getSchema
        reply = pb.BaseCommand(type=T.GET_SCHEMA_RESPONSE)
        r = reply.getSchemaResponse
        r.request_id = request.request_id
        try:
            topic = str(TopicName.parse(request.topic).partitioned_parent)
        except InvalidTopicNameError:
            topic = request.topic
        schema = self.service.schema_for(topic)
        if schema is None:
            r.error_code = pb.TopicNotFound
            r.error_message = "Topic not found or no-schema"
        else:
            r.schema.CopyFrom(schema)
            r.schema_version = self.service.schema_version(topic)
        self.send_command(reply)

    def _on_consumer_stats(self, frame: Frame) -> None:
        request = frame.command.consumerStats
        reply = pb.BaseCommand(type=T.CONSUMER_STATS_RESPONSE)
        r = reply.consumerStatsResponse
        r.request_id = request.request_id
        consumer = self._consumers.get(request.consumer_id)
        if consumer is None:
            r.error_code = pb.ConsumerNotFound
            r.error_message = f"consumer {request.consumer_id} not found"
        else:
            r.consumerName = consumer.name
            r.availablePermits = max(consumer.permits, 0)
            r.unackedMessages = consumer.unacked_messages
            r.msgBacklog = consumer.subscription.backlog
            r.address = self.remote_address
            r.type = consumer.subscription.sub_type.name.title()
        self.send_command(reply)


_FAILED_RESPONSES: dict[int, tuple[pb.BaseCommand.Type.ValueType, str, int | None]] = {
    T.PARTITIONED_METADATA: (
        T.PARTITIONED_METADATA_RESPONSE,
        "partitionMetadataResponse",
        pb.CommandPartitionedTopicMetadataResponse.Failed,
    ),
    T.LOOKUP: (T.LOOKUP_RESPONSE, "lookupTopicResponse", pb.CommandLookupTopicResponse.Failed),
}


def _request_id(command: pb.BaseCommand) -> int | None:
    name = T.Type.Name(command.type)
    field = {
        "PARTITIONED_METADATA": "partitionMetadata",
        "LOOKUP": "lookupTopic",
        "GET_LAST_MESSAGE_ID": "getLastMessageId",
        "GET_TOPICS_OF_NAMESPACE": "getTopicsOfNamespace",
    }.get(name, name.lower())
    sub = getattr(command, field, None)
    if sub is None or not hasattr(sub, "request_id"):
        return None
    return int(sub.request_id)
