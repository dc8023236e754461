"""Helpers of the security tests: a broker configured from a Pulsar-style file with TLS and the
three providers, raw protocol connections over TCP or TLS, and grants written to the metadata
store (then read into the broker's authorization model, as the admin API does)."""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from passlib.hash import apr_md5_crypt

from velamq.broker import BrokerConfig
from velamq.protocol import FrameDecoder, encode_command, pb
from velamq.security import BASIC_PROVIDER, TLS_PROVIDER, TOKEN_PROVIDER, create_secret_key, create_token
from velamq.server import load_authorization
from velamq.testing._broker_thread import BrokerThread, run_broker_in_thread
from velamq.testing._certs import CertificateSet, make_test_pki

T = pb.BaseCommand
PASSWORD = "s3cret-pw"


@dataclass
class SecureSetup:
    """Files of one secured broker: PKI, token secret key, htpasswd, and the config file."""

    directory: Path
    pki: CertificateSet
    secret_key: bytes
    config_file: Path

    def token(self, role: str, expires_at_s: int | None = None) -> str:
        return create_token(self.secret_key, role, expires_at_s=expires_at_s)

    def config(self) -> BrokerConfig:
        return BrokerConfig.from_file(self.config_file)


def secure_setup(directory: Path, **extra: str) -> SecureSetup:
    """TLS on both binary ports, token + basic + TLS authentication, authorization with superUser;
    `extra` adds or replaces config keys."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = make_test_pki(directory, client_names=("superUser", "app", "other"))
    secret = create_secret_key()
    (directory / "secret.key").write_bytes(secret)
    (directory / ".htpasswd").write_text(
        f"app:{apr_md5_crypt.hash(PASSWORD)}\nsuperUser:{apr_md5_crypt.hash(PASSWORD)}\n"
    )
    settings = {
        "brokerServicePort": "6650",
        "brokerServicePortTls": "6651",
        "tlsCertificateFilePath": pki.server_cert.name,
        "tlsKeyFilePath": pki.server_key.name,
        "tlsTrustCertsFilePath": pki.ca_cert.name,
        "authenticationEnabled": "true",
        "authenticationProviders": ",".join((TLS_PROVIDER, TOKEN_PROVIDER, BASIC_PROVIDER)),
        "authorizationEnabled": "true",
        "superUserRoles": "superUser",
        "tokenSecretKey": f"file://{directory / 'secret.key'}",
        "basicAuthConf": ".htpasswd",
        **extra,
    }
    config_file = directory / "broker.conf"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return SecureSetup(directory, pki, secret, config_file)


@contextlib.contextmanager
def secured_broker(setup: SecureSetup) -> Iterator[BrokerThread]:
    """An in-process broker with the setup's security, and a namespace public/apps for the tests."""
    with run_broker_in_thread(config=setup.config()) as b:
        b.run(b.server.metadata.create_namespace("public/apps"))
        yield b


def tls_port(broker: BrokerThread) -> int:
    port = broker.server.broker_port_tls
    assert port is not None
    return port


def grant(broker: BrokerThread, namespace: str, role: str, actions: list[str] | None) -> None:
    """Set (None: remove) `role`'s namespace grant, then reload the model from the metadata store."""

    async def change() -> None:
        server = broker.server
        policies = await server.metadata.get_policies(namespace)
        auth = dict(policies.get("auth_policies") or {})
        grants = dict(auth.get("namespace_auth") or {})
        if actions is None:
            grants.pop(role, None)
        else:
            grants[role] = actions
        auth["namespace_auth"] = grants
        await server.metadata.set_policy(namespace, "auth_policies", auth)
        assert server.authorization is not None
        await load_authorization(server.authorization, server.metadata)

    broker.run(change())


class RawConnection:
    """A client speaking the binary protocol by hand, over TCP or TLS."""

    def __init__(self, port: int, *, tls: ssl.SSLContext | None = None, timeout_s: float = 20.0) -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.sock: socket.socket = tls.wrap_socket(sock, server_hostname="localhost") if tls else sock
        self._decoder = FrameDecoder(64 << 20)
        self._pending: list[pb.BaseCommand] = []

    def send(self, kind: int, field: str, **values: Any) -> None:
        message = pb.BaseCommand(type=kind)
        body = getattr(message, field)
        body.SetInParent()
        for key, value in values.items():
            if isinstance(value, dict):
                for sub_key, sub_value in value.items():
                    setattr(getattr(body, key), sub_key, sub_value)
            else:
                setattr(body, key, value)
        self.sock.sendall(encode_command(message))

    def connect(self, method: str | None = None, data: bytes = b"", *, refresh: bool = True) -> pb.BaseCommand:
        values: dict[str, Any] = {"client_version": "velamq-security-test", "protocol_version": 20}
        if method is not None:
            values["auth_method_name"] = method
            values["auth_data"] = data
        values["feature_flags"] = {"supports_auth_refresh": refresh}
        self.send(T.CONNECT, "connect", **values)
        return self.next()

    def next(self) -> pb.BaseCommand:
        """The next command from the broker (PINGs answered and skipped); ConnectionError at EOF."""
        while True:
            while self._pending:
                command = self._pending.pop(0)
                if command.type == T.PING:
                    self.send(T.PONG, "pong")
                    continue
                return command
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the broker")
            self._pending += [frame.command for frame in self._decoder.feed(data)]

    def closed_by_broker(self) -> bool:
        """True once the broker closed the connection (reads until EOF, failing on any command)."""
        try:
            command = self.next()
        except (ConnectionError, ssl.SSLError, OSError):
            return True
        raise AssertionError(f"expected the connection to close, got {T.Type.Name(command.type)}")

    def lookup(self, topic: str, request_id: int) -> pb.CommandLookupTopicResponse:
        self.send(T.LOOKUP, "lookupTopic", topic=topic, request_id=request_id)
        reply = self.next()
        assert reply.type == T.LOOKUP_RESPONSE, reply
        return reply.lookupTopicResponse

    def close(self) -> None:
        self.sock.close()


def client_tls_context(setup: SecureSetup, role: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(setup.pki.ca_cert))
    if role is not None:
        cert, key = setup.pki.client(role)
        context.load_cert_chain(str(cert), str(key))
    return context
