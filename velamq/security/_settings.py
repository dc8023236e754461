"""Security settings under Pulsar's broker.conf / standalone.conf names, and what they build.

    settings = SecuritySettings.from_properties(props)        # props: the config file's key=value pairs
    authn = build_authentication_service(settings)            # None when authenticationEnabled=false
    tls = ReloadingServerContext(settings.tls) if settings.tls_enabled else None

`SECURITY_KEYS` lists every key read here, so the broker's config loader can accept them (phase 2
wires this into BrokerConfig). Values are strings as in the file; booleans are "true"/"false".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from velamq._clock import Clock, system_clock
from velamq.security._authentication import (
    BASIC_PROVIDER,
    TLS_PROVIDER,
    TOKEN_PROVIDER,
    AuthenticationProvider,
    AuthenticationProviderBasic,
    AuthenticationProviderTls,
    AuthenticationProviderToken,
    AuthenticationService,
)
from velamq.security._errors import SecurityConfigError
from velamq.security._htpasswd import CONFIG_KEY as BASIC_AUTH_CONF
from velamq.security._htpasswd import HtpasswdFile, basic_auth_conf_location
from velamq.security._tls import TlsServerSettings, parse_flag, parse_list
from velamq.security._tokens import TokenValidator

authentication_refresh_check_s_default: Final = 60

_TLS_KEYS: Final = (
    "tlsCertificateFilePath",
    "tlsKeyFilePath",
    "tlsTrustCertsFilePath",
    "tlsRequireTrustedClientCertOnConnect",
    "tlsAllowInsecureConnection",
    "tlsProtocols",
    "tlsCiphers",
    "tlsCertRefreshCheckDurationSec",
)
_TOKEN_KEYS: Final = (
    "tokenSecretKey",
    "tokenPublicKey",
    "tokenPublicAlg",
    "tokenAuthClaim",
    "tokenAudienceClaim",
    "tokenAudience",
)
SECURITY_KEYS: Final = (
    "authenticationEnabled",
    "authenticationProviders",
    "anonymousUserRole",
    "authenticationRefreshCheckSeconds",
    "authenticateMetricsEndpoint",
    "authorizationEnabled",
    "superUserRoles",
    "authorizationAllowWildcardsMatching",
    BASIC_AUTH_CONF,
    "brokerServicePortTls",
    "webServicePortTls",
    "tlsEnabled",
    *_TOKEN_KEYS,
    *_TLS_KEYS,
)


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    authentication_enabled: bool = False
    authentication_providers: tuple[str, ...] = ()
    anonymous_user_role: str | None = None
    authentication_refresh_check_s: int = authentication_refresh_check_s_default
    authenticate_metrics_endpoint: bool = False
    authorization_enabled: bool = False
    super_user_roles: frozenset[str] = frozenset()
    authorization_allow_wildcards_matching: bool = False
    broker_port_tls: int | None = None  # pulsar+ssl:// port (Pulsar: 6651 in its example configs)
    web_port_tls: int | None = None  # https:// port (Pulsar: 8443)
    tls: TlsServerSettings | None = None  # set when a TLS port is
    # The raw key=value pairs the providers read (token keys, basicAuthConf).
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def tls_enabled(self) -> bool:
        return self.tls is not None

    @classmethod
    def from_properties(cls, props: Mapping[str, str], base_dir: Path | None = None) -> SecuritySettings:
        """From a config file's pairs; paths in TLS keys are taken relative to `base_dir` if given."""
        broker_tls, web_tls = _port(props, "brokerServicePortTls"), _port(props, "webServicePortTls")
        tls = None
        if broker_tls is not None or web_tls is not None:
            tls = TlsServerSettings.from_properties(props, base_dir)
        refresh = props.get("authenticationRefreshCheckSeconds", "").strip()
        try:
            refresh_s = int(refresh) if refresh else authentication_refresh_check_s_default
        except ValueError:
            raise SecurityConfigError("authenticationRefreshCheckSeconds", f"not an integer: {refresh!r}") from None
        return cls(
            authentication_enabled=parse_flag(props, "authenticationEnabled"),
            authentication_providers=parse_list(props.get("authenticationProviders", "")),
            anonymous_user_role=props.get("anonymousUserRole", "").strip() or None,
            authentication_refresh_check_s=refresh_s,
            authenticate_metrics_endpoint=parse_flag(props, "authenticateMetricsEndpoint"),
            authorization_enabled=parse_flag(props, "authorizationEnabled"),
            super_user_roles=frozenset(parse_list(props.get("superUserRoles", ""))),
            authorization_allow_wildcards_matching=parse_flag(props, "authorizationAllowWildcardsMatching"),
            broker_port_tls=broker_tls,
            web_port_tls=web_tls,
            tls=tls,
            properties={k: v for k, v in props.items() if k in _TOKEN_KEYS or k == BASIC_AUTH_CONF},
        )


def build_authentication_service(
    settings: SecuritySettings, environ: Mapping[str, str] | None = None, clock: Clock = system_clock
) -> AuthenticationService | None:
    """The providers `authenticationProviders` names, loaded now (so a bad key fails at start);
    None when authentication is disabled."""
    if not settings.authentication_enabled:
        return None
    props = settings.properties
    providers: list[AuthenticationProvider] = []
    for class_name in settings.authentication_providers:
        if class_name == TOKEN_PROVIDER:
            validator = TokenValidator.from_settings(
                secret_key=props.get("tokenSecretKey"),
                public_key=props.get("tokenPublicKey"),
                public_alg=props.get("tokenPublicAlg") or None,
                auth_claim=props.get("tokenAuthClaim") or None,
                audience_claim=props.get("tokenAudienceClaim") or None,
                audience=props.get("tokenAudience") or None,
                clock=clock,
            )
            providers.append(AuthenticationProviderToken(validator))
        elif class_name == BASIC_PROVIDER:
            location = basic_auth_conf_location(props, os.environ if environ is None else environ)
            if location is None:
                raise SecurityConfigError(
                    BASIC_AUTH_CONF, "No basic authentication config provided (basicAuthConf or "
                    "-Dpulsar.auth.basic.conf= in PULSAR_EXTRA_OPTS)"
                )
            providers.append(AuthenticationProviderBasic(HtpasswdFile.load(location)))
        elif class_name == TLS_PROVIDER:
            providers.append(AuthenticationProviderTls())
        else:
            known = ", ".join(p.rsplit(".", 1)[1] for p in (TOKEN_PROVIDER, BASIC_PROVIDER, TLS_PROVIDER))
            raise SecurityConfigError(
                "authenticationProviders", f"velamq has no provider {class_name!r} (it has {known})"
            )
    return AuthenticationService(providers, settings.anonymous_user_role)



def _port(props: Mapping[str, str], key: str) -> int | None:
    value = props.get(key, "").strip()
    if not value:
        return None
    try:
        port = int(value)
    except ValueError:
        raise SecurityConfigError(key, f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise SecurityConfigError(key, f"port {port} out of range")
    return port
