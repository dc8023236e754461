"""The security errors, under velamq._errors.VelamqError.

    VelamqError
    └── SecurityError
        ├── SecurityConfigError     the operator's security settings cannot be used (a key that does
        │                           not decode, an htpasswd line with an unknown hash, TLS files that
        │                           do not load); raised at start or on reload, never per request
        ├── AuthenticationFailedError  credentials refused: Pulsar's ServerError.AuthenticationError (3)
        │                           on the binary protocol, then the connection closes; HTTP 401
        └── AccessDeniedError       an authenticated role lacks the right: ServerError.AuthorizationError
                                    (4) for that one request, the connection stays open; HTTP 403

No message ever contains a token, a password or key material: they say which check failed and
which setting or claim is involved, so they are safe to log and to send to the client.
"""

from __future__ import annotations

from typing import Final

from velamq._errors import VelamqError

# Pulsar's ServerError codes for the two refusals (PulsarApi.proto), so the broker translates at one
# boundary without importing the protocol here.
authentication_error_code: Final = 3
authorization_error_code: Final = 4


class SecurityError(VelamqError):
    """Root of the security errors."""


class SecurityConfigError(SecurityError):
    """A security setting (key, password file, certificate) that cannot be used.

    `setting` names the config key involved (e.g. "tokenSecretKey"), never its value.
    """

    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"{setting}: {reason}")
        self.setting = setting
        self.reason = reason


class AuthenticationFailedError(SecurityError):
    """Credentials that do not authenticate (bad token, wrong password, no certificate...)."""

    code: Final = authentication_error_code
    http_status: Final = 401

    def __init__(self, method: str, reason: str) -> None:
        super().__init__(f"Failed to authenticate with {method!r}: {reason}" if method else reason)
        self.method = method
        self.reason = reason


class AccessDeniedError(SecurityError):
    """A role that may not do what it asked on a resource (topic, namespace, tenant)."""

    code: Final = authorization_error_code
    http_status: Final = 403

    def __init__(self, role: str | None, operation: str, resource: str) -> None:
        super().__init__(f"{role!r} is not authorized to {operation} on {resource}")
        self.role = role
        self.operation = operation
        self.resource = resource


class InvalidGrantError(SecurityError, ValueError):
    """A grant or permission body that is not what Pulsar's admin API takes (HTTP 400)."""

    http_status: Final = 400
