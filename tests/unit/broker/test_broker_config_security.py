"""BrokerConfig reads Pulsar's security keys into config.security and takes a Pulsar standalone.conf
as it is: keys velamq does not use are ignored and listed in one log line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from velamq.broker import BrokerConfig
from velamq.security import SECURITY_KEYS, TOKEN_PROVIDER, SecurityConfigError
from velamq.testing._certs import make_test_pki


def test_security_keys_become_security_settings_with_paths_beside_the_file(tmp_path: Path) -> None:
    pki = make_test_pki(tmp_path / "conf")
    (tmp_path / "conf" / ".htpasswd").write_text("")
    conf = tmp_path / "conf" / "broker.conf"
    conf.write_text(
        "brokerServicePort=\n"
        "brokerServicePortTls=6651\n"
        "webServicePortTls=8443\n"
        f"tlsCertificateFilePath={pki.server_cert.name}\n"
        f"tlsKeyFilePath={pki.server_key.name}\n"
        f"tlsTrustCertsFilePath={pki.ca_cert}\n"
        "authenticationEnabled=true\n"
        f"authenticationProviders={TOKEN_PROVIDER}\n"
        "authorizationEnabled=true\n"
        "superUserRoles=superUser, admin\n"
        "anonymousUserRole=anonymous\n"
        "authenticationRefreshCheckSeconds=5\n"
        "tokenSecretKey=data:;base64,c2VjcmV0\n"
        "basicAuthConf=.htpasswd\n"
    )
    config = BrokerConfig.from_file(conf)
    security = config.security
    assert config.broker_port is None
    assert security.broker_port_tls == 6651 and security.web_port_tls == 8443
    assert security.tls is not None
    assert security.tls.cert_file == pki.server_cert and security.tls.key_file == pki.server_key
    assert security.tls.trust_certs_file == pki.ca_cert
    assert security.authentication_enabled and security.authorization_enabled
    assert security.authentication_providers == (TOKEN_PROVIDER,)
    assert security.super_user_roles == {"superUser", "admin"}
    assert security.anonymous_user_role == "anonymous"
    assert security.authentication_refresh_check_s == 5
    assert security.properties["tokenSecretKey"] == "data:;base64,c2VjcmV0"
    assert security.properties["basicAuthConf"] == str(tmp_path / "conf" / ".htpasswd")


def test_every_security_key_is_accepted(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{key}=\n" for key in SECURITY_KEYS))
    config = BrokerConfig.from_file(conf)
    assert config.broker_port == 6650 and not config.security.authentication_enabled


def test_a_relative_path_falls_back_to_the_working_directory_as_in_pulsar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = make_test_pki(tmp_path / "test-conf")
    conf = tmp_path / "test-conf" / "standalone-ssl.conf"
    conf.write_text(
        "brokerServicePortTls=6651\n"
        "tlsCertificateFilePath=test-conf/" + pki.server_cert.name + "\n"
        "tlsKeyFilePath=test-conf/" + pki.server_key.name + "\n"
    )
    monkeypatch.chdir(tmp_path)
    tls = BrokerConfig.from_file(conf).security.tls
    assert tls is not None and tls.cert_file == tmp_path / "test-conf" / pki.server_cert.name


def test_pulsar_keys_velamq_does_not_use_are_listed_once_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = tmp_path / "standalone.conf"
    conf.write_text(
        "zookeeperServers=\n"
        "brokerServicePort=6650\n"
        "loadBalancerEnabled=false\n"
        "bookkeeperClientTimeoutInSeconds=30   # an inline comment\n"
        "managedLedgerMaxEntriesPerLedger=50000\n"
        "authenticationEnable=true\n"
    )
    with caplog.at_level(logging.INFO, logger="velamq.broker._config"):
        config = BrokerConfig.from_file(conf)
    assert config.ledger_entries_max == 50000 and not config.security.authentication_enabled
    lines = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert len(lines) == 1
    message = lines[0].getMessage()
    for key in ("zookeeperServers", "loadBalancerEnabled", "bookkeeperClientTimeoutInSeconds", "authenticationEnable"):
        assert key in message
    # A near miss of a key velamq acts on is called out: a misspelt security key must be noticed.
    assert "did you mean authenticationEnabled?" in message and lines[0].levelno == logging.WARNING


def test_a_bad_security_value_names_its_key(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("authenticationEnabled=yes\n")
    with pytest.raises(SecurityConfigError, match="authenticationEnabled"):
        BrokerConfig.from_file(conf)


def test_a_broker_needs_one_binary_port(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerServicePort=\n")
    with pytest.raises(ValueError, match="brokerServicePortTls"):
        BrokerConfig.from_file(conf)
