"""`velamq tokens`: pulsar tokens' flags, and tokens the library (the broker's validator) accepts."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import jwt
import pytest

from velamq.cli._main import main
from velamq.cli._tokens import parse_relative_time_s
from velamq.security import TokenValidator, decode_private_key, decode_public_key


def _run(capsysbinary: pytest.CaptureFixture[bytes], *argv: str) -> tuple[int, bytes, str]:
    code = main(["tokens", *argv])
    captured = capsysbinary.readouterr()
    return code, captured.out, captured.err.decode()


def test_secret_key_file_and_token_accepted_by_the_broker_validator(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    key_file = tmp_path / "secret.key"
    assert _run(capsysbinary, "create-secret-key", "--output", str(key_file))[0] == 0
    assert len(key_file.read_bytes()) == 32  # raw bytes, as Pulsar writes them
    assert key_file.stat().st_mode & 0o077 == 0
    code, out, _ = _run(capsysbinary, "create", "--subject", "token-principal", "--secret-key", f"file://{key_file}")
    assert code == 0
    token = out.decode().strip()
    identity = TokenValidator.from_settings(secret_key=f"file://{key_file}").validate(token)
    assert identity.role == "token-principal" and identity.expires_at_ms is None
    code, out, _ = _run(capsysbinary, "validate", "-sk", f"file://{key_file}", token)
    assert code == 0 and json.loads(out) == {"sub": "token-principal"}


def test_secret_key_to_stdout_raw_and_base64(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, raw, _ = _run(capsysbinary, "create-secret-key")
    assert code == 0 and len(raw) == 32
    code, text, _ = _run(capsysbinary, "create-secret-key", "-a", "HS512", "-b")
    assert code == 0 and len(base64.b64decode(text, validate=True)) == 64
    # a base64 key is also a key setting as it is
    code, out, _ = _run(capsysbinary, "create", "-s", "r", "-sk", text.decode())
    assert code == 0
    assert TokenValidator(base64.b64decode(text)).validate(out.decode().strip()).role == "r"


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_key_pair_files_and_expiring_token(
    alg: str, tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    code, _, _ = _run(
        capsysbinary,
        "create-key-pair",
        "-a",
        alg,
        "--output-private-key",
        str(private),
        "--output-public-key",
        str(public),
    )
    assert code == 0
    decode_private_key(private.read_bytes())  # DER PKCS#8
    decode_public_key(public.read_bytes())  # DER X.509
    before = int(time.time())
    code, out, _ = _run(capsysbinary, "create", "-s", "svc", "-e", "1h", "-pk", str(private), "-hs", "kid=key-1")
    assert code == 0
    token = out.decode().strip()
    assert jwt.get_unverified_header(token) == {"alg": alg, "typ": "JWT", "kid": "key-1"}
    identity = TokenValidator.from_settings(public_key=f"file://{public}", public_alg=alg).validate(token)
    assert identity.role == "svc"
    assert identity.expires_at_ms is not None and before + 3600 <= identity.expires_at_ms // 1000 <= before + 3601 + 60
    code, out, _ = _run(capsysbinary, "validate", "-pk", str(public), "-a", alg, token)
    assert code == 0 and json.loads(out)["sub"] == "svc"


def test_show_prints_header_and_claims(capsysbinary: pytest.CaptureFixture[bytes], tmp_path: Path) -> None:
    token = jwt.encode({"sub": "abc"}, b"k" * 32, algorithm="HS256")
    code, out, _ = _run(capsysbinary, "show", token)
    header, sep, claims = out.decode().partition("\n---\n")
    assert code == 0 and sep and json.loads(header)["alg"] == "HS256" and json.loads(claims) == {"sub": "abc"}
    token_file = tmp_path / "token.txt"
    token_file.write_text(token + "\n")
    assert _run(capsysbinary, "show", "-f", str(token_file))[1] == out


def test_refusals_exit_1_without_leaking(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOKEN", raising=False)
    key_file = tmp_path / "secret.key"
    _run(capsysbinary, "create-secret-key", "-o", str(key_file))
    other = jwt.encode({"sub": "x"}, b"o" * 32, algorithm="HS256")
    code, out, err = _run(capsysbinary, "validate", "-sk", f"file://{key_file}", other)
    assert code == 1 and out == b"" and "signature" in err and other not in err
    unsigned = jwt.encode({"sub": "superUser"}, None, algorithm="none")
    code, _, err = _run(capsysbinary, "validate", "-sk", f"file://{key_file}", unsigned)
    assert code == 1 and "alg none" in err
    expired = jwt.encode({"sub": "x", "exp": int(time.time()) - 10}, key_file.read_bytes(), algorithm="HS256")
    assert "expired" in _run(capsysbinary, "validate", "-sk", f"file://{key_file}", expired)[2]
    for argv in (
        ["create", "-s", "x"],  # no key
        ["create", "-s", "x", "-sk", f"file://{key_file}", "-pk", f"file://{key_file}"],
        ["create", "-s", "x", "-sk", f"file://{key_file}", "-e", "3q"],
        ["create", "-s", "x", "-sk", f"file://{tmp_path / 'missing'}"],
        ["create", "-s", "x", "-sk", f"file://{key_file}", "-hs", "no-equals"],
        ["show", "not-a-token"],
        ["validate", "-sk", f"file://{key_file}"],  # no token anywhere
    ):
        assert _run(capsysbinary, *argv)[0] == 1, argv


def test_relative_times() -> None:
    assert [parse_relative_time_s(t) for t in ("30", "30s", "10m", "1h", "3d", "2w", "1y", "1H")] == [
        30,
        30,
        600,
        3600,
        259200,
        1209600,
        31536000,
        3600,
    ]
    for bad in ("", "h", "1x", "-1h", "1.5h"):
        with pytest.raises(ValueError):
            parse_relative_time_s(bad)


def test_as_a_real_command_reading_the_token_from_stdin(tmp_path: Path) -> None:
    velamq = [sys.executable, "-m", "velamq", "tokens"]
    key = subprocess.run([*velamq, "create-secret-key", "-b"], capture_output=True, check=True).stdout.decode()
    token = subprocess.run([*velamq, "create", "-s", "cli", "-sk", key], capture_output=True, check=True).stdout
    result = subprocess.run([*velamq, "validate", "-i", "-sk", key], input=token, capture_output=True, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"sub": "cli"}
