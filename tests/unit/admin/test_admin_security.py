"""The admin server with security on (SE-1..3 on the admin side): a real AdminServer over a real
broker, with https on its TLS port (test certificates), tokens, an htpasswd file and Pulsar's
authorization rules. 401 without valid credentials, 403 without the right (401 for a topic operation,
as Pulsar), Pulsar's JSON bodies;
/metrics with and without authenticateMetricsEndpoint; the console behind authentication."""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_harness import Admin
from security_harness import Secured, secured_server

from velamq.admin._access import RULES
from velamq.admin._server import build_router
from velamq.security import ReloadingServerContext, create_secret_key

TENANTS = "/admin/v2/tenants"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    with secured_server(tmp_path) as server:
        yield server


def test_every_rule_names_a_registered_route() -> None:
    routes = {(r.method, r.pattern) for r in build_router().routes}
    assert set(RULES) <= routes, set(RULES) - routes


def test_credentials_missing_or_refused_get_401_and_nothing_leaks(secured: Secured) -> None:
    refused = [
        {},
        {"Authorization": "Bearer not-a-jwt"},
        {"Authorization": f"Bearer {secured.token('superUser', create_secret_key())}"},  # another key
        secured.basic("alice", "wrong password"),
        secured.basic("nobody", "x"),
        {"Authorization": "Basic %%%"},
        {"Authorization": "Negotiate abc"},
        {**secured.bearer("superUser"), "X-Pulsar-Auth-Method-Name": "basic"},  # the named provider refuses
        {"X-Pulsar-Auth-Method-Name": "kerberos"},
    ]
    for headers in refused:
        reply = secured.request("GET", TENANTS, headers=headers)
        assert reply.status == 401, (headers, reply.body)
        reason = reply.json()["reason"]
        assert "wrong password" not in reason and "not-a-jwt" not in reason
        assert "www-authenticate" not in reply.headers  # the REST API sends no challenge
    assert secured.request("GET", TENANTS, headers=secured.bearer("superUser")).status == 200
    assert secured.request("GET", TENANTS, headers=secured.basic("superUser", "root-pass")).status == 200
    named = {**secured.bearer("superUser"), "X-Pulsar-Auth-Method-Name": "token"}
    assert secured.request("GET", TENANTS, headers=named).status == 200


def test_refusals_with_pulsars_codes_and_reasons(secured: Secured) -> None:
    alice = secured.basic("alice", "wonderland")
    reply = secured.request("GET", TENANTS, headers=alice)
    assert reply.status == 403 and reply.json() == {"reason": "This operation requires super-user access"}
    reply = secured.request("GET", "/admin/v2/namespaces/public", headers=alice)
    assert reply.status == 403
    assert reply.json() == {"reason": "Don't have permission to administrate resources on this tenant"}
    reply = secured.request("GET", "/admin/v2/persistent/public/default/t/stats", headers=alice)
    assert reply.status == 401  # Pulsar's validateTopicOperation answers UNAUTHORIZED
    assert reply.json()["reason"] == (
        "Unauthorized to validateTopicOperation for operation [GET_STATS] on topic [persistent://public/default/t]"
    )
    assert secured.request("GET", "/admin/v2/clusters", headers=alice).status == 200  # any authenticated role
    assert secured.request("GET", "/admin/v2/brokers/health", headers=alice).status == 403


def test_tenant_admin_rights_follow_admin_roles(secured: Secured) -> None:
    alice = secured.basic("alice", "wonderland")
    assert secured.request("PUT", f"{TENANTS}/acme", {"adminRoles": ["alice"]}, alice).status == 403
    assert secured.as_superuser("PUT", f"{TENANTS}/acme", {"adminRoles": ["alice"]}).status == 204
    # the model follows at once: alice administers acme (and nothing else)
    assert secured.request("PUT", "/admin/v2/namespaces/acme/ns", headers=alice).status == 204
    assert secured.request("GET", "/admin/v2/namespaces/acme", headers=alice).json() == ["acme/ns"]
    assert secured.request("PUT", "/admin/v2/persistent/acme/ns/t", headers=alice).status == 204
    assert secured.request("GET", "/admin/v2/persistent/acme/ns/t/stats", headers=alice).status == 200
    assert secured.request("GET", "/admin/v2/namespaces/public", headers=alice).status == 403
    assert secured.request("POST", f"{TENANTS}/acme", {"adminRoles": []}, alice).status == 403
    assert secured.as_superuser("POST", f"{TENANTS}/acme", {"adminRoles": []}).status == 204
    assert secured.request("GET", "/admin/v2/namespaces/acme", headers=alice).status == 403


def test_anonymous_role_for_no_credentials_only(tmp_path: Path) -> None:
    with secured_server(tmp_path, anonymousUserRole="anonymous") as secured:
        assert secured.as_superuser("PUT", f"{TENANTS}/open", {"adminRoles": ["anonymous"]}).status == 204
        assert secured.request("GET", "/admin/v2/namespaces/open").status == 200  # anonymous is its admin
        assert secured.request("GET", TENANTS).status == 403  # ... and no superuser
        bad = secured.request("GET", "/admin/v2/namespaces/open", headers=secured.basic("alice", "nope"))
        assert bad.status == 401  # refused credentials are never demoted to the anonymous role


def test_https_port_with_client_certificates(secured: Secured) -> None:
    # TLS authentication: the certificate's CN is the role, no header needed.
    reply = secured.request("GET", "/admin/v2/clusters/standalone", tls=secured.tls_context("superUser"))
    assert reply.status == 200
    https = f"https://127.0.0.1:{secured.server.tls_port}"
    assert reply.json()["serviceUrlTls"] == https
    assert secured.server.web_service_url_tls == https
    assert secured.request("GET", TENANTS, tls=secured.tls_context("superUser")).status == 200
    assert secured.request("GET", TENANTS, tls=secured.tls_context("app")).status == 403  # a role, not a superuser
    assert secured.request("GET", TENANTS, tls=secured.tls_context()).status == 401  # no certificate, no header
    assert secured.request("GET", TENANTS, headers=secured.bearer("admin"), tls=secured.tls_context()).status == 200
    # HTTP lookup over https names both the plain and the TLS URLs.
    assert secured.as_superuser("PUT", "/admin/v2/persistent/public/default/looked-up").status == 204
    lookup = secured.request(
        "GET", "/lookup/v2/topic/persistent/public/default/looked-up", tls=secured.tls_context("admin")
    ).json()
    assert lookup["httpUrlTls"] == https and lookup["httpUrl"].startswith("http://")
    assert lookup["brokerUrlTls"] == (secured.broker.server.broker.service_url_tls or "")
    # A certificate of a CA the server does not trust never completes the handshake.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        secured.request("GET", TENANTS, tls=secured.tls_context(unknown=True))


def test_https_only_server(tmp_path: Path) -> None:
    with secured_server(tmp_path, plain_port=False) as secured:
        assert secured.server.web_service_url.startswith("https://127.0.0.1:")
        with pytest.raises(RuntimeError):
            _ = secured.server.port
        assert secured.request("GET", TENANTS, tls=secured.tls_context("admin")).status == 200


def test_tls_certificate_reload_serves_the_new_certificate(secured: Secured) -> None:
    tls = secured.server.tls_context
    assert tls is not None
    before = secured.request("GET", TENANTS, tls=secured.tls_context("admin"))
    assert before.status == 200
    # A new server certificate from the same CA, written over the old files, then a forced check.
    cert, key = secured.pki.ca.issue("localhost", hosts=("localhost", "127.0.0.1"), server=True)
    secured.pki.server_cert.write_bytes(cert)
    secured.pki.server_key.write_bytes(key)
    assert secured.broker.run(_force_check(tls))
    context = secured.tls_context("admin")
    conn = http.client.HTTPSConnection("localhost", secured.server.tls_port, timeout=10, context=context)
    try:
        conn.request("GET", TENANTS, headers=secured.bearer("admin"))
        assert conn.getresponse().status == 200
        assert conn.sock is not None
        served = conn.sock.getpeercert(binary_form=True)
    finally:
        conn.close()
    assert served is not None and ssl.DER_cert_to_PEM_cert(served).encode() == cert


async def _force_check(tls: ReloadingServerContext) -> bool:
    return tls.check(force=True)  # on the server's loop, which owns the context


def test_metrics_open_by_default_and_authenticated_when_asked(tmp_path: Path) -> None:
    with secured_server(tmp_path / "open") as secured:
        assert secured.request("GET", "/metrics").status == 200
    with secured_server(tmp_path / "closed", authenticateMetricsEndpoint="true") as secured:
        assert secured.request("GET", "/metrics").status == 401
        assert secured.request("GET", "/metrics", headers={"Authorization": "Bearer x"}).status == 401
        reply = secured.request("GET", "/metrics", headers=secured.bearer("app"))  # any role, no grant needed
        assert reply.status == 200 and b"# TYPE" in reply.body


def test_console_asks_a_browser_to_log_in_and_shows_own_tenants(secured: Secured) -> None:
    reply = secured.request("GET", "/")
    assert reply.status == 401
    assert reply.headers["www-authenticate"].startswith('Basic realm="velamq"')
    assert secured.as_superuser("PUT", f"{TENANTS}/acme", {"adminRoles": ["alice"]}).status == 204
    assert secured.as_superuser("PUT", "/admin/v2/namespaces/acme/shop").status == 204
    alice = secured.basic("alice", "wonderland")
    page = secured.request("GET", "/", headers=alice)
    assert page.status == 200
    assert b"acme/shop" in page.body and b"public/default" not in page.body
    assert secured.request("GET", "/console/namespaces/acme/shop", headers=alice).status == 200
    assert secured.request("GET", "/console/namespaces/public/default", headers=alice).status == 403
    assert secured.request("GET", "/console/topics/persistent/public/default/x", headers=alice).status == 403
    everything = secured.request("GET", "/", headers=secured.basic("superUser", "root-pass"))
    assert b"acme/shop" in everything.body and b"public/default" in everything.body


def test_security_off_keeps_todays_open_server(admin: Admin) -> None:
    assert admin.request("GET", TENANTS).status == 200
    assert admin.request("POST", "/admin/v2/namespaces/public/default/permissions/app", '["produce"]').status == 204
    assert admin.request("GET", "/admin/v2/namespaces/public/default/permissions").json() == {"app": ["produce"]}
