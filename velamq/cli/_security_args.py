"""The authentication and TLS flags of `velamq admin` and `velamq perf`, with pulsar-admin's and
pulsar-perf's names, and the client.conf they can come from. Both tools turn them into one
velamq.client.ConnectionSecurity, which both velamq's client and its AdminClient take.

    --auth-plugin NAME        token | basic | tls, or the Java class name (org.apache.pulsar.client.impl.auth.*)
    --auth-params PARAMS      that plugin's parameters: token:xxx | file:///path, {"username":..}, tlsCertFile:..
    --token TOKEN             velamq's shorthand for --auth-plugin token --auth-params token:TOKEN
                              (a file:///path or file:path value is read as a token file)
    --tls-trust-certs-file-path FILE   CAs the server certificate must chain to (pulsar-perf: --trust-cert-file)
    --tls-allow-insecure      accept any server certificate
    --tls-enable-hostname-verification  check the server certificate names the host
    --client-conf FILE        a Pulsar client.conf (default $PULSAR_CLIENT_CONF / $VELAMQ_CLIENT_CONF)

client.conf is Java properties, read as pulsar-admin reads conf/client.conf: webServiceUrl,
brokerServiceUrl, authPlugin, authParams, tlsTrustCertsFilePath, tlsAllowInsecureConnection,
tlsEnableHostnameVerification. A flag wins over the file; other keys are ignored as pulsar-admin does.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from velamq.client import ConnectionSecurity, InvalidConfigurationError

CONF_ENV = ("VELAMQ_CLIENT_CONF", "PULSAR_CLIENT_CONF")


class SecurityArgumentError(InvalidConfigurationError):
    """The auth/TLS flags or the client.conf cannot be used (the message says which)."""


@dataclass(frozen=True, slots=True)
class ClientConf:
    """What a client.conf says (empty when there is none)."""

    web_service_url: str | None = None
    broker_service_url: str | None = None
    security: ConnectionSecurity = field(default_factory=ConnectionSecurity)


def add_security_arguments(parser: argparse.ArgumentParser, *, with_token: bool = True) -> None:
    group = parser.add_argument_group("authentication and TLS (pulsar-admin / pulsar-perf names)")
    group.add_argument("--auth-plugin", "--auth_plugin", dest="auth_plugin", default=None,
                       help="token, basic, tls or the Java class name")
    group.add_argument("--auth-params", "--auth_params", dest="auth_params", default=None,
                       help="the plugin's parameters, e.g. token:XXX, file:///path/token, "
                            '{"username":"u","password":"p"}, tlsCertFile:c.pem,tlsKeyFile:k.pem')
    if with_token:
        group.add_argument("--token", default=None,
                           help="a token (or file:///path to one): --auth-plugin token in short")
    group.add_argument("--tls-trust-certs-file-path", "--trust-cert-file", dest="tls_trust_certs_file_path",
                       default=None, help="CA certificates (PEM) the server's certificate must chain to")
    group.add_argument("--tls-allow-insecure", "--tls-allow-insecure-connection", dest="tls_allow_insecure",
                       action="store_true", default=None, help="accept any server certificate")
    group.add_argument("--tls-enable-hostname-verification", dest="tls_hostname_verification",
                       action="store_true", default=None, help="check that the certificate names the host")
    group.add_argument("--client-conf", "-cf", "--conf-file", dest="client_conf", default=None,
                       help="a Pulsar client.conf (default $VELAMQ_CLIENT_CONF or $PULSAR_CLIENT_CONF)")


def read_client_conf(path: str | Path | None) -> ClientConf:
    """The client.conf at `path` (None: the one named by the environment, if any)."""
    if path is None:
        path = next((os.environ[name] for name in CONF_ENV if os.environ.get(name)), None)
        if path is None:
            return ClientConf()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SecurityArgumentError(f"cannot read the client configuration {path}: {exc}") from None
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, sep, value = line.partition(":")
        values[key.strip()] = value.strip()
    try:
        security = ConnectionSecurity(
            auth_plugin=values.get("authPlugin") or None,
            auth_params=values.get("authParams", "") if values.get("authPlugin") else "",
            tls_trust_certs_file_path=values.get("tlsTrustCertsFilePath") or None,
            tls_allow_insecure_connection=_true(values.get("tlsAllowInsecureConnection")),
            tls_validate_hostname=_true(values.get("tlsEnableHostnameVerification")),
        )
    except InvalidConfigurationError as exc:
        raise SecurityArgumentError(f"{path}: {exc}") from None
    return ClientConf(values.get("webServiceUrl") or None, values.get("brokerServiceUrl") or None, security)


def security_from_args(args: argparse.Namespace, conf: ClientConf | None = None) -> ConnectionSecurity:
    """The flags over the client.conf over nothing."""
    conf = conf if conf is not None else read_client_conf(getattr(args, "client_conf", None))
    base = conf.security
    plugin, params = base.auth_plugin, base.auth_params
    token = getattr(args, "token", None)
    if token is not None and args.auth_plugin is not None:
        raise SecurityArgumentError("give --token or --auth-plugin, not both")
    if token is not None:
        plugin, params = "token", token if token.startswith(("file:", "token:")) else f"token:{token}"
    elif args.auth_plugin is not None:
        plugin, params = args.auth_plugin, args.auth_params or ""
    elif args.auth_params is not None:
        raise SecurityArgumentError("--auth-params needs --auth-plugin")
    try:
        return ConnectionSecurity(
            auth_plugin=plugin,
            auth_params=params,
            tls_trust_certs_file_path=args.tls_trust_certs_file_path or base.tls_trust_certs_file_path,
            tls_allow_insecure_connection=_flag(args.tls_allow_insecure, base.tls_allow_insecure_connection),
            tls_validate_hostname=_flag(args.tls_hostname_verification, base.tls_validate_hostname),
        )
    except InvalidConfigurationError as exc:
        raise SecurityArgumentError(str(exc)) from None


def _flag(given: bool | None, default: bool) -> bool:
    return default if given is None else given


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"
