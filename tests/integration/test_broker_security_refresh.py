"""Credentials refresh on a live connection: a real broker on a ManualClock whose AuthRefresher
challenges a raw client, accepts a fresh token of the same role, and closes on silence or on
another role."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from security_helpers import RawConnection, SecureSetup, secure_setup
from wait_helpers import until, wait_until

from velamq._clock import ManualClock
from velamq.protocol import pb
from velamq.security import REFRESH_CHALLENGE
from velamq.testing._broker_thread import BrokerThread, run_broker_in_thread

T = pb.BaseCommand
REFRESH_S = 5


@pytest.fixture
def setup(tmp_path: Path) -> SecureSetup:
    return secure_setup(tmp_path / "conf", authenticationRefreshCheckSeconds=str(REFRESH_S))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(now_ms=1_800_000_000_000)


@pytest.fixture
def broker(setup: SecureSetup, clock: ManualClock, tmp_path: Path) -> Iterator[BrokerThread]:
    with run_broker_in_thread(tmp_path / "data", clock, config=setup.config()) as b:
        yield b


def advance(broker: BrokerThread, clock: ManualClock, seconds: float) -> None:
    """Move the clock on the broker's loop and wait until the refresher has run its check."""

    async def step() -> None:
        refresher = broker.server.broker.auth_refresher
        before = refresher.checks_total
        clock.advance(seconds)
        await until(lambda: refresher.checks_total != before, "the refresher's check")

    broker.run(step())


def test_the_broker_challenges_expired_credentials_and_closes_on_silence(
    setup: SecureSetup, clock: ManualClock, broker: BrokerThread
) -> None:
    start_s = clock.now_ms() // 1000
    conn = RawConnection(broker.server.broker_port)
    try:
        connected = conn.connect("token", setup.token("superUser", expires_at_s=start_s + 3).encode())
        assert connected.type == T.CONNECTED and connected.connected.feature_flags.supports_auth_refresh
        advance(broker, clock, REFRESH_S)
        challenge = conn.next()
        assert challenge.type == T.AUTH_CHALLENGE
        assert challenge.authChallenge.challenge.auth_data == REFRESH_CHALLENGE
        conn.send(T.AUTH_RESPONSE, "authResponse",
                  response={"auth_method_name": "token",
                            "auth_data": setup.token("superUser", expires_at_s=start_s + 13).encode()})
        assert conn.lookup("persistent://public/default/refresh", 1).response == pb.CommandLookupTopicResponse.Connect
        advance(broker, clock, REFRESH_S)  # +10 s: the new token is still good, nothing is sent
        assert conn.lookup("persistent://public/default/refresh", 2).response == pb.CommandLookupTopicResponse.Connect
        advance(broker, clock, REFRESH_S)  # +15 s: expired again
        assert conn.next().type == T.AUTH_CHALLENGE
        advance(broker, clock, REFRESH_S)  # unanswered at the next check
        assert conn.closed_by_broker()
    finally:
        conn.close()


def test_an_answer_with_another_role_is_refused_and_closes(
    setup: SecureSetup, clock: ManualClock, broker: BrokerThread
) -> None:
    start_s = clock.now_ms() // 1000
    conn = RawConnection(broker.server.broker_port)
    try:
        assert conn.connect("token", setup.token("app", expires_at_s=start_s + 1).encode()).type == T.CONNECTED
        advance(broker, clock, REFRESH_S)
        assert conn.next().type == T.AUTH_CHALLENGE
        conn.send(T.AUTH_RESPONSE, "authResponse",
                  response={"auth_method_name": "token", "auth_data": setup.token("superUser").encode()})
        refused = conn.next()
        assert refused.type == T.ERROR and refused.error.error == pb.AuthenticationError
        assert conn.closed_by_broker()
    finally:
        conn.close()


def test_the_official_client_answers_the_challenge_with_its_token_supplier(
    setup: SecureSetup, clock: ManualClock, broker: BrokerThread
) -> None:
    start_s = clock.now_ms() // 1000

    def supplier() -> str:
        # Before the clock moves: a token that expires 3 s in; once it has, one good for an hour.
        short = clock.now_ms() // 1000 < start_s + REFRESH_S
        return setup.token("superUser", expires_at_s=start_s + (3 if short else 3600))

    client = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(supplier))
    try:
        producer = client.create_producer("persistent://public/default/official-refresh")
        counters = broker.server.broker.auth_counters
        advance(broker, clock, REFRESH_S)
        challenged = counters.challenges_total
        assert challenged >= 1  # one per connection the client holds
        wait_until(lambda: counters.refreshed_total == challenged or counters.refused_total > 0,
                   "every challenged connection refreshed, or one refused")
        assert counters.refreshed_total == challenged and counters.refused_total == 0
        advance(broker, clock, REFRESH_S)  # the refreshed tokens hold: no new challenge
        assert counters.challenges_total == challenged
        producer.send(b"still connected")
    finally:
        client.close()

