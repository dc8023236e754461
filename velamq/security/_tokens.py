"""JSON Web Tokens as Pulsar's AuthenticationProviderToken makes and checks them.

A Pulsar token is a compact JWS: base64url(header).base64url(claims).base64url(signature), with
header {"alg": "HS256"} (jjwt) or {"alg": "HS256", "typ": "JWT"} (PyJWT; both are standard) and
claims {"sub": role} plus, when it expires, {"exp": epoch seconds}. The role is the claim named by
`tokenAuthClaim` (default "sub"); a list-valued claim yields its first string, as Pulsar does.

Checks, in order, each refusal an AuthenticationFailedError whose reason never contains the token:
    1. the text is a JWT at all (three base64url segments, JSON header and claims)
    2. its alg is one the configured key verifies: "none" never is, nor an alg of another key
       family (an RS256 token against a secret key, the classic key-confusion attack)
    3. the signature verifies with the configured key
    4. exp (if present) is in the future and nbf (if present) in the past, on the injected clock
    5. with tokenAudienceClaim set, that claim (a string or a list) holds tokenAudience
    6. the role claim is present and is a non-empty string
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import jwt

from velamq._clock import Clock, system_clock
from velamq.security._errors import AuthenticationFailedError, SecurityConfigError
from velamq.security._keys import (
    ALGORITHMS,
    PrivateKey,
    PublicKey,
    decode_public_key,
    decode_secret_key,
    family_of,
    key_family,
    read_key_bytes,
    signing_algorithm,
)

METHOD: Final = "token"
# A token longer than this is refused before parsing: Pulsar tokens are a few hundred bytes.
token_bytes_max: Final = 64 * 1024
# We check exp, nbf and the audience ourselves (on the injected clock, with Pulsar's claim names).
_DECODE_OPTIONS: Final = {
    "verify_signature": True,
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
    "verify_aud": False,
    "verify_iss": False,
    "require": [],
}


@dataclass(frozen=True, slots=True)
class TokenIdentity:
    """What a valid token says: its role, when it stops being valid (None: never) and its claims."""

    role: str
    expires_at_ms: int | None
    claims: Mapping[str, Any] = field(repr=False)


def create_token(
    signing_key: bytes | PrivateKey,
    subject: str,
    *,
    expires_at_s: int | None = None,
    headers: Mapping[str, Any] | None = None,
    extra_claims: Mapping[str, Any] | None = None,
) -> str:
    """A token for `subject`, signed as `pulsar tokens create` signs (algorithm from the key)."""
    if not isinstance(subject, str) or not subject:
        raise SecurityConfigError("subject", "a token needs a non-empty subject")
    claims: dict[str, Any] = dict(extra_claims or {})
    claims["sub"] = subject
    if expires_at_s is not None:
        claims["exp"] = int(expires_at_s)
    algorithm = signing_algorithm(signing_key)
    return jwt.encode(claims, signing_key, algorithm=algorithm, headers=dict(headers) if headers else None)


class TokenValidator:
    """Validates tokens against one configured key, as AuthenticationProviderToken does."""

    def __init__(
        self,
        key: bytes | PublicKey,
        *,
        auth_claim: str = "sub",
        audience_claim: str | None = None,
        audience: str | None = None,
        clock: Clock = system_clock,
    ) -> None:
        if audience_claim and not audience:
            raise SecurityConfigError(
                "tokenAudience", f"tokenAudienceClaim {audience_claim!r} is set, but not the audience of this broker"
            )
        self._key = decode_secret_key(key) if isinstance(key, bytes) else key
        self._algorithms = list(ALGORITHMS[key_family(key)])
        self.auth_claim = auth_claim or "sub"
        self.audience_claim = audience_claim or None
        self.audience = audience if audience_claim else None
        self._clock = clock

    @classmethod
    def from_settings(
        cls,
        *,
        secret_key: str | None = None,
        public_key: str | None = None,
        public_alg: str | None = None,
        auth_claim: str | None = None,
        audience_claim: str | None = None,
        audience: str | None = None,
        clock: Clock = system_clock,
    ) -> TokenValidator:
        """From Pulsar's settings tokenSecretKey | tokenPublicKey (+ tokenPublicAlg, default RS256),
        tokenAuthClaim, tokenAudienceClaim, tokenAudience. The secret key wins if both are set."""
        key: bytes | PublicKey
        if secret_key and secret_key.strip():
            key = decode_secret_key(read_key_bytes(secret_key, "tokenSecretKey"))
        elif public_key and public_key.strip():
            key = decode_public_key(read_key_bytes(public_key, "tokenPublicKey"))
            alg = public_alg or "RS256"
            if family_of(alg) != key_family(key):
                raise SecurityConfigError(
                    "tokenPublicAlg", f"{alg} needs an {family_of(alg)} key; tokenPublicKey is {key_family(key)}"
                )
        else:
            raise SecurityConfigError("tokenSecretKey", "no tokenSecretKey or tokenPublicKey for token authentication")
        return cls(key, auth_claim=auth_claim or "sub", audience_claim=audience_claim, audience=audience, clock=clock)

    def validate(self, token: str | bytes) -> TokenIdentity:
        """The token's identity, or AuthenticationFailedError saying which check failed."""
        text = _token_text(token)
        try:
            header = jwt.get_unverified_header(text)
        except (jwt.PyJWTError, ValueError, TypeError):
            raise _refused("not a JWT (expected header.payload.signature in base64url)") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg.lower() == "none":
            raise _refused("unsigned token (alg none) refused")
        if alg not in self._algorithms:
            raise _refused(f"token signed with {alg}, the configured key verifies only {', '.join(self._algorithms)}")
        try:
            claims = jwt.decode(text, self._key, algorithms=self._algorithms, options=_DECODE_OPTIONS)  # type: ignore[arg-type]
        except jwt.InvalidSignatureError:
            raise _refused("signature does not verify with the configured key") from None
        except (jwt.PyJWTError, ValueError, TypeError):
            raise _refused("malformed token") from None
        if not isinstance(claims, dict):
            raise _refused("token claims are not a JSON object")
        expires_at_ms = self._check_times(claims)
        self._check_audience(claims)
        return TokenIdentity(role=self._role(claims), expires_at_ms=expires_at_ms, claims=claims)

    def _check_times(self, claims: Mapping[str, Any]) -> int | None:
        now_ms = self._clock.now_ms()
        exp_ms = _epoch_ms(claims, "exp")
        if exp_ms is not None and now_ms >= exp_ms:
            raise _refused(f"token expired {(now_ms - exp_ms) // 1000} s ago")
        nbf_ms = _epoch_ms(claims, "nbf")
        if nbf_ms is not None and now_ms < nbf_ms:
            raise _refused("token not valid yet (nbf is in the future)")
        return exp_ms

    def _check_audience(self, claims: Mapping[str, Any]) -> None:
        if self.audience_claim is None:
            return
        value = claims.get(self.audience_claim)
        if value is None:
            raise _refused(f"token has no {self.audience_claim!r} audience claim")
        audiences = value if isinstance(value, list) else [value]
        if self.audience not in [a for a in audiences if isinstance(a, str)]:
            raise _refused(f"audience claim {self.audience_claim!r} does not name this broker")

    def _role(self, claims: Mapping[str, Any]) -> str:
        value = claims.get(self.auth_claim)
        if isinstance(value, list) and value and isinstance(value[0], str):
            value = value[0]
        if not isinstance(value, str) or not value:
            raise _refused(f"token has no role in its {self.auth_claim!r} claim")
        return value


def _token_text(token: str | bytes) -> str:
    if isinstance(token, bytes | bytearray | memoryview):
        if len(token) > token_bytes_max:
            raise _refused(f"token longer than {token_bytes_max} bytes")
        try:
            token = bytes(token).decode("ascii")
        except UnicodeDecodeError:
            raise _refused("token is not ASCII text") from None
    if not isinstance(token, str):
        raise _refused("token is not text")
    token = token.strip()
    if not token:
        raise _refused("Blank token found")
    if len(token) > token_bytes_max or not token.isascii():
        raise _refused("token is not ASCII text of a sane length")
    return token


def _epoch_ms(claims: Mapping[str, Any], name: str) -> int | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _refused(f"{name!r} claim is not a number of seconds")
    return int(value * 1000)


def _refused(reason: str) -> AuthenticationFailedError:
    return AuthenticationFailedError(METHOD, reason)
