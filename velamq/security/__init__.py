"""Security for the broker and the admin API: TLS, authentication, authorization (tier 1, sans-IO).

    settings = SecuritySettings.from_properties(props)          # Pulsar's standalone.conf keys
    authn = build_authentication_service(settings)              # None if authenticationEnabled=false
    result = authn.authenticate_connect("token", auth_data, peer_cert_der)   # -> AuthResult(role, ...)
    tls = ReloadingServerContext(settings.tls); server(ssl=tls.context); tls.check() now and then
    authz = AuthorizationModel(settings.super_user_roles)
    authz.load_tenant("public", tenant_info); authz.load_namespace("public/default", policies)
    authz.allow_topic_operation(result.role, TopicOperation.PRODUCE, "persistent://public/default/t")

Keys and tokens (also behind `velamq tokens`): read_key_bytes, create_secret_key, create_key_pair,
create_token, TokenValidator. Grants as stored in namespace policies: velamq.security._auth_policies.

This package does no network I/O and owns no task: the broker's and the admin server's loops call
it. The client never imports it (velamq.client has its own auth plugins and TLS context builder).
"""

from velamq.security._authentication import (
    BASIC_PROVIDER,
    HTTP_METHOD_HEADER,
    REFRESH_CHALLENGE,
    TLS_PROVIDER,
    TOKEN_PROVIDER,
    AuthenticationProvider,
    AuthenticationProviderBasic,
    AuthenticationProviderTls,
    AuthenticationProviderToken,
    AuthenticationService,
    AuthResult,
)
from velamq.security._authorization import (
    AuthAction,
    AuthorizationModel,
    NamespaceAuth,
    NamespaceOperation,
    TopicOperation,
)
from velamq.security._errors import (
    AccessDeniedError,
    AuthenticationFailedError,
    InvalidGrantError,
    SecurityConfigError,
    SecurityError,
)
from velamq.security._htpasswd import HtpasswdFile, basic_auth_conf_location
from velamq.security._keys import (
    ALGORITHMS,
    KeyPairDer,
    create_key_pair,
    create_secret_key,
    decode_private_key,
    decode_public_key,
    decode_secret_key,
    family_of,
    key_family,
    read_key_bytes,
)
from velamq.security._settings import SECURITY_KEYS, SecuritySettings, build_authentication_service
from velamq.security._tls import ReloadingServerContext, TlsServerSettings, build_server_context, certificate_role
from velamq.security._tokens import TokenIdentity, TokenValidator, create_token

__all__ = [
    "ALGORITHMS",
    "BASIC_PROVIDER",
    "HTTP_METHOD_HEADER",
    "REFRESH_CHALLENGE",
    "SECURITY_KEYS",
    "TLS_PROVIDER",
    "TOKEN_PROVIDER",
    "AccessDeniedError",
    "AuthAction",
    "AuthResult",
    "AuthenticationFailedError",
    "AuthenticationProvider",
    "AuthenticationProviderBasic",
    "AuthenticationProviderTls",
    "AuthenticationProviderToken",
    "AuthenticationService",
    "AuthorizationModel",
    "HtpasswdFile",
    "InvalidGrantError",
    "KeyPairDer",
    "NamespaceAuth",
    "NamespaceOperation",
    "ReloadingServerContext",
    "SecurityConfigError",
    "SecurityError",
    "SecuritySettings",
    "TlsServerSettings",
    "TokenIdentity",
    "TokenValidator",
    "TopicOperation",
    "basic_auth_conf_location",
    "build_authentication_service",
    "build_server_context",
    "certificate_role",
    "create_key_pair",
    "create_secret_key",
    "create_token",
    "decode_private_key",
    "decode_public_key",
    "decode_secret_key",
    "family_of",
    "key_family",
    "read_key_bytes",
]
