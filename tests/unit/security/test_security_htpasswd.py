"""The basic-auth password file: Pulsar's two hash schemes, its line format, and where it is found."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from passlib.hash import apr_md5_crypt, des_crypt

from velamq.security import AuthenticationFailedError, HtpasswdFile, SecurityConfigError, basic_auth_conf_location

# Vectors made by independent implementations: `openssl passwd -apr1 -salt velamqXY 'correct horse'`
# and glibc crypt("pulsar12", "vQ").
APR1_LINE = "alice:$apr1$velamqXY$U6tzalcEUQ3SQkIW6pSGp/"
DES_LINE = "bob:vQA7YooX1Xo.Y"


def test_apr1_and_des_crypt_good_and_bad_passwords() -> None:
    passwords = HtpasswdFile.parse(f"{APR1_LINE}\n{DES_LINE}\n")
    assert passwords.users == {"alice", "bob"}
    assert passwords.verify("alice", "correct horse") == "alice"
    assert passwords.verify("bob", "pulsar12") == "bob"
    # DES crypt only looks at the first 8 bytes, in Pulsar (commons-codec UnixCrypt) as everywhere
    assert passwords.verify("bob", "pulsar12-and-more") == "bob"
    for user, password in [("alice", "wrong"), ("bob", "pulsar1"), ("carol", "anything"), ("alice", "")]:
        with pytest.raises(AuthenticationFailedError, match="Unknown user or invalid password") as info:
            passwords.verify(user, password)
        assert password not in str(info.value) or not password


def test_hashes_made_by_libpass_verify() -> None:
    passwords = HtpasswdFile.parse(f"a:{apr_md5_crypt.hash('pw-one')}\nb:{des_crypt.hash('pw-two')}\n")
    assert passwords.verify("a", "pw-one") == "a"
    assert passwords.verify("b", "pw-two") == "b"


def test_credentials_as_connect_carries_them() -> None:
    passwords = HtpasswdFile.parse(APR1_LINE)
    assert passwords.verify_credentials(b"alice:correct horse") == "alice"
    for bad in [b"alice", b"alice:", b":correct horse", b"alice:correct:horse", b"\xff\xfe", b""]:
        with pytest.raises(AuthenticationFailedError):
            passwords.verify_credentials(bad)


def test_blank_lines_and_comments_are_skipped() -> None:
    passwords = HtpasswdFile.parse(f"# users\n\n{APR1_LINE}\n   \n")
    assert passwords.users == {"alice"}


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("just-a-name", "line 2 is not 'user:hash'"),
        ("a:b:c", "line 2 is not 'user:hash'"),
        (":$apr1$x$y", "line 2 is not 'user:hash'"),
        (
            "carol:$2y$05$abcdefghijklmnopqrstuuOv3Ecfq7dS0VB5OPAK8zjZ1A3gw2KTa",
            "line 2 .*carol.*hash Pulsar does not accept",
        ),
        ("dave:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", "hash Pulsar does not accept"),
        ("erin:$apr1$only-three-parts", "hash Pulsar does not accept"),
    ],
)
def test_garbage_lines_refuse_the_file_naming_the_line_not_the_hash(line: str, match: str) -> None:
    with pytest.raises(SecurityConfigError, match=match) as info:
        HtpasswdFile.parse(f"{APR1_LINE}\n{line}\n")
    assert "$2y$05$abc" not in str(info.value) and "W6ph5" not in str(info.value)


def test_load_from_path_file_url_and_base64(tmp_path: Path) -> None:
    path = tmp_path / ".htpasswd"
    path.write_text(APR1_LINE + "\n")
    for location in (str(path), f"file://{path}", base64.b64encode(path.read_bytes()).decode()):
        assert HtpasswdFile.load(location).verify("alice", "correct horse") == "alice"
    with pytest.raises(SecurityConfigError, match="basicAuthConf"):
        HtpasswdFile.load(str(tmp_path / "missing"))
    path.write_bytes(b"\xff\xfe:\xff")
    with pytest.raises(SecurityConfigError, match="UTF-8"):
        HtpasswdFile.load(str(path))


def test_location_from_config_key_then_pulsar_extra_opts() -> None:
    env = {"PULSAR_EXTRA_OPTS": "-Xmx1g -Dpulsar.auth.basic.conf=test-conf/.htpasswd -Dother=1"}
    assert basic_auth_conf_location({"basicAuthConf": "/etc/pw"}, env) == "/etc/pw"
    assert basic_auth_conf_location({}, env) == "test-conf/.htpasswd"
    assert basic_auth_conf_location({"basicAuthConf": "  "}, env) == "test-conf/.htpasswd"
    assert basic_auth_conf_location({}, {}) is None
    assert basic_auth_conf_location({}, {"PULSAR_EXTRA_OPTS": "-Dpulsar.auth.basic.conf="}) is None
    quoted = {"PULSAR_EXTRA_OPTS": "'-Dpulsar.auth.basic.conf=/a b/pw' -Dpulsar.auth.basic.conf=/last"}
    assert basic_auth_conf_location({}, quoted) == "/last"
    assert basic_auth_conf_location({}, {"PULSAR_EXTRA_OPTS": "'unbalanced -Dpulsar.auth.basic.conf=/x"}) == "/x"
