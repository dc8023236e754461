"""A secured admin server for the admin security tests: a real VelamqServer on a broker thread, and
beside its own (open) admin server a second AdminServer over the same broker, built with real
security: test certificates (make_test_pki), an HS256 secret key and tokens, an htpasswd file, and
Pulsar's keys in a SecuritySettings. Requests go over http or https with http.client."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import ssl
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from admin_harness import Reply
from passlib.hash import apr_md5_crypt

from velamq.admin import AdminServer
from velamq.broker import BrokerAdmin
from velamq.security import (
    BASIC_PROVIDER,
    TLS_PROVIDER,
    TOKEN_PROVIDER,
    AuthorizationModel,
    SecuritySettings,
    build_authentication_service,
    create_secret_key,
    create_token,
)
from velamq.testing import BrokerThread
from velamq.testing._certs import CertificateSet, make_test_pki

SUPERUSERS = ("superUser", "admin")
PASSWORDS = {"alice": "wonderland", "superUser": "root-pass"}


class Secured:
    """The secured AdminServer (`server`), its broker, and credentials to call it with."""

    def __init__(self, broker: BrokerThread, server: AdminServer, model: AuthorizationModel, pki: CertificateSet,
                 secret: bytes) -> None:
        self.broker = broker
        self.server = server
        self.model = model
        self.pki = pki
        self._secret = secret

    def token(self, role: str, secret: bytes | None = None) -> str:
        return create_token(secret or self._secret, role)

    def bearer(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(role)}"}

    @staticmethod
    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    def tls_context(self, client: str | None = None, *, unknown: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        if unknown:
            cert, key = self.pki.unknown_client
            context.load_cert_chain(str(cert), str(key))
        elif client is not None:
            cert, key = self.pki.client(client)
            context.load_cert_chain(str(cert), str(key))
        return context

    def request(
        self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None, *,
        tls: ssl.SSLContext | None = None, raw_body: bytes | None = None,
    ) -> Reply:
        if tls is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                "localhost", self.server.tls_port, timeout=10, context=tls
            )
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        try:
            data = raw_body if raw_body is not None else None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def as_superuser(self, method: str, path: str, body: Any = None) -> Reply:
        return self.request(method, path, body, self.bearer("superUser"))


def security_properties(directory: Path, pki: CertificateSet, secret: bytes, **extra: str) -> dict[str, str]:
    """Pulsar's keys for token + basic + TLS authentication, authorization and an https port."""
    key_file = directory / "secret.key"
    key_file.write_bytes(secret)
    htpasswd = directory / ".htpasswd"
    htpasswd.write_text("".join(f"{user}:{apr_md5_crypt.hash(pw)}\n" for user, pw in PASSWORDS.items()))
    props = {
        "authenticationEnabled": "true",
        "authenticationProviders": ",".join((TOKEN_PROVIDER, BASIC_PROVIDER, TLS_PROVIDER)),
        "tokenSecretKey": f"file://{key_file}",
        "basicAuthConf": str(htpasswd),
        "authorizationEnabled": "true",
        "superUserRoles": ",".join(SUPERUSERS),
        "webServicePortTls": "0",
        "tlsCertificateFilePath": str(pki.server_cert),
        "tlsKeyFilePath": str(pki.server_key),
        "tlsTrustCertsFilePath": str(pki.ca_cert),
    }
    props.update(extra)
    return props


@contextlib.contextmanager
def secured_server(tmp_path: Path, *, plain_port: bool = True, **extra: str) -> Iterator[Secured]:
    """A broker thread plus a secured AdminServer over it; `extra` are more Pulsar keys."""
    pki = make_test_pki(tmp_path / "pki", client_names=(*SUPERUSERS, "app"))
    secret = create_secret_key()
    settings = SecuritySettings.from_properties(security_properties(tmp_path, pki, secret, **extra))
    authentication = build_authentication_service(settings, environ={})
    model = AuthorizationModel(settings.super_user_roles)
    broker = BrokerThread(tmp_path / "data")
    broker.start()
    server = AdminServer(
        BrokerAdmin(broker.server.broker), "127.0.0.1", 0 if plain_port else None, advertised_address="127.0.0.1",
        authentication=authentication, authorization=model, security=settings,
    )
    try:
        broker.run(server.start())
        yield Secured(broker, server, model, pki, secret)
    finally:
        broker.run(server.close())
        broker.stop()
