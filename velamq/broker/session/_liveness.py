"""Whether a client connection is alive: the handshake deadline, then the keep-alive.

    until CONNECT    one timer: a connection that has not sent CONNECT within
                     connectionHandshakeTimeoutSeconds is closed (a client that opens a socket
                     and says nothing must not keep it, nor its descriptor)
    after CONNECT    every keepAliveIntervalSeconds: a client that sent nothing since the last
                     interval gets a PING; one that then stays silent a whole interval is closed

Both run on the broker's clock, so tests drive them with a ManualClock. One task per connection
at a time; `stop()` cancels it and drops every reference to the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from velamq._clock import Clock
from velamq._log_limit import RateLimitedLog


class Watched(Protocol):
    """What the liveness timers need of their connection."""

    @property
    def remote_address(self) -> str: ...

    @property
    def protocol_version(self) -> int: ...

    def close(self) -> None: ...


class Liveness:
    """The handshake deadline and the keep-alive of one connection (module docstring)."""

    def __init__(
        self,
        connection: Watched,
        clock: Clock,
        handshake_timeout_s: float,
        keepalive_interval_s: float,
        send_ping: Callable[[], None],
        log_limit: RateLimitedLog,
    ) -> None:
        self._connection: Watched | None = connection
        self._clock = clock
        self._handshake_timeout_s = handshake_timeout_s
        self._interval_s = keepalive_interval_s
        self._send_ping: Callable[[], None] | None = send_ping
        self._log = log_limit
        self.received_since_ping = True  # set by the connection on every read
        self._ping_outstanding = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._handshake_deadline())

    def connected(self) -> None:
        """CONNECT arrived: the deadline gives way to the keep-alive loop."""
        if self._task is not None:
            self._task.cancel()
        self._task = asyncio.get_running_loop().create_task(self._keepalive_loop())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._connection = None
        self._send_ping = None

    async def _handshake_deadline(self) -> None:
        await self._clock.sleep(self._handshake_timeout_s)
        connection = self._connection
        if connection is not None:
            self._log.info(
                "handshake-timeout", "closing connection %s: no CONNECT within %.0f s",
                connection.remote_address, self._handshake_timeout_s,
            )
            connection.close()

    async def _keepalive_loop(self) -> None:
        while self._connection is not None:
            await self._clock.sleep(self._interval_s)
            self._tick()

    def _tick(self) -> None:
        """Every interval: a client that sent nothing since the last PING and did not answer it is gone."""
        connection = self._connection
        if connection is None:
            return
        if self.received_since_ping:
            self.received_since_ping = False
            self._ping_outstanding = False
        elif self._ping_outstanding:
            self._log.info("keepalive", "closing connection %s: no answer to keep-alive", connection.remote_address)
            connection.close()
            return
        if connection.protocol_version >= 1 and self._send_ping is not None:
            self._ping_outstanding = True
            self._send_ping()
