"""A remote cluster as the replicator sees it: where to connect and with which credentials.

The admin API stores Pulsar's ClusterData as given by PUT /admin/v2/clusters/{c}; the replicator
reads these fields of it (the names are Pulsar's):

    brokerServiceUrl                  pulsar://host:port of the remote (the one used without TLS)
    brokerServiceUrlTls               pulsar+ssl://host:port (used when brokerClientTlsEnabled)
    brokerClientTlsEnabled            connect with TLS
    brokerClientTrustCertsFilePath    CA file that signs the remote's certificate
    tlsAllowInsecureConnection        accept any certificate
    tlsHostnameVerificationEnable     check the certificate's host name (velamq's own field)
    brokerClientCertificateFilePath   client certificate (TLS authentication)
    brokerClientKeyFilePath           its key
    authenticationPlugin              "token", "basic", "tls" or Pulsar's Java class names
    authenticationParameters          that plugin's parameters ("token:...", "file:///...")

A cluster without a broker service URL cannot be replicated to (ClusterError says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from velamq._errors import VelamqError
from velamq.client import ConnectionSecurity


class ClusterError(VelamqError, ValueError):
    """A cluster's data does not say how to reach it."""


@dataclass(frozen=True, slots=True)
class RemoteCluster:
    name: str
    service_url: str  # the broker service URL the replicator connects to
    security: ConnectionSecurity = field(default_factory=ConnectionSecurity)


def parse_hosts(url: str) -> list[tuple[str, int]]:
    """(host, port) of each address of a Pulsar service URL (`pulsar://h1:p1,h2:p2`)."""
    scheme, _, rest = url.partition("://")
    if scheme not in ("pulsar", "pulsar+ssl") or not rest:
        raise ClusterError(f"not a Pulsar service URL: {url!r}")
    default_port = 6651 if scheme == "pulsar+ssl" else 6650
    hosts = []
    for part in rest.rstrip("/").split(","):
        parsed = urlsplit(f"//{part}")
        if not parsed.hostname:
            raise ClusterError(f"no host in the service URL {url!r}")
        hosts.append((parsed.hostname, parsed.port or default_port))
    return hosts


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value.strip() if isinstance(value, str) else ""


def remote_cluster(name: str, data: Mapping[str, Any]) -> RemoteCluster:
    """The RemoteCluster of stored ClusterData; ClusterError when it cannot be reached."""
    tls = data.get("brokerClientTlsEnabled") is True
    url = _text(data, "brokerServiceUrlTls" if tls else "brokerServiceUrl")
    if not url:
        raise ClusterError(f"cluster {name} has no {'brokerServiceUrlTls' if tls else 'brokerServiceUrl'}")
    parse_hosts(url)
    try:
        security = ConnectionSecurity(
            auth_plugin=_text(data, "authenticationPlugin") or None,
            auth_params=_text(data, "authenticationParameters"),
            tls_trust_certs_file_path=_text(data, "brokerClientTrustCertsFilePath") or None,
            tls_allow_insecure_connection=data.get("tlsAllowInsecureConnection") is True,
            tls_validate_hostname=data.get("tlsHostnameVerificationEnable") is True,
            tls_certificate_file_path=_text(data, "brokerClientCertificateFilePath") or None,
            tls_private_key_file_path=_text(data, "brokerClientKeyFilePath") or None,
        )
    except (ValueError, OSError) as exc:
        raise ClusterError(f"cluster {name}: {exc}") from None
    return RemoteCluster(name, url.rstrip("/"), security)
