"""The password file of Pulsar's AuthenticationProviderBasic: htpasswd lines `user:hash`.

Pulsar (commons-codec) accepts two hash schemes, and so do we:
    $apr1$salt$hash   Apache's MD5-crypt (`htpasswd -m`, the default of htpasswd 2.2 and earlier)
    13 characters     traditional DES crypt (`htpasswd -d`); only a password's first 8 bytes count
Other schemes (bcrypt `$2y$`, `{SHA}`, `$5$`/`$6$`) never match in Pulsar; we refuse the file at load
with the line number instead, so the operator learns it at start, not from failing logins.

Where the file is: the broker setting `basicAuthConf`, else the JVM property `pulsar.auth.basic.conf`,
which Pulsar's scripts pass through the PULSAR_EXTRA_OPTS environment variable
(`PULSAR_EXTRA_OPTS=-Dpulsar.auth.basic.conf=conf/.htpasswd`). The value is read like a key setting:
file: / data: URL, an existing path, or base64 of the file's content.

Hashing: libpass (the maintained fork of passlib; Python's `crypt` module was removed in 3.13),
whose apr_md5_crypt and des_crypt have pure-Python backends, so no system libcrypt is needed.
Comparison is constant-time (passlib's verify).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Final

from passlib.hash import apr_md5_crypt, des_crypt

from velamq.security._errors import AuthenticationFailedError, SecurityConfigError
from velamq.security._keys import read_key_bytes

METHOD: Final = "basic"
CONFIG_KEY: Final = "basicAuthConf"
SYSTEM_PROPERTY: Final = "pulsar.auth.basic.conf"
ENV_EXTRA_OPTS: Final = "PULSAR_EXTRA_OPTS"
# Pulsar's message for both an unknown user and a wrong password: it tells an attacker neither.
UNKNOWN_USER_OR_PASSWORD: Final = "Unknown user or invalid password"
_DES_CRYPT_CHARS: Final = frozenset("./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def basic_auth_conf_location(settings: Mapping[str, str], environ: Mapping[str, str] | None = None) -> str | None:
    """The password file setting: `basicAuthConf`, else -Dpulsar.auth.basic.conf= in PULSAR_EXTRA_OPTS."""
    value = settings.get(CONFIG_KEY, "")
    if value and value.strip():
        return value.strip()
    env = os.environ if environ is None else environ
    prefix = f"-D{SYSTEM_PROPERTY}="
    try:
        words = shlex.split(env.get(ENV_EXTRA_OPTS, ""))
    except ValueError:  # unbalanced quotes: fall back to plain whitespace splitting
        words = env.get(ENV_EXTRA_OPTS, "").split()
    for word in reversed(words):  # the JVM keeps the last -D of a name
        if word.startswith(prefix) and word[len(prefix):]:
            return word[len(prefix):]
    return None


class HtpasswdFile:
    """Users and their hashes from an htpasswd file, checked as AuthenticationProviderBasic does."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = dict(users)

    @classmethod
    def parse(cls, content: bytes | str, source: str = CONFIG_KEY) -> HtpasswdFile:
        """SecurityConfigError naming the line (never its hash) for a line that is not `user:hash`
        with a hash scheme Pulsar accepts. Blank lines and `#` comments are skipped."""
        text = content.decode("utf-8", errors="strict") if isinstance(content, bytes) else content
        users: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(":")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                raise SecurityConfigError(source, f"line {number} is not 'user:hash'")
            user, hashed = parts
            if not _accepted_scheme(hashed):
                raise SecurityConfigError(
                    source,
                    f"line {number} (user {user!r}) uses a hash Pulsar does not accept; "
                    "use $apr1$ (htpasswd -m) or DES crypt (htpasswd -d)",
                )
            users[user] = hashed
        return cls(users)

    @classmethod
    def load(cls, location: str, setting: str = CONFIG_KEY) -> HtpasswdFile:
        try:
            return cls.parse(read_key_bytes(location, setting), setting)
        except UnicodeDecodeError:
            raise SecurityConfigError(setting, "password file is not UTF-8 text") from None

    @property
    def users(self) -> frozenset[str]:
        return frozenset(self._users)

    def verify(self, user: str, password: str) -> str:
        """`user` if the password matches its hash, else AuthenticationFailedError (same reason for both)."""
        hashed = self._users.get(user)
        if hashed is None or not _matches(password, hashed):
            raise AuthenticationFailedError(METHOD, UNKNOWN_USER_OR_PASSWORD)
        return user

    def verify_credentials(self, credentials: bytes | str) -> str:
        """Check `user:password` as CONNECT's auth_data carries it (HTTP: base64-decoded header)."""
        if isinstance(credentials, bytes | bytearray | memoryview):
            try:
                credentials = bytes(credentials).decode("utf-8")
            except UnicodeDecodeError:
                raise AuthenticationFailedError(METHOD, "credentials are not UTF-8 'user:password'") from None
        parts = credentials.split(":")
        # Pulsar splits on ':' and wants exactly two non-empty parts (Java drops a trailing empty one).
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise AuthenticationFailedError(METHOD, "Base64 decoded params are invalid (expected user:password)")
        return self.verify(parts[0], parts[1])


def _accepted_scheme(hashed: str) -> bool:
    if hashed.startswith("$apr1$"):
        return len(hashed.split("$")) == 4
    return len(hashed) == 13 and set(hashed) <= _DES_CRYPT_CHARS


def _matches(password: str, hashed: str) -> bool:
    try:
        if hashed.startswith("$apr1$"):
            return bool(apr_md5_crypt.verify(password, hashed))
        return bool(des_crypt.verify(password, hashed))
    except (ValueError, TypeError):  # a password des_crypt cannot take (e.g. a NUL byte)
        return False
