"""How velamq's tools carry credentials and TLS settings: the AdminClient's headers and https
context against a small real https server (a stand-in for any Pulsar admin API: the outside world),
`velamq admin` and `velamq perf` flags and client.conf, the Spark options, and the client's checks
of what it is given."""

from __future__ import annotations

import base64
import http.server
import json
import pickle
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from velamq.cli._main import build_parser, main
from velamq.cli._perf import build_plans
from velamq.cli._security_args import SecurityArgumentError, read_client_conf, security_from_args
from velamq.client import (
    AdminClient,
    AdminError,
    AsyncClient,
    Authentication,
    AuthenticationBasic,
    AuthenticationToken,
    ConnectionSecurity,
    InvalidConfigurationError,
)
from velamq.client.transport._pool import parse_service_url
from velamq.spark._options import VelamqOptionError, parse_sink, parse_source
from velamq.testing._certs import CertificateSet, make_test_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> CertificateSet:
    return make_test_pki(tmp_path_factory.mktemp("pki"))


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the Authorization header it got; 401 without one, as Pulsar does."""

    seen: list[str | None] = []

    def do_GET(self) -> None:
        header = self.headers.get("Authorization")
        type(self).seen.append(header)
        status, body = (200, {"authorization": header}) if header else (401, {"reason": "Authentication required"})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def https_url(pki: CertificateSet) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# ---- AdminClient -------------------------------------------------------------------------------


def test_admin_client_sends_a_bearer_token_over_https(pki: CertificateSet, https_url: str) -> None:
    security = ConnectionSecurity(auth_plugin="token", auth_params="token:abc.def.ghi",
                                  tls_trust_certs_file_path=str(pki.ca_cert), tls_validate_hostname=True)
    assert AdminClient(https_url, security=security).request("GET", "/admin/v2/tenants") == {
        "authorization": "Bearer abc.def.ghi"}


def test_admin_client_basic_credentials_and_a_supplier_asked_per_request(pki: CertificateSet, https_url: str) -> None:
    trust = ConnectionSecurity(tls_trust_certs_file_path=str(pki.ca_cert))
    basic = AdminClient(https_url, security=trust, authentication=AuthenticationBasic("app", "pw"))
    expected = "Basic " + base64.b64encode(b"app:pw").decode()
    assert basic.request("GET", "/admin/v2/clusters") == {"authorization": expected}
    tokens = iter(["t1", "t2"])
    rotating = AdminClient(https_url, security=trust, authentication=AuthenticationToken(lambda: next(tokens)))
    assert [rotating.request("GET", "/x")["authorization"] for _ in range(2)] == ["Bearer t1", "Bearer t2"]


def test_admin_client_refusals_and_untrusted_servers(pki: CertificateSet, https_url: str, tmp_path: Path) -> None:
    with pytest.raises(AdminError) as refused:
        trusting = ConnectionSecurity(tls_trust_certs_file_path=str(pki.ca_cert))
        AdminClient(https_url, security=trusting).request("GET", "/x")
    assert refused.value.status == 401 and refused.value.reason == "Authentication required"
    stranger = make_test_pki(tmp_path / "stranger")
    with pytest.raises(AdminError, match="CERTIFICATE_VERIFY_FAILED") as untrusted:
        other_ca = ConnectionSecurity(tls_trust_certs_file_path=str(stranger.ca_cert))
        AdminClient(https_url, security=other_ca).request("GET", "/x")
    assert untrusted.value.status == 0
    insecure = ConnectionSecurity(auth_plugin="token", auth_params="tok", tls_allow_insecure_connection=True)
    assert AdminClient(https_url, security=insecure).request("GET", "/x") == {"authorization": "Bearer tok"}


def test_admin_client_with_security_pickles_for_spark_executors(pki: CertificateSet, https_url: str,
                                                                 tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    security = ConnectionSecurity(auth_plugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
                                  auth_params=f"file://{token_file}", tls_trust_certs_file_path=str(pki.ca_cert))
    client = AdminClient(https_url, security=security)
    client.request("GET", "/x")  # builds (and caches) its SSL context, which must not be pickled
    copy = pickle.loads(pickle.dumps(client))
    token_file.write_text("rotated\n")
    assert copy.request("GET", "/x") == {"authorization": "Bearer rotated"}
    assert "file://" not in repr(security)  # parameters (a token, a password) are never shown


# ---- the client's own checks -------------------------------------------------------------------


def test_pulsar_ssl_urls_and_refused_objects(pki: CertificateSet, tmp_path: Path) -> None:
    assert parse_service_url("pulsar+ssl://a,b:7000") == [("a", 6651), ("b", 7000)]
    with pytest.raises(InvalidConfigurationError, match=r"velamq\.client\.AuthenticationToken"):
        AsyncClient("pulsar://localhost:6650", authentication=pulsar.AuthenticationToken("x"))
    with pytest.raises(InvalidConfigurationError, match="cannot load CA certificates"):
        AsyncClient("pulsar+ssl://localhost:6651", tls_trust_certs_file_path=str(tmp_path / "missing.pem"))
    with pytest.raises(InvalidConfigurationError, match="unknown authentication plugin"):
        ConnectionSecurity(auth_plugin="someoldjunk.so", auth_params="blah")
    with pytest.raises(InvalidConfigurationError, match="without an authentication plugin"):
        ConnectionSecurity(auth_params="token:x")
    same = Authentication("token", "token:abc")
    assert pickle.loads(pickle.dumps(same)).auth_data() == b"abc"


# ---- velamq admin / velamq perf ----------------------------------------------------------------


def test_velamq_admin_with_token_and_trust_file(pki: CertificateSet, https_url: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _Recorder.seen.clear()
    code = main(["admin", "--admin-url", https_url, "--token", "my.jwt.token", "--tls-trust-certs-file-path",
                 str(pki.ca_cert), "--json", "tenants", "list"])
    assert code == 0 and _Recorder.seen == ["Bearer my.jwt.token"]
    assert json.loads(capsys.readouterr().out) == {"authorization": "Bearer my.jwt.token"}
    assert main(["admin", "--admin-url", https_url, "--tls-allow-insecure", "tenants", "list"]) == 1
    assert "Authentication required (HTTP 401)" in capsys.readouterr().err


def test_velamq_admin_reads_a_client_conf(pki: CertificateSet, https_url: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "client.conf"
    conf.write_text(
        "# as pulsar-admin's conf/client.conf\n"
        f"webServiceUrl={https_url}\n"
        "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationBasic\n"
        'authParams={"username":"superUser","password":"pw"}\n'
        f"tlsTrustCertsFilePath={pki.ca_cert}\n"
        "tlsAllowInsecureConnection=false\n"
    )
    _Recorder.seen.clear()
    assert main(["admin", "--client-conf", str(conf), "tenants", "list"]) == 0
    assert _Recorder.seen == ["Basic " + base64.b64encode(b"superUser:pw").decode()]
    # Flags win over the file: another plugin, the file's TLS settings kept.
    args = build_parser().parse_args(["admin", "--client-conf", str(conf), "--auth-plugin", "token",
                                      "--auth-params", "token:zzz", "tenants", "list"])
    security = security_from_args(args, read_client_conf(conf))
    assert security.auth_plugin == "token" and security.tls_trust_certs_file_path == str(pki.ca_cert)
    assert main(["admin", "--token", "a", "--auth-plugin", "token", "tenants", "list"]) == 2
    assert "not both" in capsys.readouterr().err


def test_velamq_perf_takes_pulsar_perf_security_flags(pki: CertificateSet, tmp_path: Path) -> None:
    args = build_parser().parse_args([
        "perf", "produce", "-u", "pulsar+ssl://broker:6651", "--auth-plugin",
        "org.apache.pulsar.client.impl.auth.AuthenticationToken", "--auth-params", "token:perf-token",
        "--trust-cert-file", str(pki.ca_cert), "--tls-allow-insecure", "-m", "1", "t",
    ])
    (plan,), _, _ = build_plans(args)
    options = pickle.loads(pickle.dumps(plan)).client_options  # plans cross to spawned workers
    assert options["authentication"].auth_data() == b"perf-token"
    assert options["tls_trust_certs_file_path"] == str(pki.ca_cert)
    assert options["tls_allow_insecure_connection"] is True
    conf = tmp_path / "client.conf"
    conf.write_text("brokerServiceUrl=pulsar+ssl://from-conf:6651\nauthPlugin=token\nauthParams=token:c\n")
    (plan,), _, _ = build_plans(build_parser().parse_args(["perf", "consume", "-cf", str(conf), "t"]))
    assert plan.service_url == "pulsar+ssl://from-conf:6651"
    assert plan.client_options["authentication"].auth_data() == b"c"
    with pytest.raises(SecurityArgumentError, match="needs --auth-plugin"):
        security_from_args(build_parser().parse_args(["perf", "produce", "--auth-params", "x", "t"]))


# ---- Spark options -----------------------------------------------------------------------------


def test_spark_options_take_the_pulsar_connectors_names(pki: CertificateSet) -> None:
    base = {"service.url": "pulsar+ssl://b:6651", "admin.url": "https://b:8443", "topic": "t"}
    source = parse_source({**base, "authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
                           "authParams": "token:spark", "tlsTrustCertsFilePath": str(pki.ca_cert),
                           "tlsAllowInsecureConnection": "false"}, streaming=False)
    for security in (source.client_security, source.admin_security):
        assert security.authentication() is not None
        assert security.tls_trust_certs_file_path == str(pki.ca_cert)
    assert source.client_security.client_options()["authentication"].auth_data() == b"spark"
    # Spark lower-cases option keys; pulsar.admin.* applies to the admin API only.
    sink = parse_sink({**base, "authplugin": "token", "authparams": "token:both",
                       "pulsar.admin.authparams": "token:admin-only", "tlshostnameverificationenable": "true"})
    assert sink.client_security.authentication().auth_data() == b"both"  # type: ignore[union-attr]
    assert sink.admin_security.authentication().auth_data() == b"admin-only"  # type: ignore[union-attr]
    assert sink.client_security.tls_validate_hostname and sink.admin_security.tls_validate_hostname
    with pytest.raises(VelamqOptionError, match="tlsAllowInsecureConnection"):
        parse_sink({**base, "tlsAllowInsecureConnection": "yes"})
    with pytest.raises(VelamqOptionError, match="authParams"):
        parse_sink({**base, "authParams": "token:x"})
    with pytest.raises(VelamqOptionError, match="unknown authentication plugin"):
        parse_sink({**base, "authPluginClassName": "oauth9"})


def test_connect_carries_the_plugins_method_and_data_and_supports_refresh() -> None:
    from velamq.client import ClientConfig
    from velamq.client.transport._connection import Connection

    tokens = iter(["first", "second"])
    config = ClientConfig(authentication=AuthenticationToken(lambda: next(tokens)))
    connect = Connection("pulsar://h:1", "h", 1, config)._connect_command().connect
    assert (connect.auth_method_name, connect.auth_data) == ("token", b"first")
    assert connect.feature_flags.supports_auth_refresh
    again = Connection("pulsar://h:1", "h", 1, config)._connect_command().connect
    assert again.auth_data == b"second"  # the supplier is asked at every CONNECT
    anonymous = Connection("pulsar://h:1", "h", 1, ClientConfig())._connect_command().connect
    assert anonymous.auth_method_name == "none" and not anonymous.HasField("auth_data")
