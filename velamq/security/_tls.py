"""Server-side TLS from Pulsar's settings, reloaded when the files change, and the TLS role.

Settings (broker.conf / standalone.conf names):
    tlsCertificateFilePath                 PEM certificate chain of this server
    tlsKeyFilePath                         PEM private key of that certificate
    tlsTrustCertsFilePath                  PEM CA certificates client certificates must chain to
    tlsRequireTrustedClientCertOnConnect   true: a client without a trusted certificate is refused in
                                           the handshake; false (default): a certificate is asked for,
                                           checked if given, and optional
    tlsAllowInsecureConnection             Pulsar then accepts client certificates of any CA. Python's
                                           ssl has no verify callback, so we cannot: a certificate
                                           that does not verify is still refused (stricter than Pulsar)
    tlsProtocols                           e.g. "TLSv1.3,TLSv1.2": the lowest and highest named become
                                           the minimum and maximum version (default: TLS 1.2 and up)
    tlsCiphers                             OpenSSL cipher names for TLS 1.2 and below, comma-separated
                                           (TLS 1.3 suites are not configurable through Python's ssl)
    tlsCertRefreshCheckDurationSec         how often the files' mtimes are compared (default 300)

Reloading: `ReloadingServerContext.context` is the one SSLContext handed to the server socket at
start. Its SNI callback, which OpenSSL calls on every ClientHello (with or without SNI), switches
the new connection to the newest context; `check()` compares the files' mtimes and builds that newer
context when one changed. A reload that fails (half-written files) keeps the previous context and
reports the error; the next check tries again.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.x509.oid import NameOID

from velamq._clock import Clock, system_clock
from velamq.security._errors import AuthenticationFailedError, SecurityConfigError

log = logging.getLogger(__name__)

cert_refresh_check_s_default: Final = 300.0
_PROTOCOLS: Final = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


@dataclass(frozen=True, slots=True)
class TlsServerSettings:
    cert_file: Path
    key_file: Path
    trust_certs_file: Path | None = None
    require_trusted_client_cert: bool = False
    allow_insecure_connection: bool = False
    protocols: tuple[str, ...] = ()
    ciphers: tuple[str, ...] = ()
    cert_refresh_check_s: float = cert_refresh_check_s_default

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base_dir: Path | None = None) -> TlsServerSettings:
        """From Pulsar's keys (see the module docstring); relative paths are taken from `base_dir`."""

        def path(key: str) -> Path | None:
            value = props.get(key, "").strip()
            if not value:
                return None
            p = Path(value)
            return p if p.is_absolute() or base_dir is None else base_dir / p

        cert, key = path("tlsCertificateFilePath"), path("tlsKeyFilePath")
        if cert is None or key is None:
            missing = "tlsCertificateFilePath" if cert is None else "tlsKeyFilePath"
            raise SecurityConfigError(missing, "TLS is enabled but this file is not set")
        refresh = props.get("tlsCertRefreshCheckDurationSec", "").strip()
        try:
            refresh_s = float(refresh) if refresh else cert_refresh_check_s_default
        except ValueError:
            raise SecurityConfigError("tlsCertRefreshCheckDurationSec", f"not a number: {refresh!r}") from None
        return cls(
            cert_file=cert,
            key_file=key,
            trust_certs_file=path("tlsTrustCertsFilePath"),
            require_trusted_client_cert=parse_flag(props, "tlsRequireTrustedClientCertOnConnect"),
            allow_insecure_connection=parse_flag(props, "tlsAllowInsecureConnection"),
            protocols=parse_list(props.get("tlsProtocols", "")),
            ciphers=parse_list(props.get("tlsCiphers", "")),
            cert_refresh_check_s=refresh_s,
        )

    def files(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.cert_file, self.key_file, self.trust_certs_file) if p is not None)


def parse_flag(props: Mapping[str, str], key: str) -> bool:
    """A Pulsar boolean setting: "true" or "false" (absent or empty: false)."""
    value = props.get(key, "").strip().lower()
    if value not in ("true", "false", ""):
        raise SecurityConfigError(key, f"expected true or false, got {value!r}")
    return value == "true"


def parse_list(value: str) -> tuple[str, ...]:
    """A Pulsar list setting: comma-separated, blanks dropped."""
    return tuple(v.strip() for v in value.split(",") if v.strip())


def build_server_context(settings: TlsServerSettings) -> ssl.SSLContext:
    """An SSLContext for a TLS server port; SecurityConfigError naming the setting at fault."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_protocols(context, settings.protocols)
    if settings.ciphers:
        try:
            context.set_ciphers(":".join(settings.ciphers))
        except ssl.SSLError:
            raise SecurityConfigError(
                "tlsCiphers", "no usable cipher in the list (OpenSSL names expected, e.g. ECDHE-RSA-AES128-GCM-SHA256)"
            ) from None
    try:
        context.load_cert_chain(str(settings.cert_file), str(settings.key_file))
    except FileNotFoundError as exc:
        raise SecurityConfigError("tlsCertificateFilePath", f"file not found: {exc.filename}") from None
    except (ssl.SSLError, OSError) as exc:
        raise SecurityConfigError(
            "tlsCertificateFilePath", f"certificate {settings.cert_file} and key {settings.key_file} do not load "
            f"as a matching PEM pair ({getattr(exc, 'reason', None) or type(exc).__name__})"
        ) from None
    if settings.trust_certs_file is not None:
        try:
            context.load_verify_locations(cafile=str(settings.trust_certs_file))
        except (ssl.SSLError, OSError) as exc:
            raise SecurityConfigError(
                "tlsTrustCertsFilePath", f"{settings.trust_certs_file} does not load as PEM CA certificates "
                f"({getattr(exc, 'reason', None) or type(exc).__name__})"
            ) from None
        # Ask every client for a certificate and verify any it sends; require one only if told to.
        context.verify_mode = ssl.CERT_REQUIRED if settings.require_trusted_client_cert else ssl.CERT_OPTIONAL
    elif settings.require_trusted_client_cert:
        raise SecurityConfigError(
            "tlsTrustCertsFilePath", "tlsRequireTrustedClientCertOnConnect=true needs the CA certificates to trust"
        )
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


def _set_protocols(context: ssl.SSLContext, protocols: tuple[str, ...]) -> None:
    if not protocols:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return
    unknown = [p for p in protocols if p not in _PROTOCOLS]
    if unknown:
        raise SecurityConfigError("tlsProtocols", f"unknown protocol {unknown[0]!r} (use {', '.join(_PROTOCOLS)})")
    versions = sorted(_PROTOCOLS[p] for p in protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]


class ReloadingServerContext:
    """A server SSLContext whose certificate, key and trusted CAs follow their files.

    Owned by the server's event loop: call `check()` from it (a timer every few seconds, or before
    accepting); it stats at most three files and only rebuilds when one changed.
    """

    def __init__(self, settings: TlsServerSettings, clock: Clock = system_clock) -> None:
        self.settings = settings
        self._clock = clock
        self._mtimes = self._stat()
        self._checked_at_s = clock.monotonic_s()
        self.reloads = 0
        self.context = build_server_context(settings)
        self.context.sni_callback = self._switch
        self._current = self.context

    def _switch(
        self, ssl_object: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None, _ctx: ssl.SSLContext
    ) -> None:
        if self._current is not self.context:
            ssl_object.context = self._current

    def _stat(self) -> tuple[int, ...]:
        stamps = []
        for path in self.settings.files():
            try:
                stamps.append(path.stat().st_mtime_ns)
            except OSError:
                stamps.append(-1)
        return tuple(stamps)

    def check(self, force: bool = False) -> bool:
        """Rebuild if the refresh period has passed (or `force`) and a file changed; True if it did.

        SecurityConfigError if the changed files do not load; the previous context stays in use.
        """
        now = self._clock.monotonic_s()
        if not force and now - self._checked_at_s < self.settings.cert_refresh_check_s:
            return False
        self._checked_at_s = now
        mtimes = self._stat()
        if mtimes == self._mtimes:
            return False
        try:
            fresh = build_server_context(self.settings)
        except SecurityConfigError:
            log.warning("TLS files changed but do not load; keeping the previous certificate", exc_info=True)
            raise
        self._mtimes = mtimes
        self._current = fresh
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.settings.cert_file)
        return True


def certificate_role(peer_cert_der: bytes | None) -> str:
    """AuthenticationProviderTls's role: the first non-empty CN of the client certificate's subject
    in RFC 2253 order (the last CN in the certificate's own order). AuthenticationFailedError without one."""
    if not peer_cert_der:
        raise AuthenticationFailedError("tls", "Failed to get TLS certificates from client")
    try:
        cert = x509.load_der_x509_certificate(bytes(peer_cert_der))
        rdns = list(cert.subject.rdns)
    except (ValueError, TypeError):
        raise AuthenticationFailedError("tls", "client certificate does not parse") from None
    for rdn in reversed(rdns):
        for attribute in rdn:
            if attribute.oid == NameOID.COMMON_NAME and isinstance(attribute.value, str) and attribute.value:
                return attribute.value
    raise AuthenticationFailedError("tls", "Client unable to authenticate with TLS certificate (no CN)")
