"""The authentication service: provider choice by method, anonymous role, refresh, HTTP, settings,
and garbage auth data that must only ever give our AuthenticationFailedError."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from velamq.security import (
    BASIC_PROVIDER,
    TLS_PROVIDER,
    TOKEN_PROVIDER,
    AuthenticationFailedError,
    AuthenticationProviderBasic,
    AuthenticationProviderTls,
    AuthenticationProviderToken,
    AuthenticationService,
    AuthResult,
    HtpasswdFile,
    SecurityConfigError,
    SecuritySettings,
    TokenValidator,
    build_authentication_service,
    create_secret_key,
    create_token,
)
from velamq.testing._certs import make_test_pki

APR1_LINE = "admin:$apr1$velamqXY$U6tzalcEUQ3SQkIW6pSGp/"  # password "correct horse"
NOW_MS = 1_700_000_000_000


class FakeClock:
    def __init__(self) -> None:
        self.now = NOW_MS

    def now_ms(self) -> int:
        return self.now

    def monotonic_s(self) -> float:
        return self.now / 1000


KEY = create_secret_key()
CLOCK = FakeClock()


def _service(anonymous: str | None = "anonymous") -> AuthenticationService:
    return AuthenticationService(
        [
            AuthenticationProviderTls(),
            AuthenticationProviderToken(TokenValidator(KEY, clock=CLOCK)),
            AuthenticationProviderBasic(HtpasswdFile.parse(APR1_LINE)),
        ],
        anonymous,
    )


@pytest.fixture(scope="module")
def client_der(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    pki = make_test_pki(tmp_path_factory.mktemp("pki"), client_names=["superUser"])
    cert = x509.load_pem_x509_certificate(pki.client("superUser")[0].read_bytes())
    return cert.public_bytes(serialization.Encoding.DER)


def test_provider_is_chosen_by_method_name(client_der: bytes) -> None:
    service = _service()
    assert service.methods == ("tls", "token", "basic")
    assert service.authenticate_connect("token", create_token(KEY, "token-principal").encode()) == AuthResult(
        "token-principal", "token", None
    )
    assert service.authenticate_connect("basic", b"admin:correct horse").role == "admin"
    assert service.authenticate_connect("tls", b"", client_der) == AuthResult("superUser", "tls")


def test_unknown_method_or_none_is_anonymous_when_configured() -> None:
    service = _service()
    for method in (None, "none", "unknown", ""):
        assert service.authenticate_connect(method, b"admin:correct horse") == AuthResult("anonymous", "")
    with pytest.raises(AuthenticationFailedError, match="No anonymous role"):
        _service(anonymous=None).authenticate_connect("none", None)
    assert _service(anonymous="  ").anonymous_role is None


def test_refusals_per_provider(client_der: bytes) -> None:
    service = _service()
    other_key_token = create_token(create_secret_key(), "superUser")
    cases = [
        ("token", other_key_token.encode(), None),
        ("token", b"", None),
        ("basic", b"admin:wrong", None),
        ("basic", b"nobody:correct horse", None),
        ("tls", b"", None),  # TLS method on a connection without a client certificate
    ]
    for method, data, cert in cases:
        with pytest.raises(AuthenticationFailedError) as info:
            service.authenticate_connect(method, data, cert)
        assert info.value.code == 3 and info.value.http_status == 401
        assert other_key_token not in str(info.value) and "wrong" not in str(info.value)


def test_token_expiry_is_reported_for_refresh_and_refresh_keeps_the_role() -> None:
    service = _service()
    first = service.authenticate_connect("token", create_token(KEY, "app", expires_at_s=NOW_MS // 1000 + 60).encode())
    assert first.expires_at_ms == NOW_MS + 60_000
    assert not first.expired(NOW_MS) and first.expired(NOW_MS + 60_000)
    renewed = service.authenticate_refresh(
        first, "token", create_token(KEY, "app", expires_at_s=NOW_MS // 1000 + 3600).encode()
    )
    assert renewed.role == "app" and renewed.expires_at_ms == NOW_MS + 3_600_000
    with pytest.raises(AuthenticationFailedError, match="new role is different"):
        service.authenticate_refresh(first, "token", create_token(KEY, "someone-else").encode())
    with pytest.raises(AuthenticationFailedError, match="another authentication method"):
        service.authenticate_refresh(first, "basic", b"admin:correct horse")
    with pytest.raises(AuthenticationFailedError, match="another authentication method"):
        service.authenticate_refresh(AuthResult("anonymous", ""), "token", create_token(KEY, "anonymous").encode())
    CLOCK.now = NOW_MS + 60_000
    try:
        with pytest.raises(AuthenticationFailedError, match="expired"):
            service.authenticate_refresh(
                first, "token", create_token(KEY, "app", expires_at_s=NOW_MS // 1000 + 60).encode()
            )
    finally:
        CLOCK.now = NOW_MS


def test_http_headers(client_der: bytes) -> None:
    service = _service()
    token = create_token(KEY, "token-principal")
    basic = "Basic " + base64.b64encode(b"admin:correct horse").decode()
    assert service.authenticate_http(f"Bearer {token}").role == "token-principal"
    assert service.authenticate_http(basic).role == "admin"
    assert service.authenticate_http(basic, method_header="basic").role == "admin"
    assert service.authenticate_http(None, peer_cert_der=client_der).role == "superUser"
    assert service.authenticate_http(None) == AuthResult("anonymous", "")
    for bad in (
        "Bearer " + create_token(create_secret_key(), "x"),
        "Basic !!!",
        "Basic " + "YWRtaW46d3Jvbmc=",
        "Digest x",
    ):
        with pytest.raises(AuthenticationFailedError):
            service.authenticate_http(bad)  # presented credentials that fail are refused, never anonymous
    with pytest.raises(AuthenticationFailedError, match="Unsupported authentication method"):
        service.authenticate_http(basic, method_header="kerberos")
    with pytest.raises(AuthenticationFailedError, match="Authentication required"):
        _service(anonymous=None).authenticate_http(None)
    with pytest.raises(AuthenticationFailedError, match="Invalid HTTP Authorization"):
        service.authenticate_http(basic, method_header="token")


def test_duplicate_method_is_a_config_error() -> None:
    with pytest.raises(SecurityConfigError):
        AuthenticationService([AuthenticationProviderTls(), AuthenticationProviderTls()])


def test_settings_from_a_pulsar_standalone_conf(tmp_path: Path) -> None:
    secret = tmp_path / "secret.key"
    secret.write_bytes(KEY)
    htpasswd = tmp_path / ".htpasswd"
    htpasswd.write_text(APR1_LINE + "\n")
    props = {
        "brokerServicePortTls": "6651",
        "webServicePortTls": "8443",
        "tlsCertificateFilePath": "test-conf/broker-cert.pem",
        "tlsKeyFilePath": "test-conf/broker-key.pem",
        "tlsTrustCertsFilePath": "test-conf/cacert.pem",
        "tlsAllowInsecureConnection": "false",
        "anonymousUserRole": "anonymous",
        "authenticationEnabled": "true",
        "authenticationProviders": f"{TLS_PROVIDER},{TOKEN_PROVIDER},{BASIC_PROVIDER}",
        "authorizationEnabled": "true",
        "tokenSecretKey": f"file://{secret}",
        "superUserRoles": "localhost,superUser,admin",
    }
    settings = SecuritySettings.from_properties(props, base_dir=tmp_path)
    assert settings.tls is not None and settings.tls.cert_file == tmp_path / "test-conf/broker-cert.pem"
    assert (settings.broker_port_tls, settings.web_port_tls) == (6651, 8443)
    assert settings.super_user_roles == {"localhost", "superUser", "admin"}
    assert settings.authorization_enabled and settings.authentication_refresh_check_s == 60
    env = {"PULSAR_EXTRA_OPTS": f"-Dpulsar.auth.basic.conf={htpasswd}"}
    service = build_authentication_service(settings, environ=env)
    assert service is not None and service.methods == ("tls", "token", "basic")
    assert service.authenticate_connect("basic", b"admin:correct horse").role == "admin"
    assert service.authenticate_connect("token", create_token(KEY, "p").encode()).role == "p"

    with pytest.raises(SecurityConfigError, match="No basic authentication config"):
        build_authentication_service(settings, environ={})
    unknown = SecuritySettings.from_properties({**props, "authenticationProviders": "com.example.Kerberos"})
    with pytest.raises(SecurityConfigError, match=r"no provider 'com\.example\.Kerberos'"):
        build_authentication_service(unknown, environ=env)
    assert build_authentication_service(SecuritySettings.from_properties({})) is None
    for key, value in [
        ("authenticationEnabled", "maybe"),
        ("brokerServicePortTls", "x"),
        ("webServicePortTls", "70000"),
        ("authenticationRefreshCheckSeconds", "soon"),
    ]:
        with pytest.raises(SecurityConfigError, match=key):
            SecuritySettings.from_properties({**props, key: value})


# ---------------------------------------------------------------------------- garbage


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    method=st.sampled_from(["token", "basic", "tls", "none", "junk"]) | st.text(max_size=20),
    data=st.binary(max_size=300)
    | st.builds(
        lambda a, b, c: b".".join([a, b, c]), st.binary(max_size=60), st.binary(max_size=60), st.binary(max_size=60)
    )
    | st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
    cert=st.none() | st.binary(max_size=200),
)
def test_garbage_auth_data_gives_our_error_or_anonymous(method: str, data: bytes, cert: bytes | None) -> None:
    try:
        result = _service().authenticate_connect(method, data, cert)
    except AuthenticationFailedError:
        return
    assert result == AuthResult("anonymous", "")


@settings(max_examples=200, deadline=None)
@given(header=st.none() | st.text(max_size=200), method=st.none() | st.sampled_from(["token", "basic", "tls", "x"]))
def test_garbage_http_headers_give_our_error(header: str | None, method: str | None) -> None:
    try:
        _service(anonymous=None).authenticate_http(header, method)
    except AuthenticationFailedError:
        return
    raise AssertionError("garbage authenticated")


# The service turns any foreign exception into AuthenticationFailedError at one boundary; each provider
# must not need that net, so they are fed garbage directly too.
_JWT_LIKE = st.builds(
    lambda parts: ".".join(parts),
    st.lists(
        st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=", max_size=80),
        min_size=1,
        max_size=4,
    ),
)
_B64_JSON_JWT = st.builds(
    lambda header, claims: (
        ".".join(
            base64.urlsafe_b64encode(part.encode("utf-8", "surrogatepass")).rstrip(b"=").decode()
            for part in (header, claims)
        )
        + ".c2ln"
    ),
    st.sampled_from(
        [
            '{"alg":"HS256"}',
            '{"alg":"none"}',
            '{"alg":["HS256"]}',
            "[]",
            "{",
            '{"alg":"HS256","crit":["x"]}',
            '{"alg":"HS256","kid":1}',
        ]
    ),
    st.sampled_from(
        ['{"sub":"x"}', '{"sub":1}', "[]", "null", '{"exp":"x"}', '{"exp":1e999}', '{"nbf":NaN}', '{"sub":["a"]}']
    ),
)


@settings(max_examples=300, deadline=None)
@given(token=st.binary(max_size=300) | _JWT_LIKE.map(str.encode) | _B64_JSON_JWT.map(str.encode))
def test_token_validator_only_raises_authentication_error(token: bytes) -> None:
    try:
        TokenValidator(KEY, clock=CLOCK, audience_claim="aud", audience="b").validate(token)
    except AuthenticationFailedError:
        pass


@settings(max_examples=300, deadline=None)
@given(credentials=st.binary(max_size=100) | st.text(max_size=60).map(lambda s: s.encode("utf-8", "surrogatepass")))
def test_basic_credentials_only_raise_authentication_error(credentials: bytes) -> None:
    passwords = HtpasswdFile.parse(APR1_LINE + "\nbob:vQA7YooX1Xo.Y\n")
    try:
        passwords.verify_credentials(credentials)
    except AuthenticationFailedError:
        pass


@settings(max_examples=200, deadline=None)
@given(der=st.binary(max_size=400))
def test_certificate_role_only_raises_authentication_error(der: bytes) -> None:
    from velamq.security import certificate_role

    try:
        certificate_role(der)
    except AuthenticationFailedError:
        pass
