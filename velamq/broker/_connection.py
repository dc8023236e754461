"""One client connection: transport, keep-alive, handshake and command dispatch.

Lifecycle (state table):

    state            command                      next state    action
    AWAIT_CONNECT    CONNECT                      CONNECTED     reply CONNECTED (version, max size)
    AWAIT_CONNECT    anything else                CLOSED        close: the client must connect first
    CONNECTED        a handled command            CONNECTED     handle it
    CONNECTED        bad frame / unknown command  CLOSED        log, close this connection only (OP-6)
    any              socket lost                  CLOSED        detach producers and consumers

Producer commands live in _producer_commands.py, consumer commands in _consumer_commands.py; this
module keeps discovery (PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE, GET_SCHEMA,
GET_OR_CREATE_SCHEMA) and turns a handler's refusal (BrokerRequestError) into the reply the client
expects.

Writes are coalesced: every frame produced during one loop iteration goes out in one write.
Requests that need the metadata store or storage run as tasks; SEND is handled inline so
appends keep the order in which frames arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Coroutine
from enum import Enum
from typing import Any

from velamq import _limits
from velamq._errors import InvalidTopicNameError, ProtocolError
from velamq._topic_name import TopicName
from velamq.broker._consumer import ServerConsumer
from velamq.broker._consumer_commands import ConsumerCommands
from velamq.broker._context import BrokerContext
from velamq.broker._errors import BrokerRequestError
from velamq.broker._producer import ServerProducer
from velamq.broker._producer_commands import ProducerCommands
from velamq.broker._schemas import protocol_schema
from velamq.metadata import encode_version
from velamq.protocol import Frame, FrameDecoder, encode_command, pb
from velamq.storage import PublishBuffer

log = logging.getLogger(__name__)

T = pb.BaseCommand


class State(Enum):
    AWAIT_CONNECT = 1
    CONNECTED = 2
    CLOSED = 3


class ServerConnection(asyncio.Protocol):
    """The broker's end of one client's TCP connection: it decodes frames, runs the handshake and
    keep-alive, hands each command to its handler and writes the replies. It owns the producers
    and consumers the client opened on it (through ProducerCommands and ConsumerCommands) and
    detaches them when the socket goes; one bad frame closes this connection and nothing else."""

    def __init__(self, broker: BrokerContext) -> None:
        self._broker = broker
        self.state = State.AWAIT_CONNECT
        self.protocol_version = 0
        self.remote_address = "?"
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(broker.config.frame_bytes_max)
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._producers = ProducerCommands(self, broker)
        self._consumers = ConsumerCommands(self, broker)
        self._tasks: set[asyncio.Task[None]] = set()
        self._paused_by: PublishBuffer | None = None
        self._received_since_ping = True
        self._ping_outstanding = False
        self._keepalive: asyncio.Task[None] | None = None
        self._handlers: dict[int, Callable[[Frame], None]] = {
            T.PING: self._on_ping,
            T.PONG: lambda f: None,
            T.PARTITIONED_METADATA: self._spawn(self._on_partitioned_metadata),
            T.LOOKUP: self._spawn(self._on_lookup),
            T.GET_TOPICS_OF_NAMESPACE: self._spawn(self._on_get_topics),
            T.GET_SCHEMA: self._spawn(self._on_get_schema),
            T.GET_OR_CREATE_SCHEMA: self._spawn(self._on_get_or_create_schema),
            T.AUTH_RESPONSE: lambda f: None,
            T.PRODUCER: self._spawn(self._producers.on_producer),
            T.SEND: self._producers.on_send,
            T.CLOSE_PRODUCER: self._producers.on_close_producer,
            T.SUBSCRIBE: self._spawn(self._consumers.on_subscribe),
            T.FLOW: self._consumers.on_flow,
            T.ACK: self._consumers.on_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self._consumers.on_redeliver,
            T.UNSUBSCRIBE: self._spawn(self._consumers.on_unsubscribe),
            T.CLOSE_CONSUMER: self._spawn(self._consumers.on_close_consumer),
            T.SEEK: self._spawn(self._consumers.on_seek),
            T.GET_LAST_MESSAGE_ID: self._spawn(self._consumers.on_get_last_message_id),
            T.CONSUMER_STATS: self._consumers.on_consumer_stats,
        }

    # ---- transport (asyncio.Protocol) ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._broker.connection_opened(self)
        self._keepalive = asyncio.get_running_loop().create_task(self._keepalive_loop())

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
        if self._paused_by is not None:
            self._paused_by.cancel(self._resume_reading)
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._producers.detach_all()
        self._consumers.detach_all()
        for task in list(self._tasks):
            task.cancel()
        self._broker.connection_closed(self)

    def close(self) -> None:
        if self.state is State.CLOSED:
            return
        self.state = State.CLOSED
        self._flush()
        if self._transport is not None:
            self._transport.close()

    # ---- Channel: what handlers, producers and consumers use -------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    def write(self, data: bytes) -> None:
        if self.state is State.CLOSED and self._transport is None:
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def send_command(self, command: pb.BaseCommand) -> None:
        self.write(encode_command(command))

    def forget_producer(self, producer: ServerProducer) -> None:
        self._producers.forget(producer)

    def forget_consumer(self, consumer: ServerConsumer) -> None:
        self._consumers.forget(consumer)

    def pause_reading_until_room(self, buffer: PublishBuffer) -> None:
        if self._paused_by is None and self._transport is not None:
            self._paused_by = buffer
            self._transport.pause_reading()
            buffer.on_room(self._resume_reading)

    def _resume_reading(self) -> None:
        self._paused_by = None
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._out and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(self._out))
        self._out.clear()

    # ---- keep-alive --------------------------------------------------------------------------

    async def _keepalive_loop(self) -> None:
        interval = self._broker.config.keepalive_interval_s
        while self.state is not State.CLOSED:
            await self._broker.clock.sleep(interval)
            self._keepalive_tick()

    def _keepalive_tick(self) -> None:
        """Every interval: a client that sent nothing since the last PING and did not answer it is gone."""
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

    # ---- handshake and discovery -------------------------------------------------------------

    def _on_connect(self, connect: pb.CommandConnect) -> None:
        self.protocol_version = min(connect.protocol_version, _limits.protocol_version_max)
        self.state = State.CONNECTED
        reply = pb.BaseCommand(type=T.CONNECTED)
        reply.connected.server_version = self._broker.server_version
        reply.connected.protocol_version = self.protocol_version
        reply.connected.max_message_size = self._broker.config.max_message_bytes
        reply.connected.feature_flags.supports_auth_refresh = False
        self.send_command(reply)

    def _on_ping(self, frame: Frame) -> None:
        self.send_command(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong()))

    async def _on_partitioned_metadata(self, frame: Frame) -> None:
        request = frame.command.partitionMetadata
        name = TopicName.parse(request.topic)
        await self._broker.check_namespace(name)
        reply = pb.BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
        reply.partitionMetadataResponse.request_id = request.request_id
        reply.partitionMetadataResponse.partitions = await self._broker.partitions_of(name)
        reply.partitionMetadataResponse.response = pb.CommandPartitionedTopicMetadataResponse.Success
        self.send_command(reply)

    async def _on_lookup(self, frame: Frame) -> None:
        request = frame.command.lookupTopic
        broker = self._broker
        if request.advertised_listener_name and request.advertised_listener_name not in broker.listeners:
            raise BrokerRequestError(
                pb.ServiceNotReady, f"the broker do not have {request.advertised_listener_name} listener"
            )
        await broker.check_namespace(TopicName.parse(request.topic))
        reply = pb.BaseCommand(type=T.LOOKUP_RESPONSE)
        r = reply.lookupTopicResponse
        r.request_id = request.request_id
        r.response = pb.CommandLookupTopicResponse.Connect
        r.brokerServiceUrl = broker.service_url
        if broker.service_url_tls:
            r.brokerServiceUrlTls = broker.service_url_tls
        r.authoritative = True
        r.proxy_through_service_url = False
        self.send_command(reply)

    async def _on_get_topics(self, frame: Frame) -> None:
        request = frame.command.getTopicsOfNamespace
        topics = await self._broker.topics_of_namespace(request.namespace, int(request.mode))
        reply = pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
        r = reply.getTopicsOfNamespaceResponse
        r.request_id = request.request_id
        r.topics.extend(topics)
        r.filtered = False
        r.changed = True
        self.send_command(reply)

    async def _on_get_schema(self, frame: Frame) -> None:
        request = frame.command.getSchema
        reply = pb.BaseCommand(type=T.GET_SCHEMA_RESPONSE)
        r = reply.getSchemaResponse
        r.request_id = request.request_id
        version = request.schema_version if request.HasField("schema_version") else None
        try:
            if version == b"":
                raise BrokerRequestError(pb.IncompatibleSchema, "Empty schema version")
            sid, stored = await self._broker.schemas.get(str(TopicName.parse(request.topic)), version)
            if stored is None:
                raise BrokerRequestError(pb.TopicNotFound, f"Topic not found or no-schema {request.topic}")
        except (BrokerRequestError, InvalidTopicNameError) as exc:
            # The schema requests answer errors in their own response type, not with ERROR.
            r.error_code, r.error_message = _error_fields(exc)  # type: ignore[assignment]
        else:
            r.schema.CopyFrom(protocol_schema(sid, stored))
            r.schema_version = encode_version(stored.version)
        self.send_command(reply)

    async def _on_get_or_create_schema(self, frame: Frame) -> None:
        request = frame.command.getOrCreateSchema
        reply = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
        r = reply.getOrCreateSchemaResponse
        r.request_id = request.request_id
        try:
            name = TopicName.parse(request.topic)
            await self._broker.get_topic(name, create=False)  # TopicNotFound unless it exists
            version = await self._broker.schemas.for_producer(name, request.schema)
        except (BrokerRequestError, InvalidTopicNameError) as exc:
            r.error_code, r.error_message = _error_fields(exc)  # type: ignore[assignment]
        else:
            r.schema_version = version or b""
        self.send_command(reply)


_FAILED_RESPONSES: dict[int, tuple[pb.BaseCommand.Type.ValueType, str, int | None]] = {
    T.PARTITIONED_METADATA: (
        T.PARTITIONED_METADATA_RESPONSE,
        "partitionMetadataResponse",
        pb.CommandPartitionedTopicMetadataResponse.Failed,
    ),
    T.LOOKUP: (T.LOOKUP_RESPONSE, "lookupTopicResponse", pb.CommandLookupTopicResponse.Failed),
}


def _error_fields(exc: BrokerRequestError | InvalidTopicNameError) -> tuple[int, str]:
    if isinstance(exc, BrokerRequestError):
        return exc.code, exc.message
    return pb.InvalidTopicName, str(exc)


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
