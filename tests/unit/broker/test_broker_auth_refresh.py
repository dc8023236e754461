"""Credentials refresh on a ManualClock: ConnectionAuth's state machine alone (a real broker
challenging a raw client: tests/integration/test_broker_security_refresh.py)."""

from __future__ import annotations

import pytest

from velamq._clock import ManualClock
from velamq.broker.session._auth import ConnectionAuth, RefreshStep
from velamq.protocol import pb
from velamq.security import (
    REFRESH_CHALLENGE,
    AuthenticationFailedError,
    AuthenticationProviderToken,
    AuthenticationService,
    TokenValidator,
    create_secret_key,
    create_token,
)

T = pb.BaseCommand
KEY = create_secret_key()


def _service(clock: ManualClock) -> AuthenticationService:
    return AuthenticationService([AuthenticationProviderToken(TokenValidator(KEY, clock=clock))])


def _connect(token: str, refresh: bool = True) -> pb.CommandConnect:
    connect = pb.CommandConnect(client_version="t", auth_method_name="token", auth_data=token.encode())
    connect.feature_flags.supports_auth_refresh = refresh
    return connect


def _response(token: str) -> pb.CommandAuthResponse:
    response = pb.CommandAuthResponse()
    response.response.auth_method_name = "token"
    response.response.auth_data = token.encode()
    return response


def test_expired_credentials_are_challenged_once_then_closed_if_unanswered() -> None:
    clock = ManualClock()
    now_s = clock.now_ms() // 1000
    auth = ConnectionAuth(_service(clock), None)
    auth.connect(_connect(create_token(KEY, "app", expires_at_s=now_s + 10)))
    assert auth.role == "app"
    assert auth.refresh_step(clock.now_ms()) is RefreshStep.NOTHING
    clock.advance(10)
    assert auth.refresh_step(clock.now_ms()) is RefreshStep.CHALLENGE
    challenge = auth.challenge().authChallenge.challenge
    assert challenge.auth_data == REFRESH_CHALLENGE and challenge.auth_method_name == "token"
    clock.advance(60)
    assert auth.refresh_step(clock.now_ms()) is RefreshStep.CLOSE_UNANSWERED


def test_an_answer_with_fresh_credentials_of_the_same_role_ends_the_challenge() -> None:
    clock = ManualClock()
    now_s = clock.now_ms() // 1000
    auth = ConnectionAuth(_service(clock), None)
    auth.connect(_connect(create_token(KEY, "app", expires_at_s=now_s + 10)))
    clock.advance(10)
    assert auth.refresh_step(clock.now_ms()) is RefreshStep.CHALLENGE
    auth.respond(_response(create_token(KEY, "app", expires_at_s=now_s + 100)))
    assert not auth.challenge_pending
    clock.advance(60)
    assert auth.refresh_step(clock.now_ms()) is RefreshStep.NOTHING
    with pytest.raises(AuthenticationFailedError, match="different from the original role"):
        auth.respond(_response(create_token(KEY, "admin", expires_at_s=now_s + 100)))
    with pytest.raises(AuthenticationFailedError):
        auth.respond(_response(create_token(KEY, "app", expires_at_s=now_s + 20)))  # expired already


def test_a_client_that_cannot_refresh_is_closed_when_its_credentials_expire() -> None:
    clock = ManualClock()
    auth = ConnectionAuth(_service(clock), None)
    auth.connect(_connect(create_token(KEY, "app", expires_at_s=clock.now_ms() // 1000 + 1), refresh=False))
    clock.advance(1)
    assert auth.refresh_step(clock.now_ms()) is RefreshStep.CLOSE_UNSUPPORTED


def test_credentials_without_expiry_and_disabled_authentication_are_never_challenged() -> None:
    clock = ManualClock()
    auth = ConnectionAuth(_service(clock), None)
    auth.connect(_connect(create_token(KEY, "app")))
    disabled = ConnectionAuth(None, None)
    disabled.connect(_connect("anything"))
    clock.advance(10**6)
    assert auth.refresh_step(clock.now_ms()) is RefreshStep.NOTHING
    assert disabled.refresh_step(clock.now_ms()) is RefreshStep.NOTHING and disabled.role is None
