"""The admin API and the binary port of one secured VelamqServer, wired as `velamq standalone` wires
them (one AuthenticationService, one AuthorizationModel): a grant or revoke made over https with
pulsar-admin's REST call changes what a live binary connection may do at its next command, and the
official client's own calls (HTTP lookup, partition metadata) go through the same checks."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from security_helpers import RawConnection, SecureSetup, client_tls_context, secure_setup

from velamq.protocol import pb
from velamq.testing._broker_thread import BrokerThread, run_broker_in_thread

T = pb.BaseCommand


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> SecureSetup:
    return secure_setup(tmp_path_factory.mktemp("admin-security"), webServicePortTls="0")


@pytest.fixture(scope="module")
def broker(setup: SecureSetup) -> Iterator[BrokerThread]:
    with run_broker_in_thread(config=setup.config()) as b:
        yield b


def https(setup: SecureSetup, broker: BrokerThread, method: str, path: str, body: Any = None,
          role: str = "superUser") -> tuple[int, Any]:
    """A request over the https port, authenticated by a client certificate of `role`."""
    port = broker.server.admin.tls_port
    conn = http.client.HTTPSConnection("localhost", port, timeout=10, context=client_tls_context(setup, role))
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else None
    finally:
        conn.close()


def test_grants_over_https_reach_a_live_binary_connection(setup: SecureSetup, broker: BrokerThread) -> None:
    assert https(setup, broker, "PUT", "/admin/v2/namespaces/public/granted")[0] == 204
    topic = f"persistent://public/granted/t-{time.time_ns()}"
    conn = RawConnection(broker.server.broker_port)
    try:
        assert conn.connect("token", setup.token("app").encode()).type == T.CONNECTED
        assert conn.lookup(topic, 1).error == pb.AuthorizationError
        status, _ = https(setup, broker, "POST", "/admin/v2/namespaces/public/granted/permissions/app", ["produce"])
        assert status == 204
        assert conn.lookup(topic, 2).response == pb.CommandLookupTopicResponse.Connect
        assert https(setup, broker, "DELETE", "/admin/v2/namespaces/public/granted/permissions/app")[0] == 204
        assert conn.lookup(topic, 3).error == pb.AuthorizationError
        # A grant on the topic alone also reaches the connection.
        path = "/admin/v2/persistent/public/granted/" + topic.rsplit("/", 1)[1] + "/permissions/app"
        assert https(setup, broker, "POST", path, ["consume"])[0] == 204
        assert conn.lookup(topic, 4).response == pb.CommandLookupTopicResponse.Connect
    finally:
        conn.close()


def test_the_official_client_over_http_lookup_with_a_token(setup: SecureSetup, broker: BrokerThread) -> None:
    """The official client given the admin URL looks up and reads partition metadata over HTTP,
    with its token in the Authorization header; without a grant it is refused, with one it works."""
    assert https(setup, broker, "PUT", "/admin/v2/namespaces/public/viahttp")[0] == 204
    topic = f"persistent://public/viahttp/t-{time.time_ns()}"
    client = pulsar.Client(
        broker.server.web_service_url, authentication=pulsar.AuthenticationToken(setup.token("app")),
        operation_timeout_seconds=5, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
        status, _ = https(setup, broker, "POST", "/admin/v2/namespaces/public/viahttp/permissions/app",
                          ["produce", "consume"])
        assert status == 204
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"over http lookup")
        assert consumer.receive(20_000).data() == b"over http lookup"
    finally:
        client.close()


def test_the_ci_set_up_with_a_superuser_token_over_plain_http(setup: SecureSetup, broker: BrokerThread) -> None:
    """start-test-service-inside-container.sh's calls: curl with a superuser Bearer token on 8080."""
    conn = http.client.HTTPConnection("127.0.0.1", broker.server.http_port, timeout=10)
    headers = {"Authorization": f"Bearer {setup.token('superUser')}", "Content-Type": "application/json"}
    try:
        conn.request("PUT", "/admin/v2/tenants/private",
                     json.dumps({"adminRoles": [], "allowedClusters": ["standalone"]}), headers)
        assert conn.getresponse().read() == b""
        body = {"auth_policies": {"namespace_auth": {"token-principal": ["produce", "consume"]}},
                "replication_clusters": ["standalone"]}
        conn.request("PUT", "/admin/v2/namespaces/private/auth", json.dumps(body), headers)
        resp = conn.getresponse()
        assert resp.status == 204, resp.read()
        resp.read()
    finally:
        conn.close()
    raw = RawConnection(broker.server.broker_port)
    try:
        assert raw.connect("token", setup.token("token-principal").encode()).type == T.CONNECTED
        assert raw.lookup("persistent://private/auth/x", 1).response == pb.CommandLookupTopicResponse.Connect
    finally:
        raw.close()


def test_http_lookup_over_https_names_the_tls_urls(setup: SecureSetup, broker: BrokerThread) -> None:
    status, lookup = https(setup, broker, "GET", "/lookup/v2/topic/persistent/public/default/looked-up")
    assert status == 200
    assert lookup["brokerUrlTls"] == broker.server.service_url_tls
    assert lookup["brokerUrlTls"].startswith("pulsar+ssl://")
    assert lookup["httpUrlTls"] == f"https://127.0.0.1:{broker.server.admin.tls_port}"
    assert lookup["brokerUrl"].startswith("pulsar://") and lookup["httpUrl"].startswith("http://")


def test_no_credentials_on_the_admin_port(broker: BrokerThread) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", broker.server.http_port, timeout=10)
    try:
        conn.request("GET", "/admin/v2/tenants")
        resp = conn.getresponse()
        assert resp.status == 401 and json.loads(resp.read()) == {"reason": "Authentication required"}
    finally:
        conn.close()
