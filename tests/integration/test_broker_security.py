"""The binary port's security against a real broker (in-process, real sockets, real TLS with
certificates made for the test): the TLS port, CONNECT authentication with token, basic and
client-certificate roles, refusals that close, and per-command authorization that does not."""

from __future__ import annotations

import base64
import json
import os
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from security_helpers import (
    PASSWORD,
    RawConnection,
    SecureSetup,
    client_tls_context,
    grant,
    secure_setup,
    secured_broker,
    tls_port,
)

from velamq.protocol import pb
from velamq.security import create_secret_key, create_token
from velamq.testing._broker_thread import BrokerThread, run_broker_in_thread
from velamq.testing._certs import make_test_pki

T = pb.BaseCommand
receive_timeout_ms = 20_000


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return secure_setup(tmp_path_factory.mktemp("security"))


@pytest.fixture(scope="module")
def broker(setup: SecureSetup) -> Iterator[BrokerThread]:
    with secured_broker(setup) as b:
        yield b


def round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic)
    producer.send(b"hello")
    assert consumer.receive(receive_timeout_ms).data() == b"hello"


def test_a_lookup_over_tls_answers_the_tls_url(setup: SecureSetup, broker: BrokerThread) -> None:
    conn = RawConnection(tls_port(broker), tls=client_tls_context(setup))
    try:
        assert conn.connect("token", setup.token("superUser").encode()).type == T.CONNECTED
        reply = conn.lookup("persistent://public/default/tls-url", 1)
        assert reply.response == pb.CommandLookupTopicResponse.Connect
        assert reply.brokerServiceUrlTls == f"pulsar+ssl://127.0.0.1:{tls_port(broker)}"
        assert broker.server.service_url_tls == reply.brokerServiceUrlTls
    finally:
        conn.close()


def test_the_official_client_over_tls_with_a_client_certificate_role(setup: SecureSetup, broker: BrokerThread) -> None:
    cert, key = setup.pki.client("superUser")
    client = pulsar.Client(
        f"pulsar+ssl://localhost:{tls_port(broker)}",
        tls_trust_certs_file_path=str(setup.pki.ca_cert),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationTLS(str(cert), str(key)),
    )
    try:
        round_trip(client, f"persistent://public/default/tls-cn-{time.time_ns()}")
    finally:
        client.close()


def test_the_official_client_with_a_token_and_with_basic_credentials(setup: SecureSetup, broker: BrokerThread) -> None:
    grant(broker, "public/apps", "app", ["produce", "consume"])
    for auth in (
        pulsar.AuthenticationToken(setup.token("app")),
        pulsar.AuthenticationToken(lambda: setup.token("app")),
        pulsar.AuthenticationBasic("app", PASSWORD),
    ):
        client = pulsar.Client(broker.service_url, authentication=auth)
        try:
            round_trip(client, f"persistent://public/apps/granted-{time.time_ns()}")
        finally:
            client.close()


def test_basic_and_token_over_tls_with_encryption_only(setup: SecureSetup, broker: BrokerThread) -> None:
    client = pulsar.Client(
        f"pulsar+ssl://127.0.0.1:{tls_port(broker)}",
        tls_trust_certs_file_path=str(setup.pki.ca_cert),
        authentication=pulsar.AuthenticationBasic("superUser", PASSWORD),
    )
    try:
        round_trip(client, f"persistent://public/default/tls-basic-{time.time_ns()}")
    finally:
        client.close()


def _alg_none_token(role: str) -> bytes:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part({'sub': role})}.".encode()


@pytest.mark.parametrize(
    "case",
    ["other-key", "expired", "alg-none", "garbage-token", "wrong-password", "unknown-user", "no-colon",
     "no-method", "unknown-method", "tls-on-plain-port"],
)
def test_refused_credentials_get_authentication_error_and_a_close(
    setup: SecureSetup, broker: BrokerThread, case: str
) -> None:
    method, data = {
        "other-key": ("token", create_token(create_secret_key(), "superUser").encode()),
        "expired": ("token", setup.token("superUser", expires_at_s=int(time.time()) - 60).encode()),
        "alg-none": ("token", _alg_none_token("superUser")),
        "garbage-token": ("token", b"\xff\x00not a token" * 100),
        "wrong-password": ("basic", b"app:wrong"),
        "unknown-user": ("basic", b"nobody:" + PASSWORD.encode()),
        "no-colon": ("basic", b"\x00\x01\x02"),
        "no-method": (None, b""),
        "unknown-method": ("kerberos", b"ticket"),
        "tls-on-plain-port": ("tls", b""),
    }[case]
    conn = RawConnection(broker.server.broker_port)
    try:
        reply = conn.connect(method, data)
        assert reply.type == T.ERROR and reply.error.error == pb.AuthenticationError
        # Nothing about the credentials or the reason goes back to the client.
        assert reply.error.message == "Unable to authenticate"
        assert conn.closed_by_broker()
    finally:
        conn.close()
    # The broker is unharmed: a good client still gets in.
    good = RawConnection(broker.server.broker_port)
    try:
        assert good.connect("token", setup.token("superUser").encode()).type == T.CONNECTED
    finally:
        good.close()


def test_a_client_certificate_from_an_unknown_ca_is_refused_in_the_handshake(
    setup: SecureSetup, broker: BrokerThread
) -> None:
    context = ssl.create_default_context(cafile=str(setup.pki.ca_cert))
    cert, key = setup.pki.unknown_client
    context.load_cert_chain(str(cert), str(key))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        conn = RawConnection(tls_port(broker), tls=context)
        try:
            conn.connect("tls")  # TLS 1.3: the refusal arrives with the first read
        finally:
            conn.close()


def test_authorization_is_checked_per_command_and_the_connection_stays_open(
    setup: SecureSetup, broker: BrokerThread
) -> None:
    topic = f"persistent://public/apps/authz-{time.time_ns()}"
    grant(broker, "public/apps", "other", None)
    conn = RawConnection(broker.server.broker_port)
    try:
        assert conn.connect("token", setup.token("other").encode()).type == T.CONNECTED
        lookup = conn.lookup(topic, 1)
        assert lookup.response == pb.CommandLookupTopicResponse.Failed and lookup.error == pb.AuthorizationError
        conn.send(T.PRODUCER, "producer", topic=topic, producer_id=1, request_id=2)
        refused = conn.next()
        assert refused.type == T.ERROR and refused.error.error == pb.AuthorizationError
        conn.send(T.SUBSCRIBE, "subscribe", topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared,
                  consumer_id=1, request_id=3)
        refused = conn.next()
        assert refused.type == T.ERROR and refused.error.error == pb.AuthorizationError
        conn.send(T.GET_TOPICS_OF_NAMESPACE, "getTopicsOfNamespace", namespace="public/apps", request_id=4)
        refused = conn.next()
        assert refused.type == T.ERROR and refused.error.error == pb.AuthorizationError

        # Granted: the same live connection may now; revoked: it may not again.
        grant(broker, "public/apps", "other", ["produce"])
        assert conn.lookup(topic, 5).response == pb.CommandLookupTopicResponse.Connect
        conn.send(T.PRODUCER, "producer", topic=topic, producer_id=1, request_id=6)
        assert conn.next().type == T.PRODUCER_SUCCESS
        conn.send(T.SUBSCRIBE, "subscribe", topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared,
                  consumer_id=1, request_id=7)
        refused = conn.next()  # produce does not grant consume
        assert refused.type == T.ERROR and refused.error.error == pb.AuthorizationError
        grant(broker, "public/apps", "other", None)
        lookup = conn.lookup(topic, 8)
        assert lookup.response == pb.CommandLookupTopicResponse.Failed and lookup.error == pb.AuthorizationError
    finally:
        conn.close()


def test_the_official_client_gets_authorization_error_without_a_grant(setup: SecureSetup, broker: BrokerThread) -> None:
    grant(broker, "public/apps", "other", None)
    client = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(setup.token("other")))
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(f"persistent://public/apps/denied-{time.time_ns()}")
    finally:
        client.close()


def test_a_tls_only_broker_has_no_plain_port(setup: SecureSetup, tmp_path: Path) -> None:
    config = setup.config()
    with run_broker_in_thread(tmp_path / "data", config=config, plain_port=False) as b:
        assert b.server.broker.broker_port is None
        assert b.service_url.startswith("pulsar+ssl://")
        conn = RawConnection(tls_port(b), tls=client_tls_context(setup, "superUser"))
        try:
            assert conn.connect("tls").type == T.CONNECTED
            reply = conn.lookup("persistent://public/default/tls-only", 1)
            assert reply.brokerServiceUrlTls.startswith("pulsar+ssl://") and not reply.brokerServiceUrl
        finally:
            conn.close()


def test_an_anonymous_role_for_clients_without_credentials(setup: SecureSetup, tmp_path: Path) -> None:
    config_dir = tmp_path / "anonymous"
    anonymous = secure_setup(config_dir, anonymousUserRole="anonymous")
    with run_broker_in_thread(tmp_path / "data", config=anonymous.config()) as b:
        conn = RawConnection(b.server.broker_port)
        try:
            assert conn.connect("none").type == T.CONNECTED  # what the C++ client sends without auth
            lookup = conn.lookup("persistent://public/default/anon", 1)
            assert lookup.error == pb.AuthorizationError
            grant(b, "public/default", "anonymous", ["consume"])
            assert conn.lookup("persistent://public/default/anon", 2).response == pb.CommandLookupTopicResponse.Connect
        finally:
            conn.close()
        # A refused credential does not fall back to the anonymous role.
        bad = RawConnection(b.server.broker_port)
        try:
            assert bad.connect("token", b"not-a-token").error.error == pb.AuthenticationError
        finally:
            bad.close()


def test_renewed_certificate_files_serve_the_next_connection(tmp_path: Path) -> None:
    first = secure_setup(tmp_path / "conf", tlsCertRefreshCheckDurationSec="0", authenticationEnabled="false",
                         authorizationEnabled="false")
    with run_broker_in_thread(tmp_path / "data", config=first.config()) as b:
        old = RawConnection(tls_port(b), tls=client_tls_context(first))
        assert old.connect().type == T.CONNECTED
        renewed = make_test_pki(tmp_path / "renewed")
        pairs = ((renewed.server_cert, first.pki.server_cert), (renewed.server_key, first.pki.server_key))
        for source, target in pairs:
            target.write_bytes(source.read_bytes())
            stat = target.stat()
            os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**10))  # a clearly newer mtime
        new_ca = ssl.create_default_context(cafile=str(renewed.ca_cert))
        fresh = RawConnection(tls_port(b), tls=new_ca)
        try:
            assert fresh.connect().type == T.CONNECTED
        finally:
            fresh.close()
        with pytest.raises(ssl.SSLCertVerificationError):
            RawConnection(tls_port(b), tls=client_tls_context(first))
        # The connection made before the renewal goes on.
        assert old.lookup("persistent://public/default/renewed", 1).response == pb.CommandLookupTopicResponse.Connect
        old.close()


def test_commands_on_an_open_consumer_are_checked_against_its_topic(setup: SecureSetup, broker: BrokerThread) -> None:
    topic = f"persistent://public/apps/consumer-authz-{time.time_ns()}"
    grant(broker, "public/apps", "other", ["consume"])
    conn = RawConnection(broker.server.broker_port)
    try:
        assert conn.connect("token", setup.token("other").encode()).type == T.CONNECTED
        conn.send(T.SUBSCRIBE, "subscribe", topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared,
                  consumer_id=1, request_id=1)
        assert conn.next().type == T.SUCCESS
        conn.send(T.GET_LAST_MESSAGE_ID, "getLastMessageId", consumer_id=1, request_id=2)
        assert conn.next().type == T.GET_LAST_MESSAGE_ID_RESPONSE
        grant(broker, "public/apps", "other", None)
        conn.send(T.GET_LAST_MESSAGE_ID, "getLastMessageId", consumer_id=1, request_id=3)
        refused = conn.next()
        assert refused.type == T.ERROR and refused.error.error == pb.AuthorizationError
        assert refused.error.request_id == 3
        conn.send(T.SEEK, "seek", consumer_id=1, request_id=4, message_publish_time=0)
        refused = conn.next()
        assert refused.type == T.ERROR and refused.error.error == pb.AuthorizationError
    finally:
        conn.close()
