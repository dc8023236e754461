"""AdminServer: the HTTP listener of the admin API, metrics and console (tier 3).

One task per connection reads requests one after another (keep-alive; pipelined requests are
answered in order), resolves each through the route table and writes the response. This module is
the one boundary where errors become HTTP statuses:

    HttpError                                   its own status
    NotFoundError                               404
    AlreadyExistsError                          409
    PreconditionFailedError, InvalidTopicName   412
    handler over admin_timeout_s                503 (the handler is cancelled)
    anything else                               500, logged

A malformed request gets its 4xx and closes its own connection; nothing here can stop the server.
At most `connections_max` connections are served at once; the next one gets 503 and is closed.

Security (docs/security.md): with `security.web_port_tls` set the server also listens for https
(Pulsar's webServicePortTls) with a ReloadingServerContext, checked for new certificate files as
connections arrive; `port=None` leaves the plain port closed. Before its handler runs, every request
is authenticated (_auth_http.py: Authorization header or the TLS client certificate) and authorized
for its route (_access.py): 401 and 403 with Pulsar's {"reason": ...} bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from dataclasses import dataclass
from typing import Any, Final

from velamq import _limits
from velamq._errors import (
    AlreadyExistsError,
    InvalidTopicNameError,
    NotFoundError,
    PreconditionFailedError,
    VelamqError,
)
from velamq.admin import (
    _routes_brokers,
    _routes_messages,
    _routes_namespace_ops,
    _routes_namespaces,
    _routes_offload,
    _routes_offload_policies,
    _routes_permissions,
    _routes_policies,
    _routes_replication,
    _routes_schemas,
    _routes_subscriptions,
    _routes_tenants,
    _routes_terminate,
    _routes_topic_ops,
    _routes_topics,
    _routes_web,
)
from velamq.admin._access import Need, access_of, check
from velamq.admin._auth_http import AdminSecurity, Caller
from velamq.admin._backend import BrokerBackend
from velamq.admin._http import HttpError, Request, Response, read_request, stream_limit_bytes, write_response
from velamq.admin._replication_control import ReplicationControl
from velamq.admin._router import Call, Router
from velamq.admin._routing import peer_ssl_context
from velamq.admin._worker_routing import WorkerRouting
from velamq.security import (
    AccessDeniedError,
    AuthenticationFailedError,
    AuthenticationService,
    AuthorizationModel,
    InvalidGrantError,
    ReloadingServerContext,
    SecurityConfigError,
    SecuritySettings,
)

log = logging.getLogger("velamq.admin")

connections_max: Final = 256
# How long close() lets in-flight requests finish before cancelling their connections.
close_grace_s: Final = 1.0
# A TLS client that has not finished its handshake by then is dropped (it holds a socket meanwhile).
tls_handshake_timeout_s: Final = 10.0


def build_router() -> Router:
    router = Router()
    for module in (
        _routes_brokers, _routes_tenants, _routes_namespaces, _routes_policies, _routes_topics, _routes_topic_ops,
        _routes_subscriptions, _routes_schemas, _routes_web, _routes_messages, _routes_namespace_ops,
        _routes_permissions, _routes_terminate, _routes_offload, _routes_offload_policies, _routes_replication,
    ):
        module.register(router)
    return router


def error_response(exc: BaseException) -> Response:
    """The one translation from velamq's error tree (and HttpError) to HTTP (WC-4)."""
    if isinstance(exc, HttpError):
        return Response.error(exc.status, exc.reason, close=exc.close, headers=exc.headers)
    if isinstance(exc, NotFoundError):
        return Response.error(404, str(exc))
    if isinstance(exc, AlreadyExistsError):
        return Response.error(409, str(exc))
    if isinstance(exc, PreconditionFailedError | InvalidTopicNameError):
        return Response.error(412, str(exc))
    if isinstance(exc, InvalidGrantError | AuthenticationFailedError | AccessDeniedError):
        return Response.error(exc.http_status, str(exc))
    if isinstance(exc, VelamqError):
        return Response.error(500, str(exc))
    return Response.error(500, "Internal server error")


@dataclass(frozen=True)
class AdminSockets:
    """Listening sockets made by the supervisor of several workers: this worker's own admin ports
    (its web URLs, where 307 redirects point) and the shared ones every worker accepts on."""

    own: socket.socket | None
    own_tls: socket.socket | None
    shared: socket.socket | None
    shared_tls: socket.socket | None


class AdminServer:
    """The admin tier's HTTP listener: Pulsar's admin REST API, HTTP lookup, /metrics and the
    console, over one BrokerBackend, on a plain port, a TLS port or both. It serves requests
    concurrently but acts on the broker only through the backend, checks every request's
    credentials and rights before its handler, and turns every error into an HTTP status at one
    place (error_response).

    `authentication` None: nobody is asked for credentials. `authorization`: the model shared with
    the broker, updated by the routes that change tenants and grants; enforced when
    `security.authorization_enabled`. `security` also gives webServicePortTls with its TLS files and
    authenticateMetricsEndpoint."""

    def __init__(
        self,
        backend: BrokerBackend,
        host: str,
        port: int | None,
        *,
        advertised_address: str | None = None,
        timeout_s: float = _limits.admin_timeout_s,
        max_connections: int | None = None,
        authentication: AuthenticationService | None = None,
        authorization: AuthorizationModel | None = None,
        security: SecuritySettings | None = None,
        replication: ReplicationControl | None = None,
        routing: WorkerRouting | None = None,
        sockets: AdminSockets | None = None,
    ) -> None:
        self._sockets = sockets  # a worker's, made by its supervisor: `port` and `host` unused
        self._shared_servers: list[asyncio.Server] = []
        self._backend = backend
        self._replication = replication
        self._routing = routing
        self._peer_ssl = peer_ssl_context(security) if routing is not None else None
        self._host = host
        self._advertised_address = advertised_address or host
        self._requested_port = port
        self._timeout_s = timeout_s
        self._max_connections = connections_max if max_connections is None else max_connections
        self._router = build_router()
        self._security = AdminSecurity(authentication, authorization, security)
        self._tls_port_requested = security.web_port_tls if security is not None and security.tls else None
        if port is None and self._tls_port_requested is None:
            raise SecurityConfigError("webServicePort", "neither webServicePort nor webServicePortTls is set")
        self._tls: ReloadingServerContext | None = None
        self._server: asyncio.Server | None = None
        self._tls_server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._bound_ports: dict[asyncio.Server, int] = {}

    def _bound_port(self, server: asyncio.Server | None, what: str) -> int:
        if server is None:
            raise RuntimeError(f"admin server has no {what} listener")
        # Asked for every request (the Call's URLs): the socket is asked once per server.
        port = self._bound_ports.get(server)
        if port is None:
            if not server.sockets:
                raise RuntimeError(f"admin server has no {what} listener")
            port = self._bound_ports[server] = int(server.sockets[0].getsockname()[1])
        return port

    @property
    def port(self) -> int:
        """The plain port actually bound (port 0 asks the OS for a free one)."""
        return self._bound_port(self._server, "plain")

    @property
    def tls_port(self) -> int:
        """The https port actually bound."""
        return self._bound_port(self._tls_server, "TLS")

    @property
    def web_service_url(self) -> str:
        """"http://advertised-address:port" of this server, as lookups and the console show it
        (the https URL when the server has no plain port)."""
        if self._requested_port is None:
            return f"https://{self._advertised_address}:{self.tls_port}"
        return f"http://{self._advertised_address}:{self.port}"

    @property
    def web_service_url_tls(self) -> str | None:
        """"https://advertised-address:port", or None without a TLS port."""
        if self._tls_server is None:
            return None
        return f"https://{self._advertised_address}:{self.tls_port}"

    @property
    def tls_context(self) -> ReloadingServerContext | None:
        """The https port's certificate holder (tests force a reload through it)."""
        return self._tls

    @property
    def connections(self) -> int:
        """Connections being served right now."""
        return len(self._connections)

    @property
    def router(self) -> Router:
        return self._router

    async def start(self) -> None:
        if self._server is not None or self._tls_server is not None:
            raise RuntimeError("admin server already started")
        if self._sockets is not None:
            await self._start_on(self._sockets)
            return
        settings = self._security.settings
        if self._tls_port_requested is not None and settings is not None and settings.tls is not None:
            self._tls = ReloadingServerContext(settings.tls)
            self._tls_server = await asyncio.start_server(
                functools.partial(self._on_connection, tls=True), self._host, self._tls_port_requested,
                limit=stream_limit_bytes, ssl=self._tls.context, ssl_handshake_timeout=tls_handshake_timeout_s,
            )
        if self._requested_port is not None:
            try:
                self._server = await asyncio.start_server(
                    functools.partial(self._on_connection, tls=False), self._host, self._requested_port,
                    limit=stream_limit_bytes,
                )
            except BaseException:
                await self.close()
                raise

    async def _start_on(self, sockets: AdminSockets) -> None:
        """A worker of several: its own sockets give its URLs; the shared ones only take requests."""
        plain = functools.partial(self._on_connection, tls=False)
        if sockets.own is not None:
            self._server = await asyncio.start_server(plain, sock=sockets.own, limit=stream_limit_bytes)
        if sockets.shared is not None:
            self._shared_servers.append(
                await asyncio.start_server(plain, sock=sockets.shared, limit=stream_limit_bytes)
            )
        settings = self._security.settings
        if settings is None or settings.tls is None:
            return
        self._tls = ReloadingServerContext(settings.tls)
        secure = functools.partial(self._on_connection, tls=True)
        options: dict[str, Any] = {
            "limit": stream_limit_bytes, "ssl": self._tls.context, "ssl_handshake_timeout": tls_handshake_timeout_s
        }
        if sockets.own_tls is not None:
            self._tls_server = await asyncio.start_server(secure, sock=sockets.own_tls, **options)
        if sockets.shared_tls is not None:
            self._shared_servers.append(await asyncio.start_server(secure, sock=sockets.shared_tls, **options))

    async def close(self) -> None:
        servers = [s for s in (self._server, self._tls_server, *self._shared_servers) if s is not None]
        self._server = self._tls_server = None
        self._bound_ports.clear()
        self._shared_servers = []
        if not servers:
            return
        for server in servers:
            server.close()  # stop accepting
        pending = set(self._connections)
        if pending:
            # Idle keep-alive connections would wait for their idle timeout; give requests in
            # flight a moment to finish, then cancel what is left.
            _, still = await asyncio.wait(pending, timeout=close_grace_s)
            for task in still:
                task.cancel()
            await asyncio.gather(*still, return_exceptions=True)
        for server in servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()

    # --------------------------------------------------------------------- connections

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, tls: bool) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            if len(self._connections) > self._max_connections:
                await write_response(writer, Response.error(503, "Too many connections"), keep_alive=False)
                return
            peer_cert = self._tls_connection(writer) if tls else None
            await self._serve(reader, writer, peer_cert, tls)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the peer went away or stopped reading: nothing to answer
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("admin connection failed")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _tls_connection(self, writer: asyncio.StreamWriter) -> bytes | None:
        """The client certificate (DER) of a TLS connection, if it sent one; and, as connections
        arrive, a look at whether the certificate files changed (the next handshake uses them)."""
        if self._tls is not None:
            with contextlib.suppress(SecurityConfigError):  # logged; the previous certificate stays
                self._tls.check()
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is None:
            return None
        cert = ssl_object.getpeercert(binary_form=True)
        return bytes(cert) if cert else None

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer_cert: bytes | None, tls: bool = False
    ) -> None:
        while True:
            try:
                request = await read_request(reader, writer)
            except HttpError as exc:
                await write_response(writer, error_response(exc), keep_alive=False)
                return
            if request is None:
                return
            response = await self._respond(request, peer_cert, tls)
            serving = self._server is not None or self._tls_server is not None
            keep_alive = request.keep_alive and not response.close and serving
            await write_response(writer, response, head_only=request.method == "HEAD", keep_alive=keep_alive)
            if not keep_alive:
                return

    def _caller(self, need: Need, request: Request, peer_cert: bytes | None) -> Caller:
        security = self._security
        if need is Need.NOTHING and not security.authenticate_metrics:
            return security.open_caller()
        return security.authenticate(request, peer_cert, console=need is Need.CONSOLE)

    async def _respond(self, request: Request, peer_cert: bytes | None = None, tls: bool = False) -> Response:
        try:
            route, params = self._router.resolve_route(request.method, request.segments)
            access = access_of(request.method, route.pattern, params)
            caller = self._caller(access.need, request, peer_cert)
            check(access, caller, params)
            call = Call(
                self._backend, request, params, self.web_service_url, self.web_service_url_tls, caller, self._security,
                self._replication, self._routing, tls, self._peer_ssl,
            )
            async with asyncio.timeout(self._timeout_s):  # in this task: no task per request
                return await route.handler(call)
        except TimeoutError:
            log.warning("admin request timed out after %.0f s: %s %s", self._timeout_s, request.method, request.path)
            return Response.error(503, f"Request timed out after {self._timeout_s:.0f} s")
        except Exception as exc:
            if not isinstance(exc, HttpError | VelamqError):
                log.exception("admin handler failed: %s %s", request.method, request.path)
            return error_response(exc)
