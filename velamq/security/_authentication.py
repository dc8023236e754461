"""Authentication providers with Pulsar's class names, and the service that picks one (sans-IO).

    CONNECT{auth_method_name, auth_data} + the TLS peer certificate
        -> AuthenticationService.authenticate_connect(method, auth_data, peer_cert_der)
        -> AuthResult(role, method, expires_at_ms)  or  AuthenticationFailedError

Pulsar's ServerCnx rules, which these functions keep:
  - the provider is the one whose method name ("token", "basic", "tls") equals auth_method_name;
  - no such provider (the C++ client's unauthenticated default sends "none"): the role is
    anonymousUserRole, or AuthenticationFailedError when that is unset;
  - a provider that refuses: AuthenticationFailedError; the broker answers CommandError(AuthenticationFailedError)
    and closes the connection;
  - a credential with an expiry (a token's exp) is challenged when it has expired: the broker sends
    AUTH_CHALLENGE with REFRESH_CHALLENGE, the client answers AUTH_RESPONSE, and
    `authenticate_refresh` checks it (same method, same role) or refuses.

HTTP (admin API, HTTP lookup): the header X-Pulsar-Auth-Method-Name picks the provider; without it
each provider is tried in configured order. Unlike Pulsar, a request whose Authorization header no
provider accepts is refused (401) rather than demoted to anonymousUserRole: only a request that
presents no credential at all becomes anonymous. A wrong password must not silently become a
different identity.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from velamq.security._errors import AuthenticationFailedError, SecurityConfigError
from velamq.security._htpasswd import HtpasswdFile
from velamq.security._tls import certificate_role
from velamq.security._tokens import TokenValidator

# The data of the AUTH_CHALLENGE a broker sends to make a client refresh its credentials
# (pulsar-client-api AuthData.REFRESH_AUTH_DATA).
REFRESH_CHALLENGE: Final = b"PulsarAuthRefresh"
# The HTTP header that names the method (AuthenticationFilter.PULSAR_AUTH_METHOD_NAME).
HTTP_METHOD_HEADER: Final = "X-Pulsar-Auth-Method-Name"

_PACKAGE: Final = "org.apache.pulsar.broker.authentication."
TOKEN_PROVIDER: Final = _PACKAGE + "AuthenticationProviderToken"
BASIC_PROVIDER: Final = _PACKAGE + "AuthenticationProviderBasic"
TLS_PROVIDER: Final = _PACKAGE + "AuthenticationProviderTls"


@dataclass(frozen=True, slots=True)
class AuthResult:
    """Who a connection or request is: its role, the method that proved it ("" for anonymous) and
    when that proof expires (epoch ms; None: never)."""

    role: str
    method: str
    expires_at_ms: int | None = None

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms


class AuthenticationProvider(Protocol):
    @property
    def method(self) -> str:
        """The auth method name clients send: "token", "basic", "tls"."""
        ...

    @property
    def class_name(self) -> str:
        """Pulsar's class name for it, as authenticationProviders lists it."""
        ...

    def authenticate(self, auth_data: bytes, peer_cert_der: bytes | None) -> AuthResult:
        """Binary protocol: CONNECT's or AUTH_RESPONSE's auth_data, and the TLS peer certificate."""
        ...

    def authenticate_http(self, authorization: str | None, peer_cert_der: bytes | None) -> AuthResult:
        """HTTP: the Authorization header (None if absent) and the TLS peer certificate."""
        ...


class AuthenticationProviderToken:
    method: Final = "token"
    class_name: Final = TOKEN_PROVIDER

    def __init__(self, validator: TokenValidator) -> None:
        self.validator = validator

    def authenticate(self, auth_data: bytes, peer_cert_der: bytes | None) -> AuthResult:
        identity = self.validator.validate(auth_data)
        return AuthResult(identity.role, self.method, identity.expires_at_ms)

    def authenticate_http(self, authorization: str | None, peer_cert_der: bytes | None) -> AuthResult:
        if authorization is None or not authorization.startswith("Bearer "):
            raise AuthenticationFailedError(
                self.method, "Invalid HTTP Authorization header (expected 'Bearer <token>')"
            )
        return self.authenticate(authorization[len("Bearer "):].encode("utf-8", "replace"), peer_cert_der)


class AuthenticationProviderBasic:
    method: Final = "basic"
    class_name: Final = BASIC_PROVIDER

    def __init__(self, passwords: HtpasswdFile) -> None:
        self.passwords = passwords

    def authenticate(self, auth_data: bytes, peer_cert_der: bytes | None) -> AuthResult:
        return AuthResult(self.passwords.verify_credentials(auth_data), self.method)

    def authenticate_http(self, authorization: str | None, peer_cert_der: bytes | None) -> AuthResult:
        if authorization is None or not authorization.upper().startswith("BASIC "):
            raise AuthenticationFailedError(self.method, 'Authentication token has to be started with "Basic "')
        parts = authorization.split(" ")
        if len(parts) != 2:
            raise AuthenticationFailedError(self.method, "Base64 encoded token is not found")
        try:
            decoded = base64.b64decode(parts[1].encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise AuthenticationFailedError(self.method, "Base64 decoding is failure") from None
        return self.authenticate(decoded, peer_cert_der)


class AuthenticationProviderTls:
    method: Final = "tls"
    class_name: Final = TLS_PROVIDER

    def authenticate(self, auth_data: bytes, peer_cert_der: bytes | None) -> AuthResult:
        return AuthResult(certificate_role(peer_cert_der), self.method)

    def authenticate_http(self, authorization: str | None, peer_cert_der: bytes | None) -> AuthResult:
        return self.authenticate(b"", peer_cert_der)


class AuthenticationService:
    """The configured providers (by method name) and the anonymous role; see the module docstring."""

    def __init__(self, providers: Sequence[AuthenticationProvider], anonymous_role: str | None = None) -> None:
        self._providers: dict[str, AuthenticationProvider] = {}
        for provider in providers:
            if provider.method in self._providers:
                raise SecurityConfigError("authenticationProviders", f"two providers for method {provider.method!r}")
            self._providers[provider.method] = provider
        self.anonymous_role = anonymous_role.strip() if anonymous_role and anonymous_role.strip() else None

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self._providers)

    def provider(self, method: str) -> AuthenticationProvider | None:
        return self._providers.get(method)

    def authenticate_connect(
        self, method: str | None, auth_data: bytes | None, peer_cert_der: bytes | None = None
    ) -> AuthResult:
        """The role of a CONNECT (see the module docstring for the rules)."""
        provider = self._providers.get(method or "none")
        if provider is None:
            if self.anonymous_role is None:
                raise AuthenticationFailedError("", "No anonymous role, and no authentication provider configured")
            return AuthResult(self.anonymous_role, "")
        return _call(provider, bytes(auth_data or b""), peer_cert_der)

    def authenticate_refresh(
        self, previous: AuthResult, method: str | None, auth_data: bytes | None, peer_cert_der: bytes | None = None
    ) -> AuthResult:
        """An AUTH_RESPONSE to a refresh challenge: same method, valid, and the same role."""
        if (method or previous.method) != previous.method or previous.method not in self._providers:
            raise AuthenticationFailedError(
                method or "", "refresh with another authentication method than the connection's"
            )
        result = _call(self._providers[previous.method], bytes(auth_data or b""), peer_cert_der)
        if result.role != previous.role:
            raise AuthenticationFailedError(previous.method, "The new role is different from the original role")
        return result

    def authenticate_http(
        self, authorization: str | None, method_header: str | None = None, peer_cert_der: bytes | None = None
    ) -> AuthResult:
        """The role of an HTTP request (see the module docstring)."""
        if method_header:
            provider = self._providers.get(method_header)
            if provider is None:
                raise AuthenticationFailedError(method_header, f"Unsupported authentication method: [{method_header}].")
            return _call_http(provider, authorization, peer_cert_der)
        first_refusal: AuthenticationFailedError | None = None
        for provider in self._providers.values():
            if provider.method == "tls" and not peer_cert_der:
                continue
            try:
                return _call_http(provider, authorization, peer_cert_der)
            except AuthenticationFailedError as exc:
                first_refusal = first_refusal or exc
        if authorization is None and self.anonymous_role is not None:
            return AuthResult(self.anonymous_role, "")
        if authorization is None or first_refusal is None:
            raise AuthenticationFailedError("", "Authentication required")
        raise AuthenticationFailedError("", "no authentication provider accepted the credentials")


def _call(provider: AuthenticationProvider, auth_data: bytes, peer_cert_der: bytes | None) -> AuthResult:
    """The one boundary for foreign errors: anything but our AuthenticationFailedError becomes one."""
    try:
        return provider.authenticate(auth_data, peer_cert_der)
    except AuthenticationFailedError:
        raise
    except Exception as exc:
        reason = f"credentials could not be checked ({type(exc).__name__})"
        raise AuthenticationFailedError(provider.method, reason) from None


def _call_http(provider: AuthenticationProvider, authorization: str | None, peer_cert_der: bytes | None) -> AuthResult:
    try:
        return provider.authenticate_http(authorization, peer_cert_der)
    except AuthenticationFailedError:
        raise
    except Exception as exc:
        reason = f"credentials could not be checked ({type(exc).__name__})"
        raise AuthenticationFailedError(provider.method, reason) from None
