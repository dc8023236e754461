"""Who a client connection is: CONNECT's credentials, then their refresh (Pulsar's ServerCnx rules).

    CONNECT{auth_method_name, auth_data} + the TLS peer certificate
        authentication disabled        role None, nothing checked
        the provider accepts           role kept on the connection (ConnectionAuth.role)
        no provider for the method     anonymousUserRole if set, else refused
        refused                        ERROR(AuthenticationError, "Unable to authenticate"), close

Refresh, every authenticationRefreshCheckSeconds (AuthRefresher, one task for the broker, on the
broker's clock):

    credentials not expired              nothing
    expired, no challenge outstanding    AUTH_CHALLENGE{PulsarAuthRefresh} if the client said it
                                         supports_auth_refresh, else close
    expired, challenge still unanswered  close
    AUTH_RESPONSE                        same method, valid, same role: new expiry, challenge
                                         answered; else ERROR(AuthenticationError) and close

The reply to a refused client says no more than Pulsar's does ("Unable to authenticate"); the
reason goes to the broker's log, and never the credentials themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Final, Protocol

from velamq._clock import Clock
from velamq.protocol import pb
from velamq.security import REFRESH_CHALLENGE, AuthenticationFailedError, AuthenticationService, AuthResult

# What a refused client is told (ServerCnx's message); the reason stays in the log.
REFUSED_MESSAGE: Final = "Unable to authenticate"
# CommandError's request_id when the refusal answers no request (ServerCnx: newError(-1, ...)).
NO_REQUEST_ID: Final = (1 << 64) - 1

T = pb.BaseCommand


@dataclass(slots=True)
class AuthCounters:
    """The broker's authentication figures (/metrics): refusals, challenges, refreshes."""

    refused_total: int = 0
    challenges_total: int = 0
    refreshed_total: int = 0

    def metrics(self) -> dict[str, float]:
        p = "velamq_broker_authentication_"
        return {
            p + "refused_total": self.refused_total,
            p + "challenges_total": self.challenges_total,
            p + "refreshed_total": self.refreshed_total,
        }


class RefreshStep(Enum):
    NOTHING = "nothing"
    CHALLENGE = "challenge"
    CLOSE_UNANSWERED = "the client did not answer the authentication challenge in time"
    CLOSE_UNSUPPORTED = "the client's credentials expired and it does not support refreshing them"


class ConnectionAuth:
    """The authentication state of one connection: its role and credentials' expiry, and whether a
    refresh challenge is outstanding. Pure state: the connection sends and closes."""

    __slots__ = ("_service", "challenge_pending", "peer_cert_der", "result", "supports_refresh")

    def __init__(self, service: AuthenticationService | None, peer_cert_der: bytes | None) -> None:
        self._service = service
        self.peer_cert_der = peer_cert_der
        self.result: AuthResult | None = None
        self.challenge_pending = False
        self.supports_refresh = False

    @property
    def enabled(self) -> bool:
        return self._service is not None

    @property
    def role(self) -> str | None:
        return None if self.result is None else self.result.role

    def connect(self, connect: pb.CommandConnect) -> None:
        """Authenticate CONNECT; AuthenticationFailedError if refused."""
        if self._service is None:
            return
        self.supports_refresh = connect.feature_flags.supports_auth_refresh
        method = connect.auth_method_name if connect.HasField("auth_method_name") else None
        self.result = self._service.authenticate_connect(method, connect.auth_data, self.peer_cert_der)

    def refresh_step(self, now_ms: int) -> RefreshStep:
        """What the periodic check does to this connection now (see the module docstring)."""
        if self._service is None or self.result is None or not self.result.expired(now_ms):
            return RefreshStep.NOTHING
        if self.challenge_pending:
            return RefreshStep.CLOSE_UNANSWERED
        if not self.supports_refresh:
            return RefreshStep.CLOSE_UNSUPPORTED
        self.challenge_pending = True
        return RefreshStep.CHALLENGE

    def challenge(self) -> pb.BaseCommand:
        command = pb.BaseCommand(type=T.AUTH_CHALLENGE)
        challenge = command.authChallenge
        challenge.challenge.auth_method_name = self.result.method if self.result is not None else ""
        challenge.challenge.auth_data = REFRESH_CHALLENGE
        return command

    def respond(self, response: pb.CommandAuthResponse) -> None:
        """An AUTH_RESPONSE: the refreshed credentials, or AuthenticationFailedError."""
        if self._service is None:
            return
        if self.result is None:
            raise AuthenticationFailedError("", "AUTH_RESPONSE on a connection that is not authenticated")
        data = response.response
        method = data.auth_method_name if data.HasField("auth_method_name") else None
        self.result = self._service.authenticate_refresh(self.result, method, data.auth_data, self.peer_cert_der)
        self.challenge_pending = False


def refused_reply() -> pb.BaseCommand:
    """ERROR(AuthenticationError) answering no request: the client closes on it."""
    command = pb.BaseCommand(type=T.ERROR)
    command.error.request_id = NO_REQUEST_ID
    command.error.error = pb.AuthenticationError
    command.error.message = REFUSED_MESSAGE
    return command


class Refreshable(Protocol):
    def refresh_auth(self, now_ms: int) -> None:
        """Challenge or close the connection if its credentials expired (ConnectionAuth.refresh_step)."""
        ...


class AuthRefresher:
    """The periodic credentials check over every connection: one task, on the broker's clock."""

    def __init__(self, clock: Clock, interval_s: float, connections: Callable[[], Iterable[Refreshable]]) -> None:
        self._clock = clock
        self._interval_s = interval_s
        self._connections = connections
        self._task: asyncio.Task[None] | None = None
        self.checks_total = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._clock.sleep(self._interval_s)
            self.check()

    def check(self) -> None:
        now_ms = self._clock.now_ms()
        self.checks_total += 1
        for connection in list(self._connections()):
            connection.refresh_auth(now_ms)
