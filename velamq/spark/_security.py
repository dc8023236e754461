"""The data source's authentication and TLS options, with the Pulsar Spark connector's names (SP-5).

    option                          value
    authPluginClassName             token | basic | tls or org.apache.pulsar.client.impl.auth.Authentication*
    (authPlugin)                    the same, velamq's short spelling
    authParams                      the plugin's parameters: token:XXX, file:///path/token,
                                    {"username":"u","password":"p"}, tlsCertFile:c.pem,tlsKeyFile:k.pem
    tlsTrustCertsFilePath           CA certificates (PEM) the broker's and the admin API's certificates chain to
    tlsAllowInsecureConnection      true | false (default false): accept any certificate
    tlsHostnameVerificationEnable   true | false (default false): check the certificate names the host

Given as they are, an option applies to both connections the connector makes: the binary protocol
(`service.url`, pulsar+ssl://) and the admin REST API (`admin.url`, https://). As in the Pulsar
connector, `pulsar.client.<name>` sets it for the client only and `pulsar.admin.<name>` for the
admin API only (winning over the plain name). Both results are picklable ConnectionSecurity
values: the driver and every executor build their own client and AdminClient from them.
"""

from __future__ import annotations

from collections.abc import Mapping

from velamq.client import ConnectionSecurity, InvalidConfigurationError

AUTH_PLUGIN = "authPluginClassName"
AUTH_PLUGIN_SHORT = "authPlugin"
AUTH_PARAMS = "authParams"
TLS_TRUST_CERTS = "tlsTrustCertsFilePath"
TLS_ALLOW_INSECURE = "tlsAllowInsecureConnection"
TLS_HOSTNAME_VERIFICATION = "tlsHostnameVerificationEnable"
CLIENT_PREFIX = "pulsar.client."
ADMIN_PREFIX = "pulsar.admin."

_NAMES = (AUTH_PLUGIN, AUTH_PLUGIN_SHORT, AUTH_PARAMS, TLS_TRUST_CERTS, TLS_ALLOW_INSECURE, TLS_HOSTNAME_VERIFICATION)
SECURITY_OPTIONS = frozenset(prefix + name for prefix in ("", CLIENT_PREFIX, ADMIN_PREFIX) for name in _NAMES)


class SecurityOptionError(InvalidConfigurationError):
    """An authentication or TLS option that cannot be used (the message names it)."""


def parse_security(opts: Mapping[str, str]) -> tuple[ConnectionSecurity, ConnectionSecurity]:
    """(for the client, for the admin API) from options already in their documented spelling."""
    return _one(opts, CLIENT_PREFIX), _one(opts, ADMIN_PREFIX)


def _one(opts: Mapping[str, str], prefix: str) -> ConnectionSecurity:
    def value(name: str) -> tuple[str, str] | None:
        for key in (prefix + name, name):
            if key in opts and opts[key].strip():
                return key, opts[key].strip()
        return None

    plugin = value(AUTH_PLUGIN) or value(AUTH_PLUGIN_SHORT)
    params = value(AUTH_PARAMS)
    if params is not None and plugin is None:
        raise SecurityOptionError(f"option {params[0]!r} needs {prefix + AUTH_PLUGIN!r} (or {AUTH_PLUGIN!r})")
    trust = value(TLS_TRUST_CERTS)
    try:
        return ConnectionSecurity(
            auth_plugin=plugin[1] if plugin else None,
            auth_params=params[1] if params else "",
            tls_trust_certs_file_path=trust[1] if trust else None,
            tls_allow_insecure_connection=_bool(value(TLS_ALLOW_INSECURE)),
            tls_validate_hostname=_bool(value(TLS_HOSTNAME_VERIFICATION)),
        )
    except InvalidConfigurationError as exc:
        named = plugin[0] if plugin else AUTH_PLUGIN
        raise SecurityOptionError(f"option {named!r} / {AUTH_PARAMS!r}: {exc}") from None


def _bool(item: tuple[str, str] | None) -> bool:
    if item is None:
        return False
    key, text = item
    if text.lower() not in ("true", "false"):
        raise SecurityOptionError(f"option {key!r} must be true or false, not {text!r}")
    return text.lower() == "true"
