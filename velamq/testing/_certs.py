"""Throw-away certificates for tests, made at test time (nothing certificate-like is committed).

    pki = make_test_pki(tmp_path)                     # a CA, a server cert, client certs, a rogue CA
    pki.ca_cert, pki.server_cert, pki.server_key      # PEM files for tlsTrustCertsFilePath & co
    cert, key = pki.client("superUser")               # a client certificate whose CN is the role
    pki.unknown_client                                # (cert, key) signed by a CA nobody trusts

EC P-256 keys (fast to make); the server certificate names localhost and 127.0.0.1 in its
subjectAltName, so hostname verification passes for both. Certificates are valid from an hour ago
for `valid_days`, so a clock a little behind does not make a fresh one "not yet valid".
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

valid_days_default = 30


def _name(common_name: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "velamq tests"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, common_name: str, valid_days: int = valid_days_default) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.valid_days = valid_days
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, hosts: Iterable[str] = (), server: bool = False) -> tuple[bytes, bytes]:
        """(certificate PEM, private key PEM) for `common_name`; `hosts` go into subjectAltName."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=self.valid_days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    def write(self, directory: Path, stem: str, common_name: str, *, hosts: Iterable[str] = (),
              server: bool = False) -> tuple[Path, Path]:
        """Issue and write `<stem>-cert.pem` and `<stem>-key.pem` into `directory`."""
        cert_pem, key_pem = self.issue(common_name, hosts=hosts, server=server)
        cert_path, key_path = directory / f"{stem}-cert.pem", directory / f"{stem}-key.pem"
        cert_path.write_bytes(cert_pem)
        key_path.write_bytes(key_pem)
        key_path.chmod(0o600)
        return cert_path, key_path


@dataclass
class CertificateSet:
    directory: Path
    ca: CertificateAuthority
    ca_cert: Path
    server_cert: Path
    server_key: Path
    unknown_ca_cert: Path
    unknown_client: tuple[Path, Path]
    clients: dict[str, tuple[Path, Path]] = field(default_factory=dict)

    def client(self, common_name: str) -> tuple[Path, Path]:
        """(cert, key) of a client certificate with this CN, issued now if it was not yet."""
        if common_name not in self.clients:
            stem = "client-" + "".join(c if c.isalnum() else "_" for c in common_name)
            self.clients[common_name] = self.ca.write(self.directory, stem, common_name)
        return self.clients[common_name]


def make_test_pki(
    directory: Path,
    *,
    client_names: Iterable[str] = ("superUser", "admin"),
    server_hosts: Iterable[str] = ("localhost", "127.0.0.1"),
) -> CertificateSet:
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority("velamq test CA")
    ca_cert = directory / "ca-cert.pem"
    ca_cert.write_bytes(ca.cert_pem)
    server_cert, server_key = ca.write(directory, "server", "localhost", hosts=server_hosts, server=True)
    rogue = CertificateAuthority("unknown test CA")
    unknown_ca_cert = directory / "unknown-ca-cert.pem"
    unknown_ca_cert.write_bytes(rogue.cert_pem)
    pki = CertificateSet(
        directory=directory, ca=ca, ca_cert=ca_cert, server_cert=server_cert, server_key=server_key,
        unknown_ca_cert=unknown_ca_cert,
        unknown_client=rogue.write(directory, "unknown-client", "superUser"),
    )
    for name in client_names:
        pki.client(name)
    return pki
