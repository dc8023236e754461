"""The client's TLS context for pulsar+ssl:// and https:// URLs, with the official client's options.

    client_ssl_context(trust_certs_file="ca.pem")                       verify the broker, not its name
    client_ssl_context(trust_certs_file="ca.pem", validate_hostname=True)
    client_ssl_context(allow_insecure=True)                             accept any broker certificate
    client_ssl_context(..., cert_file="client-cert.pem", key_file="client-key.pem")   present one

Defaults follow the official client: the broker certificate is verified against
`tls_trust_certs_file_path` (or the system's CAs), host names are not checked unless
`tls_validate_hostname` (Pulsar's test certificates name no host), TLS 1.2 or later.
A file that does not load raises TlsConfigurationError, a ConnectError as the official client
reports it, and also an InvalidConfigurationError; its message names the file, never its content.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from velamq.client._errors import ConnectError, InvalidConfigurationError


class TlsConfigurationError(ConnectError, InvalidConfigurationError):
    """TLS files that cannot be used (missing, not PEM, certificate and key that do not match)."""


def client_ssl_context(
    *,
    trust_certs_file: str | Path | None = None,
    allow_insecure: bool = False,
    validate_hostname: bool = False,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> ssl.SSLContext:
    """An SSLContext for connecting to a TLS broker port (see the module docstring)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if allow_insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.check_hostname = bool(validate_hostname)
        context.verify_mode = ssl.CERT_REQUIRED
        if trust_certs_file:
            try:
                context.load_verify_locations(cafile=str(trust_certs_file))
            except (ssl.SSLError, OSError) as exc:
                raise TlsConfigurationError(
                    f"tls_trust_certs_file_path {trust_certs_file}: cannot load CA certificates ({_reason(exc)})"
                ) from None
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if (cert_file is None) != (key_file is None):
        raise TlsConfigurationError("a client certificate needs both its certificate file and its key file")
    if cert_file is not None and key_file is not None:
        try:
            context.load_cert_chain(str(cert_file), str(key_file))
        except (ssl.SSLError, OSError) as exc:
            raise TlsConfigurationError(
                f"client certificate {cert_file} and key {key_file} do not load as a matching PEM pair ({_reason(exc)})"
            ) from None
    return context


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__)
