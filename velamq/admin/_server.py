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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from velamq import _limits
from velamq._errors import (
    AlreadyExistsError,
    InvalidTopicNameError,
    NotFoundError,
    PreconditionFailedError,
    VelamqError,
)
from velamq.admin import (
    _routes_messages,
    _routes_namespace_ops,
    _routes_namespaces,
    _routes_policies,
    _routes_schemas,
    _routes_subscriptions,
    _routes_tenants,
    _routes_topic_ops,
    _routes_topics,
    _routes_web,
)
from velamq.admin._backend import BrokerBackend
from velamq.admin._http import HttpError, Request, Response, read_request, stream_limit_bytes, write_response
from velamq.admin._router import Call, Router

log = logging.getLogger("velamq.admin")

connections_max: Final = 256
# How long close() lets in-flight requests finish before cancelling their connections.
close_grace_s: Final = 1.0


def build_router() -> Router:
    router = Router()
    for module in (
        _routes_tenants, _routes_namespaces, _routes_policies, _routes_topics, _routes_topic_ops,
        _routes_subscriptions, _routes_schemas, _routes_web, _routes_messages, _routes_namespace_ops,
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
    if isinstance(exc, VelamqError):
        return Response.error(500, str(exc))
    return Response.error(500, "Internal server error")


class AdminServer:
    """The admin tier's HTTP listener: Pulsar's admin REST API, HTTP lookup, /metrics and the
    console, over one BrokerBackend. It serves requests concurrently but acts on the broker only
    through the backend, and turns every error into an HTTP status at one place (error_response)."""

    def __init__(
        self,
        backend: BrokerBackend,
        host: str,
        port: int,
        *,
        advertised_address: str | None = None,
        timeout_s: float = _limits.admin_timeout_s,
        max_connections: int = connections_max,
    ) -> None:
        self._backend = backend
        self._host = host
        self._advertised_address = advertised_address or host
        self._requested_port = port
        self._timeout_s = timeout_s
        self._max_connections = max_connections
        self._router = build_router()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The port actually bound (port 0 asks the OS for a free one)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("admin server is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def web_service_url(self) -> str:
        """"http://advertised-address:port" of this server, as lookups and the console show it."""
        return f"http://{self._advertised_address}:{self.port}"

    @property
    def connections(self) -> int:
        """Connections being served right now."""
        return len(self._connections)

    @property
    def router(self) -> Router:
        return self._router

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("admin server already started")
        self._server = await asyncio.start_server(
            self._on_connection, self._host, self._requested_port, limit=stream_limit_bytes
        )

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()  # stop accepting
        pending = set(self._connections)
        if pending:
            # Idle keep-alive connections would wait for their idle timeout; give requests in
            # flight a moment to finish, then cancel what is left.
            _, still = await asyncio.wait(pending, timeout=close_grace_s)
            for task in still:
                task.cancel()
            await asyncio.gather(*still, return_exceptions=True)
        with contextlib.suppress(Exception):
            await server.wait_closed()

    # --------------------------------------------------------------------- connections

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            if len(self._connections) > self._max_connections:
                await write_response(writer, Response.error(503, "Too many connections"), keep_alive=False)
                return
            await self._serve(reader, writer)
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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                request = await read_request(reader, writer)
            except HttpError as exc:
                await write_response(writer, error_response(exc), keep_alive=False)
                return
            if request is None:
                return
            response = await self._respond(request)
            keep_alive = request.keep_alive and not response.close and self._server is not None
            await write_response(writer, response, head_only=request.method == "HEAD", keep_alive=keep_alive)
            if not keep_alive:
                return

    async def _respond(self, request: Request) -> Response:
        try:
            handler, params = self._router.resolve(request.method, request.segments)
            call = Call(self._backend, request, params, self.web_service_url)
            return await asyncio.wait_for(handler(call), self._timeout_s)
        except TimeoutError:
            log.warning("admin request timed out after %.0f s: %s %s", self._timeout_s, request.method, request.path)
            return Response.error(503, f"Request timed out after {self._timeout_s:.0f} s")
        except Exception as exc:
            if not isinstance(exc, HttpError | VelamqError):
                log.exception("admin handler failed: %s %s", request.method, request.path)
            return error_response(exc)
