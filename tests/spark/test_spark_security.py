"""The Spark data source against a secured broker (SP-5, OP-5): a real broker process with TLS on
both ports and token authentication, certificates and a key made for the test. The sink writes and
the source reads with the Pulsar connector's option names over pulsar+ssl:// and https://; without
the token the query fails with the broker's refusal."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from velamq.security import TOKEN_PROVIDER, create_secret_key, create_token
from velamq.testing import BrokerProcess, free_port, run_broker
from velamq.testing._certs import CertificateSet, make_test_pki

pytestmark = pytest.mark.timeout(600)


class Secured:
    def __init__(self, broker: BrokerProcess, pki: CertificateSet, secret: bytes, tls_port: int,
                 https_port: int) -> None:
        self.broker, self.pki, self.secret = broker, pki, secret
        self.service_url = f"pulsar+ssl://localhost:{tls_port}"
        self.admin_url = f"https://localhost:{https_port}"

    def options(self, role: str = "superUser", **more: str) -> dict[str, str]:
        return {
            "service.url": self.service_url, "admin.url": self.admin_url,
            "authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "authParams": "token:" + create_token(self.secret, role),
            "tlsTrustCertsFilePath": str(self.pki.ca_cert), "tlsHostnameVerificationEnable": "true", **more,
        }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("spark-security")
    pki = make_test_pki(directory / "pki")
    secret = create_secret_key()
    (directory / "secret.key").write_bytes(secret)
    tls_port, https_port = free_port(), free_port()
    config = directory / "broker.conf"
    config.write_text("".join(f"{k}={v}\n" for k, v in {
        "brokerServicePortTls": tls_port, "webServicePortTls": https_port,
        "tlsCertificateFilePath": pki.server_cert, "tlsKeyFilePath": pki.server_key,
        "authenticationEnabled": "true", "authenticationProviders": TOKEN_PROVIDER,
        "authorizationEnabled": "true", "superUserRoles": "superUser",
        "tokenSecretKey": f"file://{directory / 'secret.key'}",
    }.items()))
    with run_broker(Path(directory / "data"), ["--config", str(config)]) as broker:
        yield Secured(broker, pki, secret, tls_port, https_port)


def test_write_then_read_over_tls_with_a_token(spark: Any, secured: Secured) -> None:
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    rows = [(f"k{i}", f"value {i}") for i in range(50)]
    df = spark.createDataFrame(rows, "key string, value string")
    df.write.format("velamq").options(**secured.options(topic=topic)).mode("append").save()
    got = spark.read.format("velamq").options(**secured.options(topic=topic)).load().collect()
    assert sorted((r.key, r.value) for r in got) == sorted((k, v.encode()) for k, v in rows)


def test_a_read_without_a_grant_is_refused(spark: Any, secured: Secured) -> None:
    topic = f"refused-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception, match=r"HTTP 40[13]|AuthorizationError|Unauthorized"):
        spark.read.format("velamq").options(**secured.options("nobody", topic=topic)).load().collect()
