"""How a client reaches a secured broker or admin API, as plain strings: one picklable value that the
CLI, `velamq perf` and the Spark connector build from their own option names and hand to both
velamq's AsyncClient and its AdminClient.

    security = ConnectionSecurity(auth_plugin="token", auth_params="file:///run/app.token",
                                  tls_trust_certs_file_path="ca.pem")
    AsyncClient("pulsar+ssl://host:6651", **security.client_options())
    AdminClient("https://host:8443", security=security)

The names are the official client's (`tls_trust_certs_file_path`, ...); `auth_plugin` and
`auth_params` are pulsar-admin's `--auth-plugin` / `--auth-params` (a short name or a Java class
name, and that plugin's parameter string). Only strings are kept, never an SSL context or a
closure, so the value crosses to Spark executors; nothing here is ever logged (repr hides params).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from velamq.client._errors import InvalidConfigurationError
from velamq.client.security._auth import Authentication
from velamq.client.security._tls import client_ssl_context


@dataclass(frozen=True, slots=True)
class ConnectionSecurity:
    """Authentication and TLS settings by name (see the module docstring); all optional."""

    auth_plugin: str | None = None
    auth_params: str = field(default="", repr=False)
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tls_validate_hostname: bool = False
    tls_certificate_file_path: str | None = None
    tls_private_key_file_path: str | None = None

    def __post_init__(self) -> None:
        if self.auth_params and not self.auth_plugin:
            raise InvalidConfigurationError("authentication parameters given without an authentication plugin")
        self.authentication()  # a bad plugin name or parameters fail here, where they were given

    def authentication(self) -> Authentication | None:
        """A new plugin object for these settings (None: no authentication)."""
        if not self.auth_plugin:
            return None
        return Authentication(self.auth_plugin, self.auth_params)

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for AsyncClient / Client (only the ones that are set)."""
        options: dict[str, Any] = {}
        authentication = self.authentication()
        if authentication is not None:
            options["authentication"] = authentication
        if self.tls_trust_certs_file_path:
            options["tls_trust_certs_file_path"] = self.tls_trust_certs_file_path
        if self.tls_allow_insecure_connection:
            options["tls_allow_insecure_connection"] = True
        if self.tls_validate_hostname:
            options["tls_validate_hostname"] = True
        if self.tls_certificate_file_path:
            options["tls_certificate_file_path"] = self.tls_certificate_file_path
        if self.tls_private_key_file_path:
            options["tls_private_key_file_path"] = self.tls_private_key_file_path
        return options



class TlsSettings(Protocol):
    """The official client's TLS option names, as ClientConfig and ConnectionSecurity both have them."""

    @property
    def tls_trust_certs_file_path(self) -> str | None: ...
    @property
    def tls_allow_insecure_connection(self) -> bool: ...
    @property
    def tls_validate_hostname(self) -> bool: ...
    @property
    def tls_certificate_file_path(self) -> str | None: ...
    @property
    def tls_private_key_file_path(self) -> str | None: ...


def ssl_context_for(authentication: Authentication | None, tls: TlsSettings) -> ssl.SSLContext:
    """The TLS context of a client; a TLS authentication plugin's certificate wins over the
    settings' client certificate."""
    cert_file: str | Path | None = tls.tls_certificate_file_path
    key_file: str | Path | None = tls.tls_private_key_file_path
    if authentication is not None and authentication.tls_cert_file is not None:
        cert_file, key_file = authentication.tls_cert_file, authentication.tls_key_file
    return client_ssl_context(trust_certs_file=tls.tls_trust_certs_file_path,
                              allow_insecure=tls.tls_allow_insecure_connection,
                              validate_hostname=tls.tls_validate_hostname, cert_file=cert_file, key_file=key_file)


def check_authentication(value: Any) -> Authentication | None:
    """`authentication=` as given to a client: velamq's plugin objects; the official client's
    objects are refused with the velamq equivalent to use (their credentials cannot be read back)."""
    if value is None or isinstance(value, Authentication):
        return value
    module = type(value).__module__ or ""
    if module.split(".")[0] in ("pulsar", "_pulsar"):
        raise InvalidConfigurationError(
            f"authentication: {type(value).__name__} is the official client's object, whose credentials "
            f"velamq cannot read; use velamq.client.{type(value).__name__}(...) with the same arguments, "
            "or velamq.client.Authentication(plugin, params)"
        )
    raise InvalidConfigurationError(
        f"authentication must be a velamq.client Authentication plugin, not {type(value).__name__}"
    )
