"""Token keys (Pulsar's key-setting conventions) and token create/validate, every refusal included."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import jwt
import pytest

from velamq.security import (
    AuthenticationFailedError,
    SecurityConfigError,
    TokenValidator,
    create_key_pair,
    create_secret_key,
    create_token,
    decode_private_key,
    decode_public_key,
    read_key_bytes,
)
from velamq.security._keys import signing_algorithm


class FakeClock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def monotonic_s(self) -> float:
        return self.now / 1000


NOW_MS = 1_700_000_000_000


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


# ---------------------------------------------------------------------------- key settings


def test_key_setting_file_url_reads_raw_bytes(tmp_path: Path) -> None:
    key = bytes(range(32))
    path = tmp_path / "secret.key"
    path.write_bytes(key)
    assert read_key_bytes(f"file://{path}", "tokenSecretKey") == key
    assert read_key_bytes(str(path), "tokenSecretKey") == key  # a plain existing path too


def test_key_setting_file_url_with_base64_content_is_not_decoded(tmp_path: Path) -> None:
    # Pulsar reads a file: key as raw bytes even when it holds base64 text (note §6: use file: with raw keys)
    path = tmp_path / "secret.b64"
    path.write_bytes(base64.b64encode(bytes(32)))
    assert read_key_bytes(f"file://{path}", "tokenSecretKey") == base64.b64encode(bytes(32))


def test_key_setting_data_url_and_base64() -> None:
    key = bytes(range(40))
    encoded = base64.b64encode(key).decode()
    assert read_key_bytes(f"data:;base64,{encoded}", "k") == key
    assert read_key_bytes(f"data:application/octet-stream;base64,{encoded}", "k") == key
    assert read_key_bytes("data:,plain%20text", "k") == b"plain text"
    assert read_key_bytes(encoded, "k") == key


@pytest.mark.parametrize(
    "value",
    ["", "   ", "file:///no/such/dir/secret.key", "file://otherhost/secret.key", "data:no-comma", "not base64!"],
)
def test_key_setting_refusals_name_the_setting(value: str) -> None:
    with pytest.raises(SecurityConfigError) as info:
        read_key_bytes(value, "tokenSecretKey")
    assert info.value.setting == "tokenSecretKey"


def test_key_setting_error_never_echoes_a_value_that_may_be_a_key() -> None:
    secret_looking = "s3cr3t-k3y-material-that-is-not-base64!"
    with pytest.raises(SecurityConfigError) as info:
        read_key_bytes(secret_looking, "tokenSecretKey")
    assert secret_looking not in str(info.value)


def test_short_secret_key_is_refused() -> None:
    with pytest.raises(SecurityConfigError, match="at least 32"):
        create_token(bytes(31), "role")


@pytest.mark.parametrize(("alg", "size"), [("HS256", 32), ("HS384", 48), ("HS512", 64)])
def test_secret_key_sizes_and_algorithm_follow_jjwt(alg: str, size: int) -> None:
    key = create_secret_key(alg)
    assert len(key) == size
    assert signing_algorithm(key) == alg


@pytest.mark.parametrize("alg", ["RS256", "ES256", "ES384"])
def test_key_pair_is_der_and_signs_with_its_algorithm(alg: str) -> None:
    pair = create_key_pair(alg)
    private = decode_private_key(pair.private_key_der)
    decode_public_key(pair.public_key_der)
    assert not pair.private_key_der.startswith(b"-----")  # DER, as Pulsar writes it
    assert signing_algorithm(private) == alg


def test_unknown_algorithm_is_refused() -> None:
    with pytest.raises(SecurityConfigError, match="unsupported"):
        create_key_pair("XS999")
    with pytest.raises(SecurityConfigError):
        create_secret_key("RS256")


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("alg", ["HS256", "HS512"])
def test_secret_key_token_round_trip(alg: str) -> None:
    key = create_secret_key(alg)
    token = create_token(key, "token-principal")
    identity = TokenValidator(key).validate(token)
    assert identity.role == "token-principal"
    assert identity.expires_at_ms is None
    assert jwt.get_unverified_header(token)["alg"] == alg


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_key_pair_token_round_trip(alg: str) -> None:
    pair = create_key_pair(alg)
    token = create_token(decode_private_key(pair.private_key_der), "svc", expires_at_s=NOW_MS // 1000 + 3600)
    identity = TokenValidator(decode_public_key(pair.public_key_der), clock=FakeClock(NOW_MS)).validate(token)
    assert identity.role == "svc"
    assert identity.expires_at_ms == NOW_MS + 3_600_000


def test_validator_from_settings_reads_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret.key"
    secret.write_bytes(create_secret_key())
    token = create_token(secret.read_bytes(), "a")
    assert TokenValidator.from_settings(secret_key=f"file://{secret}").validate(token).role == "a"
    pair = create_key_pair("ES256")
    public = tmp_path / "public.key"
    public.write_bytes(pair.public_key_der)
    token = create_token(decode_private_key(pair.private_key_der), "b")
    validator = TokenValidator.from_settings(public_key=str(public), public_alg="ES256")
    assert validator.validate(token.encode()).role == "b"
    with pytest.raises(SecurityConfigError, match="tokenPublicAlg"):
        TokenValidator.from_settings(public_key=str(public))  # default RS256 with an EC key
    with pytest.raises(SecurityConfigError):
        TokenValidator.from_settings()


def test_tokens_made_by_pyjwt_directly_are_accepted() -> None:
    # Interchange with Pulsar: a plain standard JWT (header without typ, as jjwt writes it).
    key = create_secret_key()
    token = jwt.encode({"sub": "from-java"}, key, algorithm="HS256", headers={"typ": None})
    assert TokenValidator(key).validate(token).role == "from-java"


def test_auth_claim_and_list_valued_role() -> None:
    key = create_secret_key()
    token = create_token(key, "ignored", extra_claims={"role": ["first", "second"]})
    assert TokenValidator(key, auth_claim="role").validate(token).role == "first"
    with pytest.raises(AuthenticationFailedError, match="no role"):
        TokenValidator(key, auth_claim="missing").validate(token)


# ---------------------------------------------------------------------------- refusals


def test_expired_token_is_refused_on_the_injected_clock() -> None:
    key = create_secret_key()
    clock = FakeClock(NOW_MS)
    token = create_token(key, "r", expires_at_s=NOW_MS // 1000 + 10)
    validator = TokenValidator(key, clock=clock)
    assert validator.validate(token).role == "r"
    clock.now = NOW_MS + 10_000
    with pytest.raises(AuthenticationFailedError, match="expired") as info:
        validator.validate(token)
    assert token not in str(info.value)
    assert info.value.code == 3


def test_not_yet_valid_token_is_refused() -> None:
    key = create_secret_key()
    token = create_token(key, "r", extra_claims={"nbf": NOW_MS // 1000 + 60})
    with pytest.raises(AuthenticationFailedError, match="not valid yet"):
        TokenValidator(key, clock=FakeClock(NOW_MS)).validate(token)


def test_token_signed_by_another_key_is_refused() -> None:
    token = create_token(create_secret_key(), "r")
    with pytest.raises(AuthenticationFailedError, match="signature") as info:
        TokenValidator(create_secret_key()).validate(token)
    assert token not in str(info.value)


def test_token_of_another_key_pair_is_refused() -> None:
    signer = decode_private_key(create_key_pair("RS256").private_key_der)
    other = decode_public_key(create_key_pair("RS256").public_key_der)
    with pytest.raises(AuthenticationFailedError, match="signature"):
        TokenValidator(other).validate(create_token(signer, "r"))


def test_alg_none_is_refused() -> None:
    unsigned = f"{_b64url({'alg': 'none', 'typ': 'JWT'})}.{_b64url({'sub': 'superUser'})}."
    with pytest.raises(AuthenticationFailedError, match="alg none"):
        TokenValidator(create_secret_key()).validate(unsigned)
    none_upper = f"{_b64url({'alg': 'NONE'})}.{_b64url({'sub': 'superUser'})}."
    with pytest.raises(AuthenticationFailedError, match="alg none"):
        TokenValidator(create_secret_key()).validate(none_upper)


def test_key_confusion_rs256_token_against_secret_key_is_refused() -> None:
    key = create_secret_key()
    pair = create_key_pair("RS256")
    token = create_token(decode_private_key(pair.private_key_der), "superUser")
    with pytest.raises(AuthenticationFailedError, match="RS256"):
        TokenValidator(key).validate(token)


@pytest.mark.parametrize(
    "garbage", [b"", b"   ", b"garbage", b"a.b.c", b"\xff\xfe\x00", b"x" * 70_000, "ünïcode.tok.en".encode()]
)
def test_garbage_is_refused_with_our_error(garbage: bytes) -> None:
    with pytest.raises(AuthenticationFailedError):
        TokenValidator(create_secret_key()).validate(garbage)


def test_audience_claim() -> None:
    key = create_secret_key()
    validator = TokenValidator(key, audience_claim="aud", audience="broker-1")
    assert validator.validate(create_token(key, "r", extra_claims={"aud": "broker-1"})).role == "r"
    assert validator.validate(create_token(key, "r", extra_claims={"aud": ["x", "broker-1"]})).role == "r"
    with pytest.raises(AuthenticationFailedError, match="does not name this broker"):
        validator.validate(create_token(key, "r", extra_claims={"aud": "broker-2"}))
    with pytest.raises(AuthenticationFailedError, match="no 'aud'"):
        validator.validate(create_token(key, "r"))
    with pytest.raises(SecurityConfigError, match="tokenAudience"):
        TokenValidator(key, audience_claim="aud")


def test_an_aud_claim_is_ignored_without_audience_settings() -> None:
    key = create_secret_key()
    assert TokenValidator(key).validate(create_token(key, "r", extra_claims={"aud": "elsewhere"})).role == "r"


def test_exp_that_is_not_a_number_is_refused() -> None:
    key = create_secret_key()
    token = jwt.encode({"sub": "r", "exp": "tomorrow"}, key, algorithm="HS256")
    with pytest.raises(AuthenticationFailedError):
        TokenValidator(key).validate(token)


def test_system_clock_is_the_default() -> None:
    key = create_secret_key()
    token = create_token(key, "r", expires_at_s=int(time.time()) - 1)
    with pytest.raises(AuthenticationFailedError, match="expired"):
        TokenValidator(key).validate(token)
