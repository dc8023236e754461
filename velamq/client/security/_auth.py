"""Client authentication plugins, named and shaped like the official client's.

    AuthenticationToken("eyJ...")                    a token string
    AuthenticationToken(lambda: read_my_token())     a supplier, called again for every CONNECT and
                                                     every refresh challenge (token rotation)
    AuthenticationToken.from_file("/path/token.txt") re-read at each use
    AuthenticationBasic("admin", "secret")           or auth_params_string='{"username":..,"password":..}'
    AuthenticationTLS("client-cert.pem", "client-key.pem")   role = the certificate's CN
    Authentication("tls", "tlsCertFile:/a.pem,tlsKeyFile:/b.pem")   by plugin name or Java class name

Each gives the connection what it sends:
    method_name                  CONNECT.auth_method_name ("token", "basic", "tls")
    auth_data()                  CONNECT.auth_data
    challenge_response(data)     AUTH_RESPONSE.response.auth_data for an AUTH_CHALLENGE
                                 (data REFRESH_CHALLENGE: the broker wants fresh credentials)
    http_headers()               for the admin API and HTTP lookups (Authorization: Bearer / Basic)
    tls_cert_file, tls_key_file  the client certificate the TLS context must present, if any

Differences from the official client: an unknown plugin name or malformed parameters fail here,
at construction, with InvalidConfigurationError, instead of as an AuthenticationError at connect.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from velamq.client._errors import CredentialsError, InvalidConfigurationError

# The challenge data a broker sends to ask for fresh credentials (Pulsar's AuthData.REFRESH_AUTH_DATA).
REFRESH_CHALLENGE: Final = b"PulsarAuthRefresh"

_JAVA_PACKAGE: Final = "org.apache.pulsar.client.impl.auth."


class InvalidAuthParamsError(InvalidConfigurationError, RuntimeError):
    """Authentication parameters that do not parse. Also a RuntimeError, which is what the official
    client raises for them (a C++ std::runtime_error)."""


class Authentication:
    """An authentication plugin chosen by name, as `pulsar.Authentication(plugin, params)`.

    `auth_plugin`: "token", "basic", "tls" or the Java class names
    org.apache.pulsar.client.impl.auth.Authentication{Token,Basic,Tls} (case-insensitive).
    `auth_params`: the plugin's parameter string (see each plugin); JSON is accepted too.
    The subclasses are the plugins themselves.
    """

    def __init__(self, auth_plugin: str, auth_params: str = "") -> None:
        self._delegate = _from_plugin(auth_plugin, auth_params)

    @property
    def method_name(self) -> str:
        return self._delegate.method_name

    def auth_data(self) -> bytes:
        return self._delegate.auth_data()

    def challenge_response(self, challenge: bytes) -> bytes:
        return self._delegate.challenge_response(challenge)

    def http_headers(self) -> dict[str, str]:
        return self._delegate.http_headers()

    @property
    def tls_cert_file(self) -> Path | None:
        return self._delegate.tls_cert_file

    @property
    def tls_key_file(self) -> Path | None:
        return self._delegate.tls_key_file

    def __repr__(self) -> str:
        return f"{type(self).__name__}(method={self.method_name!r})"  # never the credentials


class AuthenticationToken(Authentication):
    """Token authentication: a JWT string, or a callable returning one (called at each use)."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        # A string or a file is kept as data (not as a closure) so the plugin pickles, as Spark
        # needs to send it to executors; a callable pickles only if it does itself.
        self._token: str | None = None
        self._file: Path | None = None
        self._supplier: Callable[[], str] | None = None
        if isinstance(token, str):
            if not token.strip():
                raise InvalidConfigurationError("AuthenticationToken needs a non-empty token")
            self._token = token.strip()
        elif callable(token):
            self._supplier = token
        else:
            raise InvalidConfigurationError("AuthenticationToken takes a token string or a callable returning one")

    @classmethod
    def from_file(cls, path: str | Path) -> AuthenticationToken:
        """A token kept in a file, re-read at every connect and refresh (so it can be rotated)."""
        plugin = cls.__new__(cls)
        plugin._token, plugin._file, plugin._supplier = None, Path(path), None
        return plugin

    def _read(self) -> str:
        if self._token is not None:
            return self._token
        if self._file is not None:
            return self._file.read_text()
        assert self._supplier is not None
        return self._supplier()

    @property
    def method_name(self) -> str:
        return "token"

    def token(self) -> str:
        try:
            value = self._read()
        except Exception as exc:
            raise CredentialsError(f"the token supplier failed: {type(exc).__name__}") from exc
        if not isinstance(value, str) or not value.strip():
            raise CredentialsError("the token supplier returned no token")
        return value.strip()

    def auth_data(self) -> bytes:
        return self.token().encode()

    def challenge_response(self, challenge: bytes) -> bytes:
        return self.auth_data()  # any challenge, refresh included, is answered with a fresh token

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}

    @property
    def tls_cert_file(self) -> Path | None:
        return None

    @property
    def tls_key_file(self) -> Path | None:
        return None


class AuthenticationBasic(Authentication):
    """Basic authentication: user name and password, checked by the broker's htpasswd file.

    Same arguments as the official client: (username, password, method="basic") or
    auth_params_string='{"username": "...", "password": "...", "method": "basic"}'. `method` is the
    auth method name sent in CONNECT; a name the broker has no provider for makes it anonymous.
    """

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:
        if auth_params_string:
            params = _json_params(auth_params_string, "AuthenticationBasic")
            username, password = params.get("username"), params.get("password")
            method = params.get("method", method)
            if username is None:
                raise InvalidAuthParamsError("No username provided for basic provider")
            if password is None:
                raise InvalidAuthParamsError("No password provided for basic provider")
        if not isinstance(username, str) or not username or ":" in username:
            raise InvalidConfigurationError("AuthenticationBasic needs a user name without ':'")
        if not isinstance(password, str):
            raise InvalidConfigurationError("AuthenticationBasic needs a password")
        if not isinstance(method, str) or not method:
            raise InvalidConfigurationError("AuthenticationBasic method must be a non-empty string")
        self._credentials = f"{username}:{password}".encode()
        self._method = method

    @property
    def method_name(self) -> str:
        return self._method

    def auth_data(self) -> bytes:
        return self._credentials

    def challenge_response(self, challenge: bytes) -> bytes:
        return self._credentials

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(self._credentials).decode("ascii")}

    @property
    def tls_cert_file(self) -> Path | None:
        return None

    @property
    def tls_key_file(self) -> Path | None:
        return None


class AuthenticationTLS(Authentication):
    """Mutual-TLS authentication: the client certificate's CN is the role. Needs a pulsar+ssl:// URL."""

    def __init__(self, certificate_path: str | Path, private_key_path: str | Path) -> None:
        self._cert, self._key = Path(certificate_path), Path(private_key_path)
        for what, path in (("certificate", self._cert), ("private key", self._key)):
            if not path.is_file():
                raise InvalidConfigurationError(f"AuthenticationTLS: {what} file {path} does not exist")

    @property
    def method_name(self) -> str:
        return "tls"

    def auth_data(self) -> bytes:
        return b""  # the certificate speaks for the client, in the TLS handshake

    def challenge_response(self, challenge: bytes) -> bytes:
        return b""

    def http_headers(self) -> dict[str, str]:
        return {}

    @property
    def tls_cert_file(self) -> Path | None:
        return self._cert

    @property
    def tls_key_file(self) -> Path | None:
        return self._key


def _from_plugin(plugin: str, params: str) -> Authentication:
    name = plugin.strip().lower() if isinstance(plugin, str) else ""
    if name.startswith(_JAVA_PACKAGE.lower()):
        name = {"authenticationtls": "tls", "authenticationtoken": "token", "authenticationbasic": "basic"}.get(
            name[len(_JAVA_PACKAGE):], name
        )
    params = params or ""
    if name == "tls":
        values = _json_params(params, "tls") if params.lstrip().startswith("{") else _default_params(params)
        cert, key = values.get("tlsCertFile"), values.get("tlsKeyFile")
        if not cert or not key:
            raise InvalidAuthParamsError("tls auth params need tlsCertFile and tlsKeyFile")
        return AuthenticationTLS(cert, key)
    if name == "token":
        if params.lstrip().startswith("{"):
            params = str(_json_params(params, "token").get("token", ""))
        if params.startswith("token:"):
            return AuthenticationToken(params[len("token:"):])
        if params.startswith("file:"):
            return AuthenticationToken.from_file(params.removeprefix("file://").removeprefix("file:"))
        return AuthenticationToken(params)
    if name == "basic":
        return AuthenticationBasic(auth_params_string=params)
    raise InvalidConfigurationError(
        f"unknown authentication plugin {plugin!r} (use tls, token, basic or their Java class names)"
    )


def _default_params(params: str) -> dict[str, str]:
    """The C++ client's default format: "key1:value1,key2:value2" (pairs without exactly one ':' are skipped)."""
    values: dict[str, str] = {}
    for pair in params.split(","):
        parts = pair.split(":")
        if len(parts) == 2:
            values[parts[0].strip()] = parts[1].strip()
    return values


def _json_params(text: str, plugin: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise InvalidAuthParamsError(f"{plugin} auth params are not JSON") from None
    if not isinstance(value, dict):
        raise InvalidAuthParamsError(f"{plugin} auth params must be a JSON object")
    return value
