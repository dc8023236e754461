"""The binary port's accept loop, with connection caps and a calm answer to descriptor exhaustion.

Why not `loop.create_server`: when accept() fails with EMFILE, asyncio's selector loop logs
"socket.accept() out of system resource" with a traceback, schedules a retry -- and goes on
calling accept() for the rest of its backlog loop, logging and scheduling again each time (CPython
3.11, selector_events._accept_connection). Under a connection storm at `ulimit -n 1024` that made
a 292 MB log in 75 s. Here:

    accept() ok, under the caps     the socket becomes a transport and a ServerConnection
    accept() ok, over a cap         closed at once, counted (brokerMaxConnections,
                                    brokerMaxConnectionsPerIp); one log line a minute at most
    EMFILE / ENFILE / ENOBUFS /     stop reading the listening socket for accept_retry_s (the
    ENOMEM                          waiting clients stay in the kernel's backlog), count, one log
                                    line a minute at most
    nothing more to accept          return to the loop (at most accepts_per_wakeup per wake-up)

A TLS port (brokerServicePortTls) is the same loop with an SSLContext: the handshake runs in
asyncio's SSL transport before the protocol sees a byte, and before each accepted connection the
ReloadingServerContext compares its files' mtimes (at most once per tlsCertRefreshCheckDurationSec),
so a renewed certificate is used by the next connection without a restart.

The caps are counted from accept to close of each connection (ConnectionLimits), so a connection
is refused before any object is built for it.

BrokerPorts is the pair of them a broker serves: the plain port (brokerServicePort) and the TLS
port (brokerServicePortTls) with its ReloadingServerContext, both counting against one
ConnectionLimits, and the service URLs LOOKUP answers with.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from velamq import _limits
from velamq._clock import Clock
from velamq._log_limit import RateLimitedLog
from velamq.broker._config import BrokerConfig
from velamq.security import ReloadingServerContext, SecurityError

log = logging.getLogger(__name__)

_RESOURCE_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))
listen_backlog = 1024


def fd_soft_limit() -> int:
    """This process's soft RLIMIT_NOFILE (what brokerMaxConnections=0 is derived from)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


@dataclass(slots=True)
class ConnectionLimits:
    """Open connections against brokerMaxConnections (0: none) and brokerMaxConnectionsPerIp."""

    max_total: int
    max_per_ip: int
    open: int = 0
    open_peak: int = 0
    per_ip: dict[str, int] = field(default_factory=dict)
    refused_max_total: int = 0
    refused_per_ip_total: int = 0

    def try_open(self, ip: str) -> str | None:
        """Count a new connection from `ip`; the name of the cap it would exceed, or None."""
        if 0 < self.max_total <= self.open:
            self.refused_max_total += 1
            return "brokerMaxConnections"
        from_ip = self.per_ip.get(ip, 0)
        if 0 < self.max_per_ip <= from_ip:
            self.refused_per_ip_total += 1
            return "brokerMaxConnectionsPerIp"
        self.open += 1
        self.open_peak = max(self.open_peak, self.open)
        self.per_ip[ip] = from_ip + 1
        return None

    def closed(self, ip: str) -> None:
        self.open -= 1
        left = self.per_ip.get(ip, 1) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)


class _Slot:
    """One admitted connection's place under the caps, given back exactly once."""

    __slots__ = ("_ip", "_limits")

    def __init__(self, limits: ConnectionLimits | None, ip: str) -> None:
        self._limits = limits
        self._ip = ip

    def release(self) -> None:
        if self._limits is not None:
            self._limits.closed(self._ip)
            self._limits = None


ProtocolFactory = Callable[[Callable[[], None]], asyncio.Protocol]


def listening_socket(host: str, port: int, backlog: int = listen_backlog) -> socket.socket:
    """A bound, listening TCP socket (port 0: the system picks one)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


class Listener:
    """Accepts connections on one TCP port and hands each to a protocol built by `factory`, which
    receives the callback that gives the connection's slot back (call it once it is closed)."""

    def __init__(
        self,
        factory: ProtocolFactory,
        limits: ConnectionLimits,
        clock: Clock,
        log_limit: RateLimitedLog,
        *,
        tls: ReloadingServerContext | None = None,
        handshake_timeout_s: float | None = None,
    ) -> None:
        """`tls`: serve TLS with that context (checked for renewed files before each accept);
        `handshake_timeout_s` bounds the TLS handshake."""
        self._factory = factory
        self._tls = tls
        self._handshake_timeout_s = handshake_timeout_s
        self.limits = limits
        self._clock = clock
        self._log = log_limit
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._paused: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.accept_errors_total = 0
        self.tls_handshake_failures_total = 0
        self.port = 0

    def start(self, host: str, port: int) -> int:
        """Bind, listen and start accepting; returns the bound port."""
        return self.start_on(listening_socket(host, port))

    def start_on(self, sock: socket.socket) -> int:
        """Start accepting on a listening socket (tests wrap one to play the kernel's refusals)."""
        loop = asyncio.get_running_loop()
        sock.setblocking(False)
        self._sock, self._loop = sock, loop
        self.port = int(sock.getsockname()[1])
        loop.add_reader(sock.fileno(), self._on_readable)
        return self.port

    def close(self) -> None:
        if self._paused is not None:
            self._paused.cancel()
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        for _ in range(_limits.accepts_per_wakeup):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRNOS:
                    self._pause_accepting(exc)
                    return
                # ECONNABORTED and the like: that one client is gone, the next may be fine.
                self.accept_errors_total += 1
                self._log.warning("accept-other", "accept() failed: %s", exc)
                continue
            self._admit(conn, str(address[0]) if isinstance(address, tuple) else str(address))

    def _admit(self, conn: socket.socket, ip: str) -> None:
        refused = self.limits.try_open(ip)
        if refused is not None:
            conn.close()
            self._log.warning(
                f"refused-{refused}",
                "refusing connections over %s (%d open, %d refused so far)",
                refused,
                self.limits.open,
                self.limits.refused_max_total + self.limits.refused_per_ip_total,
            )
            return
        slot = _Slot(self.limits, ip)
        conn.setblocking(False)
        assert self._loop is not None
        task = self._loop.create_task(self._serve(conn, slot, ip))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket, slot: _Slot, ip: str) -> None:
        assert self._loop is not None
        tls = None
        if self._tls is not None:
            try:
                self._tls.check()
            except SecurityError:
                pass  # logged by check(); the previous certificate stays in use
            tls = self._tls.context
        try:
            await self._loop.connect_accepted_socket(
                lambda: self._factory(slot.release), sock=conn, ssl=tls,
                ssl_handshake_timeout=self._handshake_timeout_s if tls is not None else None,
            )
        except Exception as exc:
            conn.close()
            slot.release()
            if tls is not None:
                # A client that does not trust us, or whose certificate we do not trust, or that
                # never finished the handshake: that client's business, one line a minute at most.
                self.tls_handshake_failures_total += 1
                self._log.info("tls-handshake", "TLS handshake with %s failed: %s", ip, exc)
            else:
                self._log.warning("transport-failed", "could not set up an accepted connection: %s", exc)

    def _pause_accepting(self, exc: OSError) -> None:
        self.accept_errors_total += 1
        if self._paused is not None and not self._paused.done():
            return
        self._log.warning(
            "accept-resources",
            "cannot accept connections (%s): pausing accept for %.1f s; %d open (see brokerMaxConnections)",
            exc.strerror,
            _limits.accept_retry_s,
            self.limits.open,
        )
        assert self._sock is not None and self._loop is not None
        self._loop.remove_reader(self._sock.fileno())
        self._paused = self._loop.create_task(self._resume_later())

    async def _resume_later(self) -> None:
        await self._clock.sleep(_limits.accept_retry_s)
        if self._sock is not None and self._loop is not None:
            self._loop.add_reader(self._sock.fileno(), self._on_readable)

    def metrics(self) -> dict[str, float]:
        p = "velamq_broker_connections_"
        return {
            p + "open": self.limits.open,
            p + "open_peak": self.limits.open_peak,
            p + "max": self.limits.max_total,
            p + "max_per_ip": self.limits.max_per_ip,
            p + "refused_max_total": self.limits.refused_max_total,
            p + "refused_per_ip_total": self.limits.refused_per_ip_total,
            "velamq_broker_accept_errors_total": self.accept_errors_total,
        }


@dataclass(frozen=True)
class ListenSockets:
    """Listening sockets made by someone else (the supervisor of several workers): this broker's
    own ports, whose URLs lookups hand out, and the shared service ports every worker accepts on."""

    own: socket.socket | None
    own_tls: socket.socket | None
    shared: socket.socket | None
    shared_tls: socket.socket | None


class BrokerPorts:
    """The plain and TLS ports of one broker: opened by `start`, closed by `close`. A port given as
    0 is chosen by the system; `port` and `port_tls` say which one it became (None: not served)."""

    def __init__(self, config: BrokerConfig, clock: Clock, log_limit: RateLimitedLog) -> None:
        self._config = config
        self._clock = clock
        self._log_limit = log_limit
        security = config.security
        self.tls: ReloadingServerContext | None = None
        if security.broker_port_tls is not None and security.tls is not None:
            self.tls = ReloadingServerContext(security.tls, clock)
        self.connection_limits = ConnectionLimits(
            config.max_connections or _limits.connections_max_for(fd_soft_limit()), config.max_connections_per_ip
        )
        self.port = config.broker_port
        self.port_tls = security.broker_port_tls
        self._listener: Listener | None = None
        self._listener_tls: Listener | None = None
        self._shared: list[Listener] = []

    @property
    def service_url(self) -> str:
        """pulsar:// of the plain port; pulsar+ssl:// when there is only the TLS port."""
        if self.port is None:
            return self.service_url_tls or ""
        return f"pulsar://{self._config.advertised_address}:{self.port}"

    @property
    def service_url_plain(self) -> str | None:
        return None if self.port is None else self.service_url

    @property
    def service_url_tls(self) -> str | None:
        if self.tls is None or self.port_tls is None:
            return None
        return f"pulsar+ssl://{self._config.advertised_address}:{self.port_tls}"

    def start(
        self, new_connection: ProtocolFactory, new_tls_connection: ProtocolFactory, sockets: ListenSockets | None = None
    ) -> None:
        """Listen on the configured ports (or on `sockets`); all count against the same caps."""
        if sockets is not None:
            self._start_on(new_connection, new_tls_connection, sockets)
            return
        config = self._config
        if config.broker_port is not None:
            self._listener = Listener(new_connection, self.connection_limits, self._clock, self._log_limit)
            self.port = self._listener.start(config.bind_address, config.broker_port)
        if self.tls is not None and self.port_tls is not None:
            self._listener_tls = Listener(
                new_tls_connection, self.connection_limits, self._clock, self._log_limit,
                tls=self.tls, handshake_timeout_s=config.handshake_timeout_s,
            )
            self.port_tls = self._listener_tls.start(config.bind_address, self.port_tls)

    def _start_on(self, new_connection: ProtocolFactory, new_tls: ProtocolFactory, sockets: ListenSockets) -> None:
        """A worker of several: its own ports give its URLs; the shared ones only take connections."""
        plain = [sockets.own, sockets.shared]
        tls = [sockets.own_tls, sockets.shared_tls] if self.tls is not None else [None, None]
        self.port = self.port_tls = None
        for i, sock in enumerate(plain):
            if sock is not None:
                listener = Listener(new_connection, self.connection_limits, self._clock, self._log_limit)
                port = listener.start_on(sock)
                if i == 0:
                    self._listener, self.port = listener, port
                else:
                    self._shared.append(listener)
        for i, sock in enumerate(tls):
            if sock is not None:
                listener = Listener(
                    new_tls, self.connection_limits, self._clock, self._log_limit,
                    tls=self.tls, handshake_timeout_s=self._config.handshake_timeout_s,
                )
                port = listener.start_on(sock)
                if i == 0:
                    self._listener_tls, self.port_tls = listener, port
                else:
                    self._shared.append(listener)

    def close(self) -> None:
        """Stop accepting (the open connections are the broker's to close)."""
        for listener in (self._listener, self._listener_tls, *self._shared):
            if listener is not None:
                listener.close()

    def metrics(self) -> dict[str, float]:
        """The listeners' figures: the shared caps once, their own counters added up."""
        listeners = [x for x in (self._listener, self._listener_tls, *self._shared) if x is not None]
        if not listeners:
            return {}
        limits = listeners[0].metrics()
        limits["velamq_broker_accept_errors_total"] = sum(x.accept_errors_total for x in listeners)
        limits["velamq_broker_tls_handshake_failures_total"] = sum(x.tls_handshake_failures_total for x in listeners)
        return limits
