"""A registered cluster as the replicator reads it: which URL, which TLS and credentials (RP-1, RP-2)."""

from __future__ import annotations

import pytest

from velamq.replication._clusters import ClusterError, remote_cluster


def test_plain_url_and_token() -> None:
    cluster = remote_cluster("west", {
        "serviceUrl": "http://west:8080", "brokerServiceUrl": "pulsar://west:6650/",
        "authenticationPlugin": "token", "authenticationParameters": "token:abc",
    })
    assert cluster.service_url == "pulsar://west:6650"
    options = cluster.security.client_options()
    assert options["authentication"].method_name == "token"


def test_tls_uses_the_tls_url_and_the_trust_file() -> None:
    cluster = remote_cluster("west", {
        "brokerServiceUrl": "pulsar://west:6650", "brokerServiceUrlTls": "pulsar+ssl://west:6651",
        "brokerClientTlsEnabled": True, "brokerClientTrustCertsFilePath": "/ca.pem",
        "tlsAllowInsecureConnection": True,
    })
    assert cluster.service_url == "pulsar+ssl://west:6651"
    assert cluster.security.client_options() == {
        "tls_trust_certs_file_path": "/ca.pem", "tls_allow_insecure_connection": True,
    }


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({}, "no brokerServiceUrl"),
        ({"brokerServiceUrl": "pulsar://west:6650", "brokerClientTlsEnabled": True}, "no brokerServiceUrlTls"),
        ({"brokerServiceUrl": "http://west:8080"}, "not a Pulsar service URL"),
        ({"brokerServiceUrl": "pulsar://west:6650", "authenticationPlugin": "kerberos"}, "unknown authentication"),
    ],
)
def test_a_cluster_that_cannot_be_reached_says_why(data: dict[str, object], reason: str) -> None:
    with pytest.raises(ClusterError, match=reason):
        remote_cluster("west", data)
