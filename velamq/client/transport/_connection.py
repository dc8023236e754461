r"""One TCP connection to a broker: handshake, request/response correlation, keep-alive, dispatch.

Lifecycle (explicit states):

    CONNECTING  --CONNECTED-->  READY  --socket error / keep-alive timeout / close()-->  CLOSED
        \--timeout, refused, ERROR before CONNECTED--> CLOSED (open() raises ConnectError)

CONNECT carries protocol_version 20 (what pulsar-client 3.x sends); the broker answers with its
own version and max_message_size (absent: 5 MiB - 10 KiB, as the C++ client assumes).

Security: with an SSL context the socket is TLS (pulsar+ssl://). CONNECT carries the
authentication plugin's method name and data (else "none") and supports_auth_refresh; an
AUTH_CHALLENGE, during the handshake or later on a live connection (the broker's refresh when a
token expires), is answered with AUTH_RESPONSE holding fresh data from the plugin (a token
supplier is called again). A broker that refuses the credentials (ERROR AuthenticationError before
CONNECTED) fails open() with ConnectAuthenticationError, and an untrusted certificate with
TlsHandshakeError: neither is retried. Credentials are never logged.

Requests carry a request_id; the answer with that id resolves the request's future (ERROR and the
Failed variants of the lookup answers become BrokerError subclasses via error_from_server). A
request that gets no answer within operation_timeout_s fails with OperationTimeoutError, except a
WaitForExclusive producer that the broker said is queued (producer_ready=false): it waits.

Producers and consumers register by id and get SEND_RECEIPT / SEND_ERROR / MESSAGE /
CLOSE_PRODUCER / CLOSE_CONSUMER / ACTIVE_CONSUMER_CHANGE; when the connection dies every one of
them hears connection_lost and reconnects on its own (with backoff, through a new lookup).

Keep-alive: every keep_alive_interval_s a PING goes out; if nothing at all arrived during a whole
interval after a PING, the connection is considered dead and closed (as the C++ client does).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import ssl
from typing import Protocol

from velamq import _limits
from velamq._errors import ProtocolError
from velamq.client._config import ClientConfig
from velamq.client._errors import (
    ConnectAuthenticationError,
    ConnectError,
    OperationTimeoutError,
    TlsHandshakeError,
    error_from_server,
)
from velamq.protocol import FrameDecoder, encode_command, encode_payload_command, pb

log = logging.getLogger("velamq.client")
T = pb.BaseCommand

client_version = "velamq-client-0.1.0"
protocol_version = 20
read_chunk_bytes = 256 * 1024
# When CONNECTED has no max_message_size, the C++ client assumes 5 MB minus 10 KB.
default_max_message_bytes = _limits.max_message_bytes_default - _limits.frame_padding_bytes

# response type -> the field of BaseCommand that holds it (every one has a request_id)
_RESPONSE_FIELDS = {
    T.SUCCESS: "success",
    T.ERROR: "error",
    T.PRODUCER_SUCCESS: "producer_success",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    T.CONSUMER_STATS_RESPONSE: "consumerStatsResponse",
    T.ACK_RESPONSE: "ackResponse",
}


class ProducerListener(Protocol):
    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None: ...
    def on_send_error(self, error: pb.CommandSendError) -> None: ...
    def on_closed_by_broker(self, connection: Connection, assigned_url: str | None = None) -> None: ...
    def on_connection_lost(self, connection: Connection) -> None: ...


class ConsumerListener(Protocol):
    def on_message(self, message: pb.CommandMessage, entry: bytes, checksum_valid: bool) -> None: ...
    def on_active_consumer_change(self, is_active: bool) -> None: ...
    def on_reached_end_of_topic(self) -> None: ...
    def on_closed_by_broker(self, connection: Connection, assigned_url: str | None = None) -> None: ...
    def on_connection_lost(self, connection: Connection) -> None: ...


class State(enum.Enum):
    CONNECTING = "connecting"
    READY = "ready"
    CLOSED = "closed"


class Connection:
    def __init__(self, logical_url: str, host: str, port: int, config: ClientConfig,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.logical_url = logical_url
        self.ssl_context = ssl_context
        self.host = host
        self.port = port
        self.config = config
        self.state = State.CONNECTING
        self.server_version = ""
        self.server_protocol_version = 0
        self.max_message_bytes = default_max_message_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._out: list[bytes] | None = None  # written in this turn of the loop (_write)
        self._decoder = FrameDecoder(1 << 30, verify_checksums=True)
        self._requests: dict[int, tuple[asyncio.Future[pb.BaseCommand], asyncio.TimerHandle | None]] = {}
        self._producers: dict[int, ProducerListener] = {}
        self._consumers: dict[int, ConsumerListener] = {}
        self._connected: asyncio.Future[None] | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None
        self._received_since_ping = True
        self.closed = asyncio.Event()

    def __repr__(self) -> str:
        return f"Connection({self.logical_url} via {self.host}:{self.port}, {self.state.value})"

    @property
    def is_ready(self) -> bool:
        return self.state is State.READY

    # ---- open / close --------------------------------------------------------------------------

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        connect = self._connect_command()  # credentials first: a failing supplier needs no socket
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self.ssl_context,
                                        server_hostname=self.host if self.ssl_context else None),
                self.config.connection_timeout_s,
            )
        except ssl.SSLError as exc:
            self._closed_before_open()
            raise TlsHandshakeError(f"TLS handshake with {self.host}:{self.port} failed: {_tls_reason(exc)}") from None
        except (TimeoutError, OSError) as exc:
            self._closed_before_open()
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {exc or 'timeout'}") from None
        self._connected = loop.create_future()
        self._read_task = loop.create_task(self._read_loop(), name=f"velamq-read-{self.host}:{self.port}")
        self._write(encode_command(connect))
        try:
            await asyncio.wait_for(asyncio.shield(self._connected), self.config.connection_timeout_s)
        except TimeoutError:
            self.close("no CONNECTED in time")
            raise ConnectError(f"{self.host}:{self.port}: handshake timed out") from None
        except Exception:
            self.close("handshake failed")
            raise
        self._keepalive_task = loop.create_task(self._keepalive_loop(), name="velamq-keepalive")

    def _closed_before_open(self) -> None:
        self.state = State.CLOSED
        self.closed.set()

    def _connect_command(self) -> pb.BaseCommand:
        return connect_command(self.config)

    def _on_auth_challenge(self, challenge: pb.CommandAuthChallenge) -> None:
        """Answer with fresh credentials (a refresh challenge asks for them when a token expires)."""
        authentication = self.config.authentication
        response = pb.BaseCommand(type=T.AUTH_RESPONSE)
        response.authResponse.client_version = client_version
        response.authResponse.protocol_version = protocol_version
        if authentication is None:
            response.authResponse.response.auth_method_name = "none"
            response.authResponse.response.auth_data = b""
        else:
            try:
                data = authentication.challenge_response(challenge.challenge.auth_data)
            except ConnectError as exc:
                log.warning("%r: cannot answer the broker's authentication challenge: %s", self, exc)
                if self._connected is not None and not self._connected.done():
                    self._connected.set_exception(exc)
                self.close(f"no credentials for the authentication challenge: {exc}")
                return
            response.authResponse.response.auth_method_name = authentication.method_name
            response.authResponse.response.auth_data = data
        log.debug("%r: answered an authentication challenge", self)
        self.send_command(response)

    def close(self, reason: str = "closed by the client") -> None:
        if self.state is State.CLOSED:
            return
        log.debug("closing %r: %s", self, reason)
        self.state = State.CLOSED
        self._flush()  # what was written before the close goes first
        if self._writer is not None:
            self._writer.close()
        current = asyncio.current_task()
        for task in (self._read_task, self._keepalive_task):
            if task is not None and task is not current:
                task.cancel()
        error = ConnectError(f"connection to {self.host}:{self.port} closed: {reason}")
        if self._connected is not None and not self._connected.done():
            self._connected.set_exception(error)
        for future, timer in list(self._requests.values()):
            if timer is not None:
                timer.cancel()
            if not future.done():
                future.set_exception(error)
        self._requests.clear()
        producers, consumers = list(self._producers.values()), list(self._consumers.values())
        self._producers.clear()
        self._consumers.clear()
        self.closed.set()
        for p in producers:
            p.on_connection_lost(self)
        for c in consumers:
            c.on_connection_lost(self)

    # ---- registration --------------------------------------------------------------------------

    def add_producer(self, producer_id: int, listener: ProducerListener) -> None:
        self._producers[producer_id] = listener

    def remove_producer(self, producer_id: int, listener: ProducerListener) -> None:
        if self._producers.get(producer_id) is listener:
            del self._producers[producer_id]

    def add_consumer(self, consumer_id: int, listener: ConsumerListener) -> None:
        self._consumers[consumer_id] = listener

    def remove_consumer(self, consumer_id: int, listener: ConsumerListener) -> None:
        if self._consumers.get(consumer_id) is listener:
            del self._consumers[consumer_id]

    # ---- writing -------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        """Frames written in one turn of the loop go to the socket in one send at its end."""
        if self._writer is None or self._writer.is_closing():
            raise ConnectError(f"connection to {self.host}:{self.port} is closed")
        if self._out is None:
            self._out = [data]
            asyncio.get_running_loop().call_soon(self._flush)
        else:
            self._out.append(data)

    def _flush(self) -> None:
        out, self._out = self._out, None
        writer = self._writer
        if out and writer is not None and not writer.is_closing():
            writer.write(out[0] if len(out) == 1 else b"".join(out))

    def send_command(self, command: pb.BaseCommand) -> None:
        if self.state is State.CLOSED:
            raise ConnectError(f"connection to {self.host}:{self.port} is closed")
        self._write(encode_command(command))

    def send_frame(self, frame: bytes) -> None:
        """Bytes of an already encoded frame (a SEND prepared once and resent as is)."""
        if self.state is State.CLOSED:
            raise ConnectError(f"connection to {self.host}:{self.port} is closed")
        self._write(frame)

    @staticmethod
    def encode_send(command: pb.BaseCommand, entry: bytes) -> bytes:
        return encode_payload_command(command, entry)

    async def request(self, command: pb.BaseCommand, request_id: int, timeout_s: float | None = None) -> pb.BaseCommand:
        """Send a command and wait for the answer carrying its request_id."""
        if self.state is not State.READY:
            raise ConnectError(f"connection to {self.host}:{self.port} is not ready")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[pb.BaseCommand] = loop.create_future()
        timeout = self.config.operation_timeout_s if timeout_s is None else timeout_s
        timer = loop.call_later(timeout, self._request_timed_out, request_id, command.type)
        self._requests[request_id] = (future, timer)
        try:
            self.send_command(command)
            return await future
        finally:
            entry = self._requests.pop(request_id, None)
            if entry is not None and entry[1] is not None:
                entry[1].cancel()

    def _request_timed_out(self, request_id: int, command_type: int) -> None:
        entry = self._requests.get(request_id)
        if entry is not None and not entry[0].done():
            name = T.Type.Name(command_type)  # type: ignore[arg-type]
            entry[0].set_exception(OperationTimeoutError(f"{name} request {request_id} got no answer in time"))

    # ---- reading -------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reason = "the broker closed the connection"
        try:
            while True:
                data = await self._reader.read(read_chunk_bytes)
                if not data:
                    break
                self._received_since_ping = True
                for frame in self._decoder.feed(data):
                    self._dispatch(frame.command, frame.entry, frame.checksum_valid)
                    if self.state is State.CLOSED:
                        return
        except asyncio.CancelledError:
            return
        except ssl.SSLError as exc:  # e.g. the broker refused our client certificate (TLS 1.3: after the handshake)
            reason = f"TLS error: {_tls_reason(exc)}"
            if self._connected is not None and not self._connected.done():
                self._connected.set_exception(TlsHandshakeError(f"{self.host}:{self.port}: {reason}"))
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.warning("%r: %s", self, reason)
        except OSError as exc:
            reason = f"socket error: {exc}"
        except Exception as exc:  # a bug in a listener must not leave the connection half-alive
            log.exception("%r: error while dispatching", self)
            reason = f"internal error: {exc}"
        self.close(reason)

    def _dispatch(self, command: pb.BaseCommand, entry: bytes | None, checksum_valid: bool) -> None:
        t = command.type
        if t == T.MESSAGE:
            consumer = self._consumers.get(command.message.consumer_id)
            if consumer is not None and entry is not None:
                consumer.on_message(command.message, entry, checksum_valid)
        elif t == T.SEND_RECEIPT:
            producer = self._producers.get(command.send_receipt.producer_id)
            if producer is not None:
                producer.on_send_receipt(command.send_receipt)
        elif t == T.SEND_ERROR:
            producer = self._producers.get(command.send_error.producer_id)
            if producer is not None:
                producer.on_send_error(command.send_error)
        elif t in _RESPONSE_FIELDS:
            self._on_response(command)
        elif t == T.PING:
            self.send_command(pb.BaseCommand(type=T.PONG, pong=pb.CommandPong()))
        elif t == T.PONG:
            pass
        elif t == T.CONNECTED:
            self._on_connected(command.connected)
        elif t == T.AUTH_CHALLENGE:
            self._on_auth_challenge(command.authChallenge)
        elif t == T.CLOSE_PRODUCER:
            p = self._producers.pop(command.close_producer.producer_id, None)
            if p is not None:
                p.on_closed_by_broker(self, self._assigned_url(command.close_producer))
        elif t == T.CLOSE_CONSUMER:
            c = self._consumers.pop(command.close_consumer.consumer_id, None)
            if c is not None:
                c.on_closed_by_broker(self, self._assigned_url(command.close_consumer))
        elif t == T.ACTIVE_CONSUMER_CHANGE:
            c = self._consumers.get(command.active_consumer_change.consumer_id)
            if c is not None:
                c.on_active_consumer_change(command.active_consumer_change.is_active)
        elif t == T.REACHED_END_OF_TOPIC:
            c = self._consumers.get(command.reachedEndOfTopic.consumer_id)
            if c is not None:
                c.on_reached_end_of_topic()
        else:
            log.debug("%r: ignoring %s", self, T.Type.Name(t))

    def _assigned_url(self, close: pb.CommandCloseProducer | pb.CommandCloseConsumer) -> str | None:
        """Where the broker sends the producer or consumer (PIP-307: its bundle moved to another
        broker): the URL of this connection's kind, TLS or plain, as the C++ client takes it."""
        url = close.assignedBrokerServiceUrlTls if self.ssl_context is not None else close.assignedBrokerServiceUrl
        return url or None

    def _on_connected(self, connected: pb.CommandConnected) -> None:
        if self._connected is None or self._connected.done():
            return
        if not connected.server_version:
            self._connected.set_exception(ConnectError("CONNECTED without server_version"))
            return
        self.server_version = connected.server_version
        self.server_protocol_version = connected.protocol_version
        if connected.HasField("max_message_size") and connected.max_message_size > 0:
            self.max_message_bytes = connected.max_message_size
        self.state = State.READY
        self._connected.set_result(None)

    def _on_response(self, command: pb.BaseCommand) -> None:
        if command.type == T.ERROR and self._connected is not None and not self._connected.done():
            self._connected.set_exception(self._handshake_error(command.error))
            return
        body = getattr(command, _RESPONSE_FIELDS[command.type])
        entry = self._requests.get(body.request_id)
        if entry is None:
            return
        future, timer = entry
        if future.done():
            return
        failed = command.type in (T.PARTITIONED_METADATA_RESPONSE, T.LOOKUP_RESPONSE) and body.response == body.Failed
        failed = failed or (command.type == T.ACK_RESPONSE and body.HasField("error"))
        if command.type == T.ERROR or failed:
            future.set_exception(error_from_server(int(body.error), body.message))
        elif command.type == T.GET_SCHEMA_RESPONSE and body.HasField("error_code"):
            future.set_exception(error_from_server(int(body.error_code), body.error_message))
        elif command.type == T.PRODUCER_SUCCESS and body.HasField("producer_ready") and not body.producer_ready:
            # WaitForExclusive: queued behind another producer; wait without a timeout.
            if timer is not None:
                timer.cancel()
            self._requests[body.request_id] = (future, None)
        else:
            future.set_result(command)

    def _handshake_error(self, error: pb.CommandError) -> Exception:
        if error.error == pb.AuthenticationError:
            authentication = self.config.authentication
            method = authentication.method_name if authentication is not None else "none"
            return ConnectAuthenticationError(
                int(error.error),
                f"{self.host}:{self.port} refused the client's authentication (method {method!r}): {error.message}",
            )
        if error.error == pb.AuthorizationError:
            return error_from_server(int(error.error), f"{self.host}:{self.port}: {error.message}")
        return ConnectError(f"handshake refused: {error.message}")

    async def _keepalive_loop(self) -> None:
        interval = self.config.keep_alive_interval_s
        ping_outstanding = False
        try:
            while self.state is State.READY:
                await asyncio.sleep(interval)
                if self._received_since_ping:
                    self._received_since_ping = False
                    ping_outstanding = False
                elif ping_outstanding:
                    self.close("no answer to keep-alive")
                    return
                ping_outstanding = True
                self.send_command(pb.BaseCommand(type=T.PING, ping=pb.CommandPing()))
        except asyncio.CancelledError:
            return
        except ConnectError:
            return


def _tls_reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    return str(exc.reason or exc.strerror or type(exc).__name__)


def connect_command(config: ClientConfig) -> pb.BaseCommand:
    """CONNECT with the client's credentials (asked for now: a failing supplier needs no socket)."""
    connect = pb.BaseCommand(type=T.CONNECT)
    connect.connect.client_version = client_version
    connect.connect.protocol_version = protocol_version
    authentication = config.authentication
    if authentication is None:
        connect.connect.auth_method_name = "none"
    else:
        connect.connect.auth_method_name = authentication.method_name
        connect.connect.auth_data = authentication.auth_data()
    connect.connect.feature_flags.supports_auth_refresh = True
    connect.connect.feature_flags.supports_broker_entry_metadata = True
    return connect
