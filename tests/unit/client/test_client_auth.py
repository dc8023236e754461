"""The client's auth plugins and TLS context, checked against the broker side's own code
(velamq.security validates what the plugins send; a real TLS handshake for the contexts)."""

from __future__ import annotations

import asyncio
import base64
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from velamq.client._errors import ConnectError, InvalidConfigurationError
from velamq.client.security._auth import (
    REFRESH_CHALLENGE,
    Authentication,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
    InvalidAuthParamsError,
)
from velamq.client.security._tls import TlsConfigurationError, client_ssl_context
from velamq.security import (
    REFRESH_CHALLENGE as BROKER_REFRESH_CHALLENGE,
)
from velamq.security import (
    AuthenticationFailedError,
    AuthenticationProviderBasic,
    AuthenticationProviderTls,
    AuthenticationProviderToken,
    AuthenticationService,
    HtpasswdFile,
    TlsServerSettings,
    TokenValidator,
    build_server_context,
    certificate_role,
    create_secret_key,
    create_token,
)
from velamq.testing._certs import CertificateSet, make_test_pki

KEY = create_secret_key()
APR1_LINE = "admin:$apr1$velamqXY$U6tzalcEUQ3SQkIW6pSGp/"  # password "correct horse"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> CertificateSet:
    return make_test_pki(tmp_path_factory.mktemp("pki"))


def _broker_side() -> AuthenticationService:
    return AuthenticationService(
        [
            AuthenticationProviderToken(TokenValidator(KEY)),
            AuthenticationProviderBasic(HtpasswdFile.parse(APR1_LINE)),
            AuthenticationProviderTls(),
        ],
        "anonymous",
    )


def _connect_as(auth: Authentication, peer_cert_der: bytes | None = None) -> str:
    return _broker_side().authenticate_connect(auth.method_name, auth.auth_data(), peer_cert_der).role


def test_refresh_challenge_matches_the_broker() -> None:
    assert REFRESH_CHALLENGE == BROKER_REFRESH_CHALLENGE == b"PulsarAuthRefresh"


def test_token_string_and_http_header() -> None:
    token = create_token(KEY, "token-principal")
    auth = AuthenticationToken(token)
    assert auth.method_name == "token" and _connect_as(auth) == "token-principal"
    assert auth.http_headers() == {"Authorization": f"Bearer {token}"}
    assert _broker_side().authenticate_http(auth.http_headers()["Authorization"]).role == "token-principal"
    assert token not in repr(auth)
    assert auth.tls_cert_file is None
    with pytest.raises(InvalidConfigurationError):
        AuthenticationToken("  ")
    with pytest.raises(InvalidConfigurationError):
        AuthenticationToken(42)  # type: ignore[arg-type]


def test_token_supplier_is_called_again_on_each_challenge() -> None:
    calls: list[int] = []

    def supplier() -> str:
        calls.append(1)
        return create_token(KEY, "rotating", extra_claims={"n": len(calls)})

    auth = AuthenticationToken(supplier)
    first = auth.auth_data()
    second = auth.challenge_response(REFRESH_CHALLENGE)
    assert len(calls) == 2 and first != second
    previous = _broker_side().authenticate_connect("token", first)
    assert _broker_side().authenticate_refresh(previous, auth.method_name, second).role == "rotating"


def test_token_supplier_failures_are_connect_errors() -> None:
    def broken() -> str:
        raise OSError("vault unreachable")

    with pytest.raises(ConnectError, match="token supplier failed: OSError"):
        AuthenticationToken(broken).auth_data()
    with pytest.raises(ConnectError, match="no token"):
        AuthenticationToken(lambda: "").auth_data()


def test_token_from_file_is_reread(tmp_path: Path) -> None:
    path = tmp_path / "token.txt"
    path.write_text(create_token(KEY, "first") + "\n")
    auth = AuthenticationToken.from_file(path)
    assert _connect_as(auth) == "first"
    path.write_text(create_token(KEY, "second"))
    assert _connect_as(auth) == "second"


def test_basic_arguments_and_params_string() -> None:
    for auth in (
        AuthenticationBasic("admin", "correct horse"),
        AuthenticationBasic(auth_params_string='{"username": "admin", "password": "correct horse"}'),
        AuthenticationBasic(auth_params_string='{"username": "admin", "password": "correct horse", "method": "basic"}'),
    ):
        assert auth.method_name == "basic" and _connect_as(auth) == "admin"
        header = auth.http_headers()["Authorization"]
        assert base64.b64decode(header.removeprefix("Basic ")) == b"admin:correct horse"
        assert _broker_side().authenticate_http(header).role == "admin"
    # An unknown method name makes the connection anonymous on the broker (test_basic_auth_method).
    assert _connect_as(AuthenticationBasic("admin", "correct horse", "unknown")) == "anonymous"
    with pytest.raises(AuthenticationFailedError):
        _connect_as(AuthenticationBasic("admin", "wrong"))


@pytest.mark.parametrize("params", ["invalid auth params", "[]", '{"password": "x"}', '{"username": "x"}'])
def test_basic_bad_params_are_runtime_errors_like_the_official_client(params: str) -> None:
    with pytest.raises(RuntimeError):
        AuthenticationBasic(auth_params_string=params)
    with pytest.raises(InvalidAuthParamsError):
        AuthenticationBasic(auth_params_string=params)


def test_basic_refuses_what_the_broker_could_not_parse() -> None:
    for username, password in (("a:b", "pw"), ("", "pw"), (None, "pw"), ("a", None)):
        with pytest.raises(InvalidConfigurationError):
            AuthenticationBasic(username, password)


def test_tls_plugin_and_plugin_names(pki: CertificateSet) -> None:
    cert, key = pki.client("admin")
    auth = AuthenticationTLS(str(cert), str(key))
    assert (auth.method_name, auth.auth_data(), auth.http_headers()) == ("tls", b"", {})
    assert (auth.tls_cert_file, auth.tls_key_file) == (cert, key)
    with pytest.raises(InvalidConfigurationError, match="does not exist"):
        AuthenticationTLS(cert.parent / "missing.pem", key)
    for plugin in ("tls", "TLS", "org.apache.pulsar.client.impl.auth.AuthenticationTls"):
        by_name = Authentication(plugin, f"tlsCertFile:{cert},tlsKeyFile:{key}")
        assert by_name.method_name == "tls" and by_name.tls_cert_file == cert and by_name.tls_key_file == key
    by_json = Authentication("tls", f'{{"tlsCertFile": "{cert}", "tlsKeyFile": "{key}"}}')
    assert by_json.tls_key_file == key


def test_token_and_basic_by_plugin_name(tmp_path: Path) -> None:
    token = create_token(KEY, "named")
    path = tmp_path / "token"
    path.write_text(token)
    for plugin, params in (
        ("token", f"token:{token}"),
        ("token", token),
        ("org.apache.pulsar.client.impl.auth.AuthenticationToken", f"file://{path}"),
        ("token", f'{{"token": "{token}"}}'),
    ):
        auth = Authentication(plugin, params)
        assert auth.method_name == "token" and _connect_as(auth) == "named"
        assert auth.challenge_response(REFRESH_CHALLENGE) == token.encode()
    basic = Authentication(
        "org.apache.pulsar.client.impl.auth.AuthenticationBasic", '{"username":"admin","password":"correct horse"}'
    )
    assert _connect_as(basic) == "admin" and "correct horse" not in repr(basic)


@pytest.mark.parametrize(
    ("plugin", "params"), [("someoldjunk.so", "blah"), ("tls", "blah"), ("tls", "tlsCertFile:/x"), ("", "")]
)
def test_unknown_plugins_and_bad_params_fail_at_construction(plugin: str, params: str) -> None:
    with pytest.raises(InvalidConfigurationError):
        Authentication(plugin, params)


# ---------------------------------------------------------------------------- TLS context


async def _handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext, server_hostname: str) -> str:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        try:
            role = certificate_role(der)
        except AuthenticationFailedError:
            role = "anonymous"
        writer.write(role.encode() + b"\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client_context, server_hostname=server_hostname), 30
        )
        try:
            line = await asyncio.wait_for(reader.readline(), 30)
        finally:
            writer.close()
    if not line:
        raise ConnectionResetError("closed without an answer")
    return line.decode().strip()


def _server(pki: CertificateSet) -> ssl.SSLContext:
    return build_server_context(TlsServerSettings(pki.server_cert, pki.server_key, pki.ca_cert))


def test_client_context_verifies_the_broker_and_presents_a_certificate(pki: CertificateSet) -> None:
    cert, key = pki.client("superUser")
    auth = AuthenticationTLS(cert, key)
    context = client_ssl_context(trust_certs_file=pki.ca_cert, cert_file=auth.tls_cert_file, key_file=auth.tls_key_file)
    assert asyncio.run(_handshake(_server(pki), context, "localhost")) == "superUser"
    anonymous = client_ssl_context(trust_certs_file=pki.ca_cert)
    assert asyncio.run(_handshake(_server(pki), anonymous, "127.0.0.1")) == "anonymous"


def test_hostname_verification_on_and_off(pki: CertificateSet) -> None:
    lenient = client_ssl_context(trust_certs_file=pki.ca_cert)  # the official default: names not checked
    assert asyncio.run(_handshake(_server(pki), lenient, "not-the-server.example")) == "anonymous"
    strict = client_ssl_context(trust_certs_file=pki.ca_cert, validate_hostname=True)
    assert asyncio.run(_handshake(_server(pki), strict, "localhost")) == "anonymous"
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(_handshake(_server(pki), strict, "not-the-server.example"))


def test_untrusted_broker_refused_unless_insecure_allowed(pki: CertificateSet) -> None:
    wrong_ca = client_ssl_context(trust_certs_file=pki.unknown_ca_cert)
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(_handshake(_server(pki), wrong_ca, "localhost"))
    insecure = client_ssl_context(trust_certs_file=pki.unknown_ca_cert, allow_insecure=True)
    assert asyncio.run(_handshake(_server(pki), insecure, "localhost")) == "anonymous"


def test_swapped_or_missing_files_are_connect_errors(pki: CertificateSet, tmp_path: Path) -> None:
    cert, key = pki.client("admin")
    with pytest.raises(ConnectError, match="matching PEM pair"):
        client_ssl_context(
            trust_certs_file=pki.ca_cert, cert_file=key, key_file=cert
        )  # test_tls_encryption_with_other_auth
    with pytest.raises(TlsConfigurationError):
        client_ssl_context(trust_certs_file=tmp_path / "missing.pem")
    with pytest.raises(InvalidConfigurationError):
        client_ssl_context(cert_file=cert)
    key_text = key.read_text()
    with pytest.raises(TlsConfigurationError) as info:
        client_ssl_context(trust_certs_file=key)  # a key is no CA file; the message must not quote it
    assert key_text.splitlines()[1] not in str(info.value)


def test_the_client_tier_does_not_import_velamq_security() -> None:
    code = (
        "import sys, velamq.client.security._auth, velamq.client.security._tls; "
        "bad = [m for m in sys.modules if m.startswith(('velamq.security', 'velamq.broker', 'jwt', 'passlib'))]; "
        "print(bad); raise SystemExit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
