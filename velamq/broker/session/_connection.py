"""One client connection: transport, keep-alive, handshake and command dispatch.

Lifecycle (state table):

    state            command                      next state    action
    AWAIT_CONNECT    CONNECT                      CONNECTED     reply CONNECTED (version, max size)
    AWAIT_CONNECT    CONNECT, credentials refused CLOSED        ERROR(AuthenticationError), close
    AWAIT_CONNECT    anything else                CLOSED        close: the client must connect first
    AWAIT_CONNECT    a frame over 64 KiB          CLOSED        close (only CONNECT may come first)
    AWAIT_CONNECT    handshake timeout (clock)    CLOSED        close
    CONNECTED        a handled command            CONNECTED     handle it
    CONNECTED        a command the role may not   CONNECTED     refuse the request (AuthorizationError)
                     run (authorizationEnabled)
    CONNECTED        credentials expired (clock)  CONNECTED     AUTH_CHALLENGE; unanswered or refused
                                                                AUTH_RESPONSE: close
    CONNECTED        a string field not UTF-8     CONNECTED     refuse the request (ERROR), or close
                                                                if it has no request id
    CONNECTED        bad frame / unknown command  CLOSED        log, close this connection only (OP-6)
    any              socket lost                  CLOSED        detach producers and consumers, give
                                                                back buffers, drop every reference

Producer commands live in _producer_commands.py, consumer commands in _consumer_commands.py,
discovery (PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE, GET_SCHEMA, GET_OR_CREATE_SCHEMA)
in _discovery_commands.py; this module routes each command to its handler and turns a handler's
refusal (BrokerRequestError) into the reply the client expects.

Authentication (CONNECT, AUTH_CHALLENGE/AUTH_RESPONSE) is _auth.py's; the per-command
authorization table is _command_authz.py's. The handshake deadline and the keep-alive are
_liveness.py's (Liveness). Writes, water marks and
read pauses are _transport_flow.py's (TransportFlow): every frame produced
during one loop iteration goes out in one write, dispatch stops while the connection is not
writable, and reading stops while the publish buffer is full or partial frames are over their
bound. Requests that need the metadata store or storage run as tasks; SEND is handled inline so
appends keep the order in which frames arrived. Log lines that can repeat per connection go
through the broker's RateLimitedLog.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable, Coroutine
from enum import Enum
from typing import Any, cast

from velamq import _limits
from velamq._errors import InvalidTopicNameError, ProtocolError
from velamq.broker._channel import ConsumerRef, ProducerRef
from velamq.broker._errors import BrokerRequestError
from velamq.broker.session._auth import ConnectionAuth, RefreshStep, refused_reply
from velamq.broker.session._command_authz import CHECKED_COMMANDS, denial
from velamq.broker.session._consumer_commands import ConsumerCommands
from velamq.broker.session._context import BrokerContext
from velamq.broker.session._discovery_commands import DiscoveryCommands
from velamq.broker.session._eager import start_eagerly
from velamq.broker.session._liveness import Liveness
from velamq.broker.session._producer_commands import ProducerCommands
from velamq.broker.session._text_fields import non_utf8_command_field, non_utf8_field
from velamq.broker.session._transport_flow import TransportFlow
from velamq.protocol import Frame, FrameDecoder, encode_command, pb
from velamq.security import AuthenticationFailedError
from velamq.storage import PublishBuffer

log = logging.getLogger(__name__)

T = pb.BaseCommand
_SEND = T.SEND


class State(Enum):
    AWAIT_CONNECT = 1
    CONNECTED = 2
    CLOSED = 3


class ServerConnection(asyncio.Protocol):
    """The broker's end of one client's TCP connection: it decodes frames, runs the handshake and
    keep-alive, hands each command to its handler and writes the replies. It owns the producers
    and consumers the client opened on it (through ProducerCommands and ConsumerCommands) and
    detaches them when the socket goes; one bad frame closes this connection and nothing else."""

    def __init__(
        self, broker: BrokerContext, release: Callable[[], None] | None = None, *, tls: bool = False
    ) -> None:
        """`release` gives the connection's place under the listener's caps back when it closes;
        `tls`: it came in on the TLS port (brokerServicePortTls)."""
        self._broker = broker
        self.tls = tls
        self.auth = ConnectionAuth(broker.authentication, None)
        self._release = release
        self.state = State.AWAIT_CONNECT
        self.protocol_version = 0
        self.client_version = ""  # CONNECT's client_version: what stats show, what it understands
        self.remote_address = "?"
        self._transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(broker.config.frame_bytes_max)
        # Bytes received before CONNECT was handled: the first frame must be a small one (a client
        # must not park 5 MB before it has even said who it is).
        self._handshake: bytes | None = b""
        config = broker.config
        self._flow = TransportFlow(broker.network, config.write_buffer_high_bytes, config.write_buffer_low_bytes)
        self._flow.on_writable = self._writable_again
        self._producers = ProducerCommands(self, broker)
        self._consumers = ConsumerCommands(self, broker)
        self._discovery = DiscoveryCommands(self, broker)
        self._tasks: set[asyncio.Task[None]] = set()
        self._liveness = Liveness(
            self, broker.clock, config.handshake_timeout_s, config.keepalive_interval_s,
            self._send_ping, broker.log_limit,
        )
        self._handlers = _command_table(self, self._producers, self._consumers, self._discovery)
        self._on_send = self._producers.on_send

    # ---- transport (asyncio.Protocol) ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport; uvloop's (TCPTransport) is not a subclass of asyncio.Transport.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        self._flow.attach(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        ssl_object = transport.get_extra_info("ssl_object") if self.tls else None
        if ssl_object is not None:
            self.auth.peer_cert_der = ssl_object.getpeercert(binary_form=True)
        self._broker.connection_opened(self)
        self._liveness.start()

    def data_received(self, data: bytes) -> None:
        self._liveness.received_since_ping = True
        if self._handshake is not None:
            data = self._first_frame(data)
            if not data:
                return
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            self._close_for("bad-frame", exc)
            return
        self._flow.partial_frame(self._decoder.buffered_bytes)
        for frame in frames:
            if self.state is State.CLOSED:
                break
            try:
                self._handle(frame)
            except ProtocolError as exc:
                self._close_for("bad-frame", exc)
            except Exception:
                self._broker.log_limit.error(
                    "internal-error", "closing connection %s after an internal error", self.remote_address,
                    exc_info=True,
                )
                self.close()
        self._producers.after_read()

    def _first_frame(self, data: bytes) -> bytes:
        """Before CONNECT: gather the first frame (at most handshake_frame_bytes_max), handle it,
        and return what came after it."""
        assert self._handshake is not None
        pending = self._handshake + data
        if len(pending) >= 4:
            (size,) = struct.unpack_from(">I", pending)
            if size > _limits.handshake_frame_bytes_max:
                self._close_for("bad-frame", ProtocolError(f"a first frame of {size} bytes, before CONNECT"))
                return b""
            if len(pending) >= 4 + size:
                self._handshake = None
                self._flow.partial_frame(0)
                first, rest = pending[: 4 + size], pending[4 + size :]
                self.data_received(first)
                return rest if self.state is State.CONNECTED else b""
        self._handshake = pending
        self._flow.partial_frame(len(pending))
        return b""

    def _close_for(self, key: str, exc: Exception) -> None:
        self._broker.log_limit.warning(key, "closing connection %s: %s", self.remote_address, exc)
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        """Detach everything and drop every reference this connection holds, so that it and its
        buffers are freed at once (by reference counting, not by a later garbage collection)."""
        self.state = State.CLOSED
        self._liveness.stop()
        self._producers.detach_all()
        self._consumers.detach_all()
        self._discovery.detach()
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()
        self._flow.close()
        self._decoder = FrameDecoder(0)  # the old one's buffer (a partial frame) goes now
        self._handshake = None
        self._handlers.clear()  # bound methods of self and its handlers: a reference cycle
        self._transport = None
        self._broker.connection_closed(self)
        if self._release is not None:
            self._release()
            self._release = None

    def close(self) -> None:
        if self.state is State.CLOSED:
            return
        self.state = State.CLOSED
        self._flow.flush()
        if self._transport is not None:
            self._transport.close()

    # ---- flow control (asyncio.Protocol), see TransportFlow --------------------------------------

    def pause_writing(self) -> None:
        self._flow.pause_writing()

    def resume_writing(self) -> None:
        self._flow.resume_writing()

    def _writable_again(self) -> None:
        self._consumers.wake_all()

    # ---- Channel: what handlers, producers and consumers use -------------------------------------

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def writable(self) -> bool:
        return self._flow.writable

    def write(self, data: bytes) -> None:
        self._flow.write(data)

    def send_command(self, command: pb.BaseCommand) -> None:
        self.write(encode_command(command))

    def forget_producer(self, producer: ProducerRef) -> None:
        self._producers.forget(producer)

    def forget_consumer(self, consumer: ConsumerRef) -> None:
        self._consumers.forget(consumer)

    def pause_reading_until_room(self, buffer: PublishBuffer) -> None:
        self._flow.pause_until_room(buffer)

    # ---- dispatch ----------------------------------------------------------------------------

    def _handle(self, frame: Frame) -> None:
        command = frame.command
        if command.type == _SEND and self.state is State.CONNECTED:
            # The per-entry path first (issue 22): a SEND's body holds no strings and SEND is not
            # an authorized command (its producer was), so the checks below would pass it as is.
            self._on_send(frame)
            return
        if self.state is State.AWAIT_CONNECT:
            if command.type != T.CONNECT:
                raise ProtocolError(f"{T.Type.Name(command.type)} before CONNECT")
            self._on_connect(command.connect)
            return
        handler = self._handlers.get(command.type)
        if handler is None:
            name = T.Type.Name(command.type) if command.type in T.Type.values() else str(command.type)
            raise ProtocolError(f"unsupported command {name}")
        bad = non_utf8_command_field(command)
        if bad is not None:
            # Refused before the handler runs: nothing is registered, stored or logged per event.
            message = f"{bad} is not valid UTF-8"
            request_id = _request_id(command)
            if request_id is None:
                raise ProtocolError(message)
            code = pb.InvalidTopicName if bad.rsplit(".", 1)[-1] == "topic" else pb.NotAllowedError
            self._reply_error(command, request_id, code, message)
            return
        model = self._broker.authorization
        if model is not None and command.type in CHECKED_COMMANDS:
            refused = denial(model, self.auth.role, command, self._consumers.topic_of)
            if refused is not None:
                self._reply_error(command, _request_id(command), pb.AuthorizationError, refused)
                return
        handler(frame)

    def _spawn(self, handler: Callable[[Frame], Coroutine[Any, Any, None]]) -> Callable[[Frame], None]:
        def start(frame: Frame) -> None:
            # Started here; a task only for a handler that has to wait (_eager.py).
            task = start_eagerly(asyncio.get_running_loop(), self._guarded(handler, frame))
            if task is not None:
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

        return start

    async def _guarded(self, handler: Callable[[Frame], Coroutine[Any, Any, None]], frame: Frame) -> None:
        try:
            await handler(frame)
        except BrokerRequestError as exc:
            self._reply_error(frame.command, _request_id(frame.command), exc.code, exc.message)
        except InvalidTopicNameError as exc:
            self._reply_error(frame.command, _request_id(frame.command), pb.InvalidTopicName, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            name = T.Type.Name(frame.command.type)
            self._broker.log_limit.error(f"request-failed-{name}", "request %s failed", name, exc_info=True)
            self._reply_error(frame.command, _request_id(frame.command), pb.UnknownError, f"internal error: {exc}")

    def _reply_error(self, command: pb.BaseCommand, request_id: int | None, code: int, message: str) -> None:
        if request_id is not None:
            self.send_command(_error_reply(command, request_id, code, message))

    # ---- handshake and keep-alive -------------------------------------------------------------

    def _on_connect(self, connect: pb.CommandConnect) -> None:
        bad = non_utf8_field(connect)
        if bad is not None:
            raise ProtocolError(f"connect.{bad} is not valid UTF-8")
        self.protocol_version = min(connect.protocol_version, _limits.protocol_version_max)
        self.client_version = connect.client_version
        try:
            self.auth.connect(connect)
        except AuthenticationFailedError as exc:
            self._refuse_credentials(exc)
            return
        self.state = State.CONNECTED
        self._liveness.connected()
        reply = pb.BaseCommand(type=T.CONNECTED)
        reply.connected.server_version = self._broker.server_version
        reply.connected.protocol_version = self.protocol_version
        reply.connected.max_message_size = self._broker.config.max_message_bytes
        reply.connected.feature_flags.supports_auth_refresh = self.auth.enabled
        self.send_command(reply)

    def _refuse_credentials(self, exc: AuthenticationFailedError) -> None:
        # The reason (never the credentials) goes to the log; the client learns only that it failed.
        self._broker.log_limit.warning(
            "authentication-refused", "refusing connection %s (role %s): %s", self.remote_address, self.auth.role, exc
        )
        self._broker.auth_counters.refused_total += 1
        self.send_command(refused_reply())
        self.close()

    def _on_auth_response(self, frame: Frame) -> None:
        try:
            self.auth.respond(frame.command.authResponse)
        except AuthenticationFailedError as exc:
            self._refuse_credentials(exc)
            return
        if self.auth.enabled:
            self._broker.auth_counters.refreshed_total += 1

    def refresh_auth(self, now_ms: int) -> None:
        """The broker's periodic check (AuthRefresher): challenge expired credentials, or close."""
        if self.state is not State.CONNECTED:
            return
        step = self.auth.refresh_step(now_ms)
        if step is RefreshStep.CHALLENGE:
            challenge = self.auth.challenge()
            challenge.authChallenge.server_version = self._broker.server_version
            challenge.authChallenge.protocol_version = self.protocol_version
            self._broker.auth_counters.challenges_total += 1
            self.send_command(challenge)
        elif step is not RefreshStep.NOTHING:
            self._broker.log_limit.info(
                f"auth-refresh-{step.name}", "closing connection %s (role %s): %s",
                self.remote_address, self.auth.role, step.value,
            )
            self.close()

    def _send_ping(self) -> None:
        self.send_command(pb.BaseCommand(type=T.PING, ping=pb.CommandPing()))

    def _on_ping(self, frame: Frame) -> None:
        self.send_command(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong()))


Handler = Callable[[Frame], None]


def _command_table(
    connection: ServerConnection,
    producers: ProducerCommands,
    consumers: ConsumerCommands,
    discovery: DiscoveryCommands,
) -> dict[int, Handler]:
    """Who handles which command once the connection is CONNECTED (CONNECT itself is the state
    table's). Requests that wait for the metadata store or storage run as tasks of the connection
    (`_spawn`); SEND, FLOW, ACK and the other per-message commands run inline, so that they keep
    the order in which their frames arrived."""
    spawn = connection._spawn
    return {
        T.PING: connection._on_ping,
        T.PONG: lambda f: None,
        T.PARTITIONED_METADATA: spawn(discovery.on_partitioned_metadata),
        T.LOOKUP: spawn(discovery.on_lookup),
        T.GET_TOPICS_OF_NAMESPACE: spawn(discovery.on_get_topics),
        T.GET_SCHEMA: spawn(discovery.on_get_schema),
        T.GET_OR_CREATE_SCHEMA: spawn(discovery.on_get_or_create_schema),
        T.AUTH_RESPONSE: connection._on_auth_response,
        T.PRODUCER: spawn(producers.on_producer),
        T.SEND: producers.on_send,
        T.CLOSE_PRODUCER: producers.on_close_producer,
        T.SUBSCRIBE: spawn(consumers.on_subscribe),
        T.FLOW: consumers.on_flow,
        T.ACK: consumers.on_ack,
        T.REDELIVER_UNACKNOWLEDGED_MESSAGES: consumers.on_redeliver,
        T.UNSUBSCRIBE: spawn(consumers.on_unsubscribe),
        T.CLOSE_CONSUMER: spawn(consumers.on_close_consumer),
        T.SEEK: spawn(consumers.on_seek),
        T.GET_LAST_MESSAGE_ID: spawn(consumers.on_get_last_message_id),
        T.CONSUMER_STATS: consumers.on_consumer_stats,
    }


_FAILED_RESPONSES: dict[int, tuple[pb.BaseCommand.Type.ValueType, str, int | None]] = {
    T.PARTITIONED_METADATA: (
        T.PARTITIONED_METADATA_RESPONSE,
        "partitionMetadataResponse",
        pb.CommandPartitionedTopicMetadataResponse.Failed,
    ),
    T.LOOKUP: (T.LOOKUP_RESPONSE, "lookupTopicResponse", pb.CommandLookupTopicResponse.Failed),
}


def _error_reply(command: pb.BaseCommand, request_id: int, code: int, message: str) -> pb.BaseCommand:
    # Lookups answer with a Failed response of their own type; every other request with ERROR.
    response_type, field, failed = _FAILED_RESPONSES.get(command.type, (T.ERROR, "error", None))
    reply = pb.BaseCommand(type=response_type)
    body = getattr(reply, field)
    body.request_id = request_id
    if failed is not None:
        body.response = failed
    body.error = code
    body.message = message
    return reply


_BODY_FIELDS: dict[int, str] = {
    value: {
        "PARTITIONED_METADATA": "partitionMetadata",
        "LOOKUP": "lookupTopic",
        "GET_LAST_MESSAGE_ID": "getLastMessageId",
        "GET_TOPICS_OF_NAMESPACE": "getTopicsOfNamespace",
    }.get(name, name.lower())
    for name, value in T.Type.items()
}
# The body field of each command type that has a request_id (known once, not per request).
_REQUEST_ID_FIELDS: dict[int, str] = {
    value: field
    for value, field in _BODY_FIELDS.items()
    if (body := T.DESCRIPTOR.fields_by_name.get(field)) is not None
    and body.message_type is not None
    and "request_id" in body.message_type.fields_by_name
}


def _request_id(command: pb.BaseCommand) -> int | None:
    field = _REQUEST_ID_FIELDS.get(command.type)
    if field is None:
        return None
    return int(getattr(command, field).request_id)
