"""The server TLS context: real handshakes between asyncio endpoints, client certificates, reloads."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from velamq.security import (
    AuthenticationFailedError,
    ReloadingServerContext,
    SecurityConfigError,
    TlsServerSettings,
    build_server_context,
    certificate_role,
)
from velamq.testing._certs import CertificateAuthority, CertificateSet, make_test_pki


class FakeClock:
    def __init__(self) -> None:
        self.seconds = 1000.0

    def now_ms(self) -> int:
        return int(self.seconds * 1000)

    def monotonic_s(self) -> float:
        return self.seconds


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> CertificateSet:
    return make_test_pki(tmp_path_factory.mktemp("pki"))


def _settings(pki: CertificateSet, **kwargs: object) -> TlsServerSettings:
    values: dict[str, object] = {
        "cert_file": pki.server_cert,
        "key_file": pki.server_key,
        "trust_certs_file": pki.ca_cert,
    }
    values.update(kwargs)
    return TlsServerSettings(**values)  # type: ignore[arg-type]


def _client_context(ca: Path, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


Handshake = Callable[[ssl.SSLContext], Awaitable[str]]


async def _serve(server_context: ssl.SSLContext, body: Callable[[Handshake], Awaitable[None]]) -> list[str]:
    """Run a TLS echo-role server; `body` gets a function that connects a client and returns what
    the server said: the role of the client certificate, or "anonymous" without one."""
    roles: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        try:
            role = certificate_role(der)
        except AuthenticationFailedError:
            role = "anonymous"
        roles.append(role)
        writer.write(role.encode() + b"\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]

    async def connect(client_context: ssl.SSLContext) -> str:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=client_context, server_hostname="localhost"), 30
        )
        try:
            line = await asyncio.wait_for(reader.readline(), 30)
            if not line:
                raise ConnectionResetError("server closed without answering")
            return line.decode().strip()
        finally:
            writer.close()

    async with server:
        await body(connect)
    return roles


def test_handshake_with_and_without_client_certificate(pki: CertificateSet) -> None:
    async def body(connect: Handshake) -> None:
        assert await connect(_client_context(pki.ca_cert)) == "anonymous"
        assert await connect(_client_context(pki.ca_cert, pki.client("superUser"))) == "superUser"
        assert await connect(_client_context(pki.ca_cert, pki.client("admin"))) == "admin"

    roles = asyncio.run(_serve(build_server_context(_settings(pki)), body))
    assert roles == ["anonymous", "superUser", "admin"]


def test_client_certificate_of_an_unknown_ca_is_refused(pki: CertificateSet) -> None:
    async def body(connect: Handshake) -> None:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await connect(_client_context(pki.ca_cert, pki.unknown_client))
        assert await connect(_client_context(pki.ca_cert)) == "anonymous"  # the server lives on

    roles = asyncio.run(_serve(build_server_context(_settings(pki)), body))
    assert "superUser" not in roles  # the rogue certificate claims CN=superUser: never accepted


def test_required_client_certificate(pki: CertificateSet) -> None:
    async def body(connect: Handshake) -> None:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await connect(_client_context(pki.ca_cert))
        assert await connect(_client_context(pki.ca_cert, pki.client("admin"))) == "admin"

    asyncio.run(_serve(build_server_context(_settings(pki, require_trusted_client_cert=True)), body))


def test_client_that_does_not_trust_the_server_is_refused(pki: CertificateSet) -> None:
    async def body(connect: Handshake) -> None:
        with pytest.raises(ssl.SSLCertVerificationError):
            await connect(_client_context(pki.unknown_ca_cert))

    asyncio.run(_serve(build_server_context(_settings(pki)), body))


def test_without_trust_certs_no_client_certificate_is_asked(pki: CertificateSet) -> None:
    async def body(connect: Handshake) -> None:
        assert await connect(_client_context(pki.ca_cert, pki.client("admin"))) == "anonymous"

    asyncio.run(_serve(build_server_context(_settings(pki, trust_certs_file=None)), body))


def test_protocol_and_cipher_settings(pki: CertificateSet) -> None:
    context = build_server_context(_settings(pki, protocols=("TLSv1.3",)))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3 == context.maximum_version
    context = build_server_context(
        _settings(pki, protocols=("TLSv1.2", "TLSv1.3"), ciphers=("ECDHE-ECDSA-AES128-GCM-SHA256",))
    )
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert build_server_context(_settings(pki)).minimum_version == ssl.TLSVersion.TLSv1_2

    async def body(connect: Handshake) -> None:
        assert await connect(_client_context(pki.ca_cert, pki.client("admin"))) == "admin"

    asyncio.run(_serve(context, body))


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"protocols": ("SSLv3",)}, "tlsProtocols"),
        ({"ciphers": ("NOT-A-CIPHER",)}, "tlsCiphers"),
        ({"trust_certs_file": None, "require_trusted_client_cert": True}, "tlsTrustCertsFilePath"),
        ({"cert_file": Path("/nonexistent/cert.pem")}, "tlsCertificateFilePath"),
    ],
)
def test_bad_settings_name_the_key(pki: CertificateSet, kwargs: dict[str, object], setting: str) -> None:
    with pytest.raises(SecurityConfigError) as info:
        build_server_context(_settings(pki, **kwargs))
    assert info.value.setting == setting


def test_mismatched_key_and_bad_trust_file(pki: CertificateSet, tmp_path: Path) -> None:
    _, other_key = pki.client("admin")
    with pytest.raises(SecurityConfigError, match="matching PEM pair"):
        build_server_context(_settings(pki, key_file=other_key))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(SecurityConfigError) as info:
        build_server_context(_settings(pki, trust_certs_file=junk))
    assert info.value.setting == "tlsTrustCertsFilePath"


def test_settings_from_pulsar_keys(tmp_path: Path) -> None:
    settings = TlsServerSettings.from_properties(
        {
            "tlsCertificateFilePath": "test-conf/broker-cert.pem",
            "tlsKeyFilePath": "/abs/broker-key.pem",
            "tlsTrustCertsFilePath": "test-conf/cacert.pem",
            "tlsAllowInsecureConnection": "false",
            "tlsRequireTrustedClientCertOnConnect": "true",
            "tlsProtocols": "TLSv1.3,TLSv1.2",
            "tlsCertRefreshCheckDurationSec": "30",
        },
        base_dir=tmp_path,
    )
    assert settings.cert_file == tmp_path / "test-conf/broker-cert.pem"
    assert settings.key_file == Path("/abs/broker-key.pem")
    assert settings.require_trusted_client_cert and not settings.allow_insecure_connection
    assert settings.protocols == ("TLSv1.3", "TLSv1.2")
    assert settings.cert_refresh_check_s == 30
    with pytest.raises(SecurityConfigError, match="tlsKeyFilePath"):
        TlsServerSettings.from_properties({"tlsCertificateFilePath": "c.pem"})
    with pytest.raises(SecurityConfigError, match="tlsAllowInsecureConnection"):
        TlsServerSettings.from_properties(
            {"tlsCertificateFilePath": "c", "tlsKeyFilePath": "k", "tlsAllowInsecureConnection": "yes"}
        )


def _replace(path: Path, content: bytes, mtime_ns: int) -> None:
    path.write_bytes(content)
    os.utime(path, ns=(mtime_ns, mtime_ns))  # a distinct mtime whatever the filesystem's granularity


def test_reload_after_the_files_change(tmp_path: Path) -> None:
    first = CertificateAuthority("first CA")
    second = CertificateAuthority("second CA")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "server-cert.pem", tmp_path / "server-key.pem"
    cert_pem, key_pem = first.issue("localhost", hosts=["localhost"], server=True)
    _replace(ca_file, first.cert_pem, 1_000_000_000)
    _replace(cert_file, cert_pem, 1_000_000_000)
    _replace(key_file, key_pem, 1_000_000_000)
    trust_first, trust_second = tmp_path / "trust-first.pem", tmp_path / "trust-second.pem"
    trust_first.write_bytes(first.cert_pem)
    trust_second.write_bytes(second.cert_pem)
    client_cert = tmp_path / "client-cert.pem", tmp_path / "client-key.pem"
    pem, key = second.issue("second-client")
    client_cert[0].write_bytes(pem)
    client_cert[1].write_bytes(key)

    clock = FakeClock()
    settings = TlsServerSettings(cert_file, key_file, ca_file, cert_refresh_check_s=60)
    reloading = ReloadingServerContext(settings, clock)

    async def body(connect: Handshake) -> None:
        assert await connect(_client_context(trust_first)) == "anonymous"
        # The files change: a certificate from the second CA, which is also the new trust anchor.
        cert2, key2 = second.issue("localhost", hosts=["localhost"], server=True)
        _replace(cert_file, cert2, 2_000_000_000)
        _replace(key_file, key2, 2_000_000_000)
        _replace(ca_file, second.cert_pem, 2_000_000_000)
        assert reloading.check() is False  # the refresh period has not passed
        assert await connect(_client_context(trust_first)) == "anonymous"
        clock.seconds += 60
        assert reloading.check() is True
        assert reloading.check(force=True) is False  # nothing changed since
        with pytest.raises(ssl.SSLCertVerificationError):
            await connect(_client_context(trust_first))
        assert await connect(_client_context(trust_second)) == "anonymous"
        # the reloaded trust store verifies client certificates of the second CA
        assert await connect(_client_context(trust_second, client_cert)) == "second-client"
        # Half-written files: the reload fails, the previous certificate stays in use.
        _replace(key_file, b"-----BEGIN PRIVATE KEY-----\ntruncated", 3_000_000_000)
        with pytest.raises(SecurityConfigError):
            reloading.check(force=True)
        assert await connect(_client_context(trust_second)) == "anonymous"

    asyncio.run(_serve(reloading.context, body))
    assert reloading.reloads == 1


def test_certificate_role(pki: CertificateSet) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    der = x509.load_pem_x509_certificate(pki.client("superUser")[0].read_bytes()).public_bytes(
        serialization.Encoding.DER
    )
    assert certificate_role(der) == "superUser"
    for missing in (None, b""):
        with pytest.raises(AuthenticationFailedError, match="Failed to get TLS certificates"):
            certificate_role(missing)
    with pytest.raises(AuthenticationFailedError, match="does not parse"):
        certificate_role(b"\x30\x03garbage")


def _der_with_subject(*attributes: tuple[object, str]) -> bytes:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])  # type: ignore[arg-type]
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


def test_certificate_role_follows_rfc2253_order_and_needs_a_cn() -> None:
    from cryptography.x509.oid import NameOID

    # RFC 2253 lists the last RDN first, and Pulsar takes the first CN= of that string.
    der = _der_with_subject((NameOID.COMMON_NAME, "outer"), (NameOID.COMMON_NAME, "inner"))
    assert certificate_role(der) == "inner"
    der = _der_with_subject((NameOID.ORGANIZATION_NAME, "no common name"))
    with pytest.raises(AuthenticationFailedError, match="no CN"):
        certificate_role(der)
