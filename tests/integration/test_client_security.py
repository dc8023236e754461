"""velamq's client against a secured broker (in-process, real sockets, real TLS with certificates
made for the test, tokens signed with the broker's key, an htpasswd file): pulsar+ssl:// with a
token, basic credentials and a client certificate; refused credentials and untrusted certificates
failing at once with velamq's errors; AuthorizationError on PRODUCER / SUBSCRIBE; a token supplier
asked again when the broker challenges an expired token on a live connection; and the official
client reading what velamq's wrote (and the other way) on the same secured broker."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from security_helpers import PASSWORD, SecureSetup, grant, secure_setup, secured_broker, tls_port
from wait_helpers import until

from velamq.cli._main import main
from velamq.client import (
    AdminError,
    AsyncClient,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
    AuthorizationError,
    Client,
    ConnectAuthenticationError,
    ConnectionSecurity,
    CredentialsError,
    TlsHandshakeError,
)
from velamq.security import create_secret_key, create_token
from velamq.spark._admin import ConnectorAdmin, parse_topic
from velamq.spark._options import parse_source
from velamq.testing._broker_thread import BrokerThread
from velamq.testing._certs import make_test_pki

receive_timeout_ms = 20_000
wait_s = 30.0


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    # A refresh check every second: an expired token is challenged soon after it expires.
    return secure_setup(tmp_path_factory.mktemp("client-security"), authenticationRefreshCheckSeconds="1",
                        webServicePortTls="0")


@pytest.fixture(scope="module")
def broker(setup: SecureSetup) -> Iterator[BrokerThread]:
    with secured_broker(setup) as b:
        yield b


def tls_url(broker: BrokerThread) -> str:
    return f"pulsar+ssl://localhost:{tls_port(broker)}"


def unique(name: str) -> str:
    return f"persistent://public/default/{name}-{time.time_ns()}"


def tls_options(setup: SecureSetup, **more: Any) -> dict[str, Any]:
    return {"tls_trust_certs_file_path": str(setup.pki.ca_cert), "operation_timeout_s": 30.0, **more}


async def _round_trip(client: AsyncClient, topic: str, payload: bytes) -> bytes:
    consumer = await client.subscribe(topic, "sub", initial_position="earliest")
    producer = await client.create_producer(topic)
    await producer.send(payload)
    message = await asyncio.wait_for(consumer.receive(), wait_s)
    await consumer.acknowledge(message)
    return message.data()


def test_produce_and_consume_over_tls_with_a_token(setup: SecureSetup, broker: BrokerThread) -> None:
    async def run() -> bytes:
        options = tls_options(setup, authentication=AuthenticationToken(setup.token("superUser")))
        async with AsyncClient(tls_url(broker), **options) as client:
            return await _round_trip(client, unique("tls-token"), b"over tls")

    assert asyncio.run(run()) == b"over tls"


def test_blocking_client_with_basic_credentials_and_hostname_verification(
    setup: SecureSetup, broker: BrokerThread
) -> None:
    topic = unique("tls-basic")
    with Client(tls_url(broker), **tls_options(setup, tls_validate_hostname=True,
                                                  authentication=AuthenticationBasic("superUser", PASSWORD))) as client:
        consumer = client.subscribe(topic, "sub", initial_position="earliest")
        client.create_producer(topic).send(b"basic")
        message = consumer.receive(timeout_ms=receive_timeout_ms)
        assert message.data() == b"basic"


def test_mutual_tls_role_from_the_client_certificate(setup: SecureSetup, broker: BrokerThread) -> None:
    cert, key = setup.pki.client("superUser")

    async def run() -> bytes:
        options = tls_options(setup, authentication=AuthenticationTLS(cert, key))
        async with AsyncClient(tls_url(broker), **options) as client:
            return await _round_trip(client, unique("tls-cert"), b"cn")

    assert asyncio.run(run()) == b"cn"


@pytest.mark.parametrize("credentials", ["wrong token", "other key", "wrong password", "expired"])
def test_refused_credentials_fail_at_once_with_a_clear_error(
    setup: SecureSetup, broker: BrokerThread, credentials: str
) -> None:
    authentication = {
        "wrong token": AuthenticationToken("not-a-jwt"),
        "other key": AuthenticationToken(create_token(create_secret_key(), "superUser")),
        "wrong password": AuthenticationBasic("superUser", "not the password"),
        "expired": AuthenticationToken(setup.token("superUser", expires_at_s=int(time.time()) - 60)),
    }[credentials]

    async def run() -> None:
        # operation_timeout_s of 30: a retried refusal would end as OperationTimeoutError instead.
        async with AsyncClient(tls_url(broker), **tls_options(setup, authentication=authentication)) as client:
            await client.create_producer(unique("refused"))

    with pytest.raises(ConnectAuthenticationError, match="refused the client's authentication") as caught:
        asyncio.run(run())
    assert "superUser" not in str(caught.value) and PASSWORD not in str(caught.value)


def test_no_credentials_on_a_broker_that_requires_them(setup: SecureSetup, broker: BrokerThread) -> None:
    async def run() -> None:
        async with AsyncClient(tls_url(broker), **tls_options(setup)) as client:
            await client.create_producer(unique("anonymous"))

    with pytest.raises(ConnectAuthenticationError, match="method 'none'"):
        asyncio.run(run())


def test_a_broker_certificate_from_an_unknown_ca_fails_at_once(
    setup: SecureSetup, broker: BrokerThread, tmp_path: Path
) -> None:
    stranger = make_test_pki(tmp_path / "other-pki")

    async def run() -> None:
        options = {"tls_trust_certs_file_path": str(stranger.ca_cert), "operation_timeout_s": 30.0,
                   "authentication": AuthenticationToken(setup.token("superUser"))}
        async with AsyncClient(tls_url(broker), **options) as client:
            await client.create_producer(unique("untrusted"))

    with pytest.raises(TlsHandshakeError, match="certificate verify failed"):
        asyncio.run(run())


def test_a_token_supplier_that_fails_is_not_retried(setup: SecureSetup, broker: BrokerThread) -> None:
    def supplier() -> str:
        raise OSError("vault unreachable")

    async def run() -> None:
        options = tls_options(setup, authentication=AuthenticationToken(supplier))
        async with AsyncClient(tls_url(broker), **options) as client:
            await client.create_producer(unique("supplier"))

    with pytest.raises(CredentialsError, match="token supplier failed: OSError"):
        asyncio.run(run())


def test_producer_and_subscribe_without_a_grant_raise_authorization_error(
    setup: SecureSetup, broker: BrokerThread
) -> None:
    topic = f"persistent://public/apps/authz-{time.time_ns()}"

    async def attempt() -> None:
        async with AsyncClient(tls_url(broker), **tls_options(setup, authentication=AuthenticationToken(
                setup.token("app")))) as client:
            with pytest.raises(AuthorizationError):
                await client.create_producer(topic)
            with pytest.raises(AuthorizationError):
                await client.subscribe(topic, "sub")

    asyncio.run(attempt())
    grant(broker, "public/apps", "app", ["produce", "consume"])
    try:
        async def allowed() -> bytes:
            async with AsyncClient(tls_url(broker), **tls_options(setup, authentication=AuthenticationToken(
                    setup.token("app")))) as client:
                return await _round_trip(client, topic, b"granted")

        assert asyncio.run(allowed()) == b"granted"
    finally:
        grant(broker, "public/apps", "app", None)


def test_the_token_supplier_is_asked_again_when_the_broker_challenges(
    setup: SecureSetup, broker: BrokerThread
) -> None:
    """The first token expires 3 s after it is made; the broker's check (every second) then sends
    AUTH_CHALLENGE on the live connection, and the client answers with the supplier's next token."""
    calls: list[int] = []
    lock = threading.Lock()

    def supplier() -> str:
        with lock:
            calls.append(int(time.time()))
            lifetime_s = 3 if len(calls) == 1 else 3600
        return setup.token("superUser", expires_at_s=int(time.time()) + lifetime_s)

    async def run() -> None:
        topic = unique("refresh")
        # The broker's own TLS URL: lookups answer it, so the client opens this one connection only.
        url = broker.server.service_url_tls
        async with AsyncClient(url, **tls_options(setup, authentication=AuthenticationToken(supplier))) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"before")
            (connection,) = client.pool.connections
            assert len(calls) == 1
            await until(lambda: len(calls) >= 2, "an AUTH_CHALLENGE answered")
            # The answer was accepted: the same connection still carries sends.
            await producer.send(b"after")
            assert client.pool.connections == [connection] and connection.is_ready

    asyncio.run(run())
    assert len(calls) >= 2


def test_velamq_and_the_official_client_share_a_secured_broker(setup: SecureSetup, broker: BrokerThread) -> None:
    topic = unique("interop")
    token = setup.token("superUser")
    official = pulsar.Client(tls_url(broker), tls_trust_certs_file_path=str(setup.pki.ca_cert),
                             authentication=pulsar.AuthenticationToken(token))
    try:
        official_consumer = official.subscribe(topic, "official", initial_position=pulsar.InitialPosition.Earliest)
        official_producer = official.create_producer(topic)
        with Client(tls_url(broker), **tls_options(setup, authentication=AuthenticationToken(token))) as ours:
            our_consumer = ours.subscribe(topic, "velamq", initial_position="earliest")
            ours.create_producer(topic).send(b"from velamq")
            official_producer.send(b"from pulsar-client")
            got_official = {official_consumer.receive(receive_timeout_ms).data() for _ in range(2)}
            got_ours = {our_consumer.receive(timeout_ms=receive_timeout_ms).data() for _ in range(2)}
        assert got_official == got_ours == {b"from velamq", b"from pulsar-client"}
    finally:
        official.close()


# ---- the admin API over https: AdminClient, `velamq admin`, the Spark connector's admin calls ----


def https_url(broker: BrokerThread) -> str:
    return f"https://localhost:{broker.server.admin.tls_port}"


def test_velamq_admin_over_https_with_a_token(setup: SecureSetup, broker: BrokerThread,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    trust = ["--tls-trust-certs-file-path", str(setup.pki.ca_cert)]
    assert main(["admin", "--admin-url", https_url(broker), "--token", setup.token("superUser"), *trust,
                 "--json", "tenants", "list"]) == 0
    assert "public" in capsys.readouterr().out
    assert main(["admin", "--admin-url", https_url(broker), *trust, "tenants", "list"]) == 1
    assert "(HTTP 401)" in capsys.readouterr().err
    assert main(["admin", "--admin-url", https_url(broker), "--token", setup.token("app"), *trust,
                 "namespaces", "policies", "public/apps"]) == 1
    assert "(HTTP 403)" in capsys.readouterr().err


def test_the_spark_connectors_admin_and_client_take_the_security_options(
    setup: SecureSetup, broker: BrokerThread
) -> None:
    topic = unique("spark-secured")
    options = parse_source({
        "service.url": tls_url(broker), "admin.url": https_url(broker), "topic": topic,
        "authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "authParams": f"token:{setup.token('superUser')}", "tlsTrustCertsFilePath": str(setup.pki.ca_cert),
    }, streaming=False)
    admin = ConnectorAdmin(options.admin_url, options.admin_security)
    admin.client.request("PUT", admin.client.topic_path(topic, "partitions"), 2)
    assert admin.partitions(parse_topic(topic)) == 2

    async def produce() -> None:
        async with AsyncClient(options.service_url, **options.client_security.client_options()) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"spark")

    asyncio.run(produce())
    unauthenticated = ConnectorAdmin(options.admin_url, ConnectionSecurity(
        tls_trust_certs_file_path=str(setup.pki.ca_cert)))
    with pytest.raises(AdminError) as refused:
        unauthenticated.partitions(parse_topic(topic))
    assert refused.value.status == 401


def test_lookups_over_https_and_http_with_a_token(setup: SecureSetup, broker: BrokerThread) -> None:
    """An http(s):// service URL: partitions and lookups over the admin API with the token, then the
    binary connection to the broker's TLS URL (https) or plain URL (http), as the official client."""
    token = AuthenticationToken(setup.token("superUser"))

    async def run(url: str, topic: str) -> tuple[bytes, list[str]]:
        async with AsyncClient(url, **tls_options(setup, authentication=token)) as client:
            data = await _round_trip(client, topic, b"via http lookup")
            return data, [c.logical_url for c in client.pool.connections]

    data, urls = asyncio.run(run(https_url(broker), unique("https-lookup")))
    assert data == b"via http lookup" and urls == [broker.server.service_url_tls]
    data, urls = asyncio.run(run(broker.admin_url, unique("http-lookup")))
    assert data == b"via http lookup" and all(u.startswith("pulsar://") for u in urls)

    async def refused() -> None:
        async with AsyncClient(https_url(broker), **tls_options(setup, authentication=AuthenticationToken(
                create_token(create_secret_key(), "superUser")))) as client:
            await client.create_producer(unique("https-refused"))

    with pytest.raises(ConnectAuthenticationError, match="HTTP 401"):
        asyncio.run(refused())
