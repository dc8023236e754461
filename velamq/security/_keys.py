"""Token keys the way Pulsar reads, makes and names them (AuthTokenUtils, TokensCliUtils).

A key setting (`tokenSecretKey`, `tokenPublicKey`, `--secret-key`, `--private-key`) is one of:

    file:///abs/path   the file's bytes, as they are (a secret key file holds raw key bytes)
    data:[<mime>][;base64],<data>   an RFC 2397 data URL
    /some/path         an existing file: its bytes, as they are
    anything else      base64 text of the key bytes

Key bytes:
    secret key   raw HMAC key, at least 32 bytes (jjwt refuses shorter ones); signing picks HS256,
                 HS384 or HS512 by its length as jjwt does (>= 64 bytes: HS512, >= 48: HS384)
    private key  PKCS#8 DER (what `pulsar tokens create-key-pair` writes); PEM is accepted too
    public key   X.509 SubjectPublicKeyInfo DER; PEM is accepted too
    RSA keys sign RS256 (2048 bits), RS384 (3072) or RS512 (4096+); EC keys ES256 (P-256), ES384
    (P-384) or ES512 (P-521), as jjwt's SignatureAlgorithm.forSigningKey chooses.

Errors name the setting, never the key: a value that is neither a URL, a path nor base64 is
reported without echoing it, since it may be a mis-pasted key.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from velamq.security._errors import SecurityConfigError

KeyFamily = Literal["HMAC", "RSA", "EC"]

# Algorithms each key family may verify; "none" is in no list, so an unsigned token never passes.
ALGORITHMS: Final[dict[KeyFamily, tuple[str, ...]]] = {
    "HMAC": ("HS256", "HS384", "HS512"),
    "RSA": ("RS256", "RS384", "RS512"),
    "EC": ("ES256", "ES384", "ES512"),
}
SECRET_KEY_BYTES: Final = {"HS256": 32, "HS384": 48, "HS512": 64}
RSA_KEY_BITS: Final = {"RS256": 2048, "RS384": 3072, "RS512": 4096}
_EC_CURVES: Final[dict[str, type[ec.EllipticCurve]]] = {
    "ES256": ec.SECP256R1,
    "ES384": ec.SECP384R1,
    "ES512": ec.SECP521R1,
}
secret_key_bytes_min: Final = 32
rsa_key_bits_min: Final = 2048
# A key file larger than this is not a key (a key pair of 16k-bit RSA is under 10 KiB).
key_file_bytes_max: Final = 1 << 20

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey

_BASE64_RE: Final = re.compile(rb"^[A-Za-z0-9+/=\s]+$")


def family_of(algorithm: str) -> KeyFamily:
    """"HS256" -> "HMAC", "RS512" -> "RSA", "ES256" -> "EC"; SecurityConfigError for anything else."""
    for family, algorithms in ALGORITHMS.items():
        if algorithm in algorithms:
            return family
    known = ", ".join(a for algs in ALGORITHMS.values() for a in algs)
    raise SecurityConfigError("algorithm", f"unsupported signature algorithm {algorithm!r} (use one of {known})")


def read_key_bytes(value: str, setting: str) -> bytes:
    """The key bytes a Pulsar key setting designates (see the module docstring)."""
    if not isinstance(value, str) or not value.strip():
        raise SecurityConfigError(setting, "empty key setting")
    value = value.strip()
    if value.startswith("data:"):
        return _read_data_url(value, setting)
    if value.startswith("file:"):
        parsed = urllib.parse.urlparse(value)
        if parsed.netloc not in ("", "localhost"):
            raise SecurityConfigError(setting, "file: URL with a host; use file:///absolute/path")
        return _read_file(Path(urllib.parse.unquote(parsed.path)), setting)
    if _is_file(value):
        return _read_file(Path(value), setting)
    if _BASE64_RE.match(value.encode()):
        try:
            return base64.b64decode(value.encode(), validate=False)
        except (binascii.Error, ValueError):
            pass
    raise SecurityConfigError(
        setting, "neither a file: or data: URL, an existing file, nor base64 text (value not shown)"
    )


def _is_file(value: str) -> bool:
    try:
        return Path(value).is_file()
    except (OSError, ValueError):  # a name too long for the filesystem, an embedded NUL
        return False


def _read_file(path: Path, setting: str) -> bytes:
    try:
        size = path.stat().st_size
        if size > key_file_bytes_max:
            raise SecurityConfigError(setting, f"{path} is {size} bytes, too large for a key file")
        return path.read_bytes()
    except OSError as exc:
        raise SecurityConfigError(setting, f"cannot read key file {path}: {exc.strerror or exc}") from None


def _read_data_url(value: str, setting: str) -> bytes:
    header, sep, data = value[len("data:"):].partition(",")
    if not sep:
        raise SecurityConfigError(setting, "data: URL without a ',' before its data")
    if header.split(";")[-1].strip().lower() == "base64":
        try:
            return base64.b64decode(urllib.parse.unquote(data).encode(), validate=False)
        except (binascii.Error, ValueError):
            raise SecurityConfigError(setting, "data: URL says base64 but its data is not") from None
    return urllib.parse.unquote_to_bytes(data)


# ---------------------------------------------------------------------------- decoding


def decode_secret_key(key: bytes, setting: str = "tokenSecretKey") -> bytes:
    if len(key) < secret_key_bytes_min:
        raise SecurityConfigError(
            setting, f"secret key of {len(key)} bytes; HMAC-SHA keys need at least {secret_key_bytes_min}"
        )
    return key


def decode_private_key(key: bytes, setting: str = "privateKey") -> PrivateKey:
    try:
        if key.lstrip().startswith(b"-----BEGIN"):
            loaded = serialization.load_pem_private_key(key, password=None)
        else:
            loaded = serialization.load_der_private_key(key, password=None)
    except (ValueError, TypeError):
        raise SecurityConfigError(setting, "not a PKCS#8 DER or PEM private key without password") from None
    except Exception as exc:  # cryptography's UnsupportedAlgorithm and friends
        raise SecurityConfigError(setting, f"private key not usable: {type(exc).__name__}") from None
    if not isinstance(loaded, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise SecurityConfigError(setting, f"{type(loaded).__name__} keys cannot sign Pulsar tokens (RSA or EC)")
    return loaded


def decode_public_key(key: bytes, setting: str = "tokenPublicKey") -> PublicKey:
    try:
        if key.lstrip().startswith(b"-----BEGIN"):
            loaded = serialization.load_pem_public_key(key)
        else:
            loaded = serialization.load_der_public_key(key)
    except (ValueError, TypeError):
        raise SecurityConfigError(setting, "not an X.509 SubjectPublicKeyInfo DER or PEM public key") from None
    except Exception as exc:
        raise SecurityConfigError(setting, f"public key not usable: {type(exc).__name__}") from None
    if not isinstance(loaded, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise SecurityConfigError(setting, f"{type(loaded).__name__} keys cannot verify Pulsar tokens (RSA or EC)")
    return loaded


def key_family(key: bytes | PrivateKey | PublicKey) -> KeyFamily:
    if isinstance(key, bytes):
        return "HMAC"
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        return "RSA"
    return "EC"


def signing_algorithm(key: bytes | PrivateKey, setting: str = "key") -> str:
    """The algorithm jjwt's `signWith(key)` picks for this key (see the module docstring)."""
    if isinstance(key, bytes):
        size = len(decode_secret_key(key, setting))
        return "HS512" if size >= 64 else "HS384" if size >= 48 else "HS256"
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < rsa_key_bits_min:
            raise SecurityConfigError(setting, f"RSA key of {key.key_size} bits; at least {rsa_key_bits_min}")
        return "RS512" if key.key_size >= 4096 else "RS384" if key.key_size >= 3072 else "RS256"
    for algorithm, curve in _EC_CURVES.items():
        if isinstance(key.curve, curve):
            return algorithm
    raise SecurityConfigError(setting, f"EC curve {key.curve.name} is not one of P-256, P-384, P-521")


# ---------------------------------------------------------------------------- generation


def create_secret_key(algorithm: str = "HS256") -> bytes:
    """Fresh random HMAC key bytes of the length jjwt's Keys.secretKeyFor(algorithm) makes."""
    if family_of(algorithm) != "HMAC":
        raise SecurityConfigError("algorithm", f"{algorithm} is not an HMAC algorithm (HS256, HS384, HS512)")
    return os.urandom(SECRET_KEY_BYTES[algorithm])


@dataclass(frozen=True, slots=True)
class KeyPairDer:
    private_key_der: bytes  # PKCS#8
    public_key_der: bytes  # X.509 SubjectPublicKeyInfo


def create_key_pair(algorithm: str = "RS256") -> KeyPairDer:
    """A key pair as jjwt's Keys.keyPairFor(algorithm) makes it, DER-encoded as Pulsar writes it."""
    family = family_of(algorithm)
    private: PrivateKey
    if family == "RSA":
        private = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS[algorithm])
    elif family == "EC":
        private = ec.generate_private_key(_EC_CURVES[algorithm]())
    else:
        raise SecurityConfigError("algorithm", f"{algorithm} has no key pair (use RS256..RS512 or ES256..ES512)")
    return KeyPairDer(
        private_key_der=private.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        public_key_der=private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
