"""Who is calling the admin server: authentication of HTTP requests and the caller handed to routes.

    security = AdminSecurity(authentication, authorization, settings)   # one per AdminServer
    caller = security.authenticate(request, peer_cert_der)             # Caller, or HttpError 401
    caller.is_superuser(); caller.is_tenant_admin("t"); caller.model    # what routes may ask

Rules (docs/security.md, "What differs from Pulsar"):
  - authentication off (no AuthenticationService): every request is the caller with role None,
    and authorization is not enforced (Pulsar needs authenticationEnabled for authorization too);
  - the Authorization header (Bearer token, Basic) or the TLS client certificate proves a role;
    X-Pulsar-Auth-Method-Name picks the provider when sent;
  - no credentials at all: anonymousUserRole if set, else 401;
  - credentials no provider accepts: 401 (never demoted to the anonymous role).

Refusals never repeat the credential: the reason names the method and what failed, as
AuthenticationFailedError's messages do.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final

from velamq.admin._http import HttpError, Request
from velamq.security import (
    HTTP_METHOD_HEADER,
    AuthenticationFailedError,
    AuthenticationService,
    AuthorizationModel,
    SecuritySettings,
)

# Pulsar's reason when authorization is on and the request carries no identity.
NEED_AUTHENTICATION: Final = "Need to authenticate to perform the request"
# The realm browsers show in their login box for the console.
CONSOLE_REALM: Final = "velamq"


@dataclass(frozen=True, slots=True)
class Caller:
    """The role of one request and the model that judges it. `enforce` is False when authorization
    is off: every question then answers yes."""

    role: str | None = None
    model: AuthorizationModel | None = None
    enforce: bool = False

    def is_superuser(self) -> bool:
        return not self.enforce or (self.model is not None and self.model.is_superuser(self.role))

    def is_tenant_admin(self, tenant: str) -> bool:
        return not self.enforce or (self.model is not None and self.model.is_tenant_admin(self.role, tenant))


OPEN_CALLER: Final = Caller()


@dataclass(slots=True)
class AdminSecurity:
    """The admin server's security: the authentication service (None: off), the authorization model
    shared with the broker (None: none to consult or update) and the settings that say whether it is
    enforced and whether /metrics needs credentials. `grants_lock` serialises the read-modify-write
    of a namespace's auth_policies, so two grants at once cannot lose one."""

    authentication: AuthenticationService | None = None
    authorization: AuthorizationModel | None = None
    settings: SecuritySettings | None = None
    grants_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def enforce_authorization(self) -> bool:
        return self.authorization is not None and self.settings is not None and self.settings.authorization_enabled

    @property
    def authenticate_metrics(self) -> bool:
        return (
            self.authentication is not None
            and self.settings is not None
            and self.settings.authenticate_metrics_endpoint
        )

    @property
    def basic_login(self) -> bool:
        """Whether a browser can log in with a password (basic is among the providers)."""
        return self.authentication is not None and self.authentication.provider("basic") is not None

    def open_caller(self) -> Caller:
        """The caller of a request that needs no credentials (e.g. /metrics by default)."""
        return Caller(None, self.authorization, False)

    def authenticate(self, request: Request, peer_cert_der: bytes | None, *, console: bool = False) -> Caller:
        """The caller of `request`; HttpError 401 if its credentials are refused or missing. A console
        request's 401 carries a WWW-Authenticate challenge so a browser asks for a password."""
        enforce = self.enforce_authorization
        if self.authentication is None:
            if enforce:
                raise HttpError(401, NEED_AUTHENTICATION, headers=self._challenge(console))
            return Caller(None, self.authorization, False)
        try:
            result = self.authentication.authenticate_http(
                request.header("authorization"), request.header(HTTP_METHOD_HEADER), peer_cert_der
            )
        except AuthenticationFailedError as exc:
            raise HttpError(401, str(exc), headers=self._challenge(console)) from None
        return Caller(result.role, self.authorization, enforce)

    def _challenge(self, console: bool) -> tuple[tuple[str, str], ...]:
        if not console:
            return ()  # Pulsar's REST API sends no challenge; its clients send credentials up front
        if self.basic_login:
            return (("WWW-Authenticate", f'Basic realm="{CONSOLE_REALM}", charset="UTF-8"'),)
        return (("WWW-Authenticate", f'Bearer realm="{CONSOLE_REALM}"'),)
