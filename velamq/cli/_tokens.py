"""`velamq tokens`: make keys and tokens, show and validate tokens, with `pulsar tokens`' flags.

    velamq tokens create-secret-key [-a HS256] [-o FILE] [-b]       raw key bytes (base64 text with -b)
    velamq tokens create-key-pair [-a RS256|ES256] --output-private-key F --output-public-key F   (DER)
    velamq tokens create -s SUBJECT [-e 1h] (-sk KEY | -pk KEY) [-a ALG] [-hs k=v ...]
    velamq tokens show [TOKEN | -i | -f FILE]                       header, ---, claims (as JSON text)
    velamq tokens validate [TOKEN | -i | -f FILE] (-sk KEY | -pk KEY) [-a ALG]

KEY is a key setting as the broker reads it: file:///path, data:;base64,..., a path, or base64.
A token made here is a standard JWT with a "sub" claim, which Pulsar accepts, and the reverse.
Without TOKEN, -i or -f, the token comes from the TOKEN environment variable, as in Pulsar.
Exit status: 0 on success, 1 when a key or token is refused (the reason goes to stderr, never the
token or key), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO, Final

from velamq.security import (
    ALGORITHMS,
    AuthenticationFailedError,
    SecurityConfigError,
    TokenValidator,
    create_key_pair,
    create_secret_key,
    create_token,
    decode_private_key,
    decode_secret_key,
    family_of,
    key_family,
    read_key_bytes,
)

_SECONDS_PER_UNIT: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_relative_time_s(text: str) -> int:
    """Pulsar's RelativeTimeUtil: "30" or "30s", "10m", "1h", "3d", "2w", "10y" -> seconds."""
    text = text.strip()
    if not text:
        raise ValueError("expiry time cannot be empty")
    unit = text[-1].lower() if text[-1].isalpha() else "s"
    number = text[:-1] if text[-1].isalpha() else text
    if unit not in _SECONDS_PER_UNIT:
        raise ValueError(f"Invalid time unit '{text[-1]}' (use s, m, h, d, w or y)")
    try:
        value = int(number)
    except ValueError:
        raise ValueError(f"not a relative time: {text!r} (e.g. 1h, 3d, 10y)") from None
    if value < 0:
        raise ValueError("expiry time cannot be negative")
    return value * _SECONDS_PER_UNIT[unit]


def add_tokens_parser(commands: Any) -> None:
    parser = commands.add_parser("tokens", help="create and check JWT keys and tokens (as `pulsar tokens`)")
    sub = parser.add_subparsers(dest="tokens_command", required=True)
    hmac, pairs = ALGORITHMS["HMAC"], (*ALGORITHMS["RSA"], *ALGORITHMS["EC"])

    p = sub.add_parser("create-secret-key", help="a new random secret key for HS256 tokens")
    p.add_argument("-a", "--signature-algorithm", default="HS256", choices=hmac)
    p.add_argument("-o", "--output", type=Path, help="write the key to this file instead of stdout")
    p.add_argument("-b", "--base64", action="store_true", help="base64 text instead of raw bytes")

    p = sub.add_parser("create-key-pair", help="a new private/public key pair (DER files)")
    p.add_argument("-a", "--signature-algorithm", default="RS256", choices=pairs)
    p.add_argument("--output-private-key", type=Path, required=True)
    p.add_argument("--output-public-key", type=Path, required=True)

    p = sub.add_parser("create", help="a new token")
    p.add_argument("-s", "--subject", required=True, help="the role the token stands for")
    p.add_argument("-e", "--expiry-time", help="relative expiry, e.g. 1h, 3d, 10y (default: never)")
    p.add_argument("-sk", "--secret-key", help="key setting of the secret key: file:, data:, path or base64")
    p.add_argument("-pk", "--private-key", help="key setting of the private key: file:, data:, path or base64")
    p.add_argument("-a", "--signature-algorithm", choices=pairs, help="family of the private key (default: its own)")
    p.add_argument("-hs", "--headers", action="append", default=[], metavar="KEY=VALUE", help="extra JWT header")

    for name, help_text in (("show", "print a token's header and claims"), ("validate", "check a token")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("token", nargs="?", help="the token (or -i, -f, or the TOKEN environment variable)")
        p.add_argument("-i", "--stdin", action="store_true", help="read the token from standard input")
        p.add_argument("-f", "--token-file", type=Path, help="read the token from a file")
        if name == "validate":
            p.add_argument("-sk", "--secret-key", help="key setting of the secret key")
            p.add_argument("-pk", "--public-key", help="key setting of the public key")
            p.add_argument("-a", "--signature-algorithm", default="RS256", choices=pairs,
                           help="algorithm of the public key (default RS256)")


def run_tokens(args: argparse.Namespace, stdout: BinaryIO | None = None) -> int:
    out = stdout if stdout is not None else sys.stdout.buffer
    try:
        return _COMMANDS[args.tokens_command](args, out)
    except (SecurityConfigError, AuthenticationFailedError, ValueError, OSError) as exc:
        print(f"velamq tokens {args.tokens_command}: {exc}", file=sys.stderr)
        return 1


def _create_secret_key(args: argparse.Namespace, out: BinaryIO) -> int:
    key = create_secret_key(args.signature_algorithm)
    data = base64.b64encode(key) if args.base64 else key
    if args.output is not None:
        _write_private(args.output, data)
    else:
        out.write(data)
        out.flush()
    return 0


def _create_key_pair(args: argparse.Namespace, out: BinaryIO) -> int:
    pair = create_key_pair(args.signature_algorithm)
    args.output_public_key.write_bytes(pair.public_key_der)
    _write_private(args.output_private_key, pair.private_key_der)
    return 0


def _write_private(path: Path, data: bytes) -> None:
    """Write a key readable by its owner only (Pulsar leaves this to the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _create(args: argparse.Namespace, out: BinaryIO) -> int:
    if (args.secret_key is None) == (args.private_key is None):
        raise ValueError("pass exactly one of --secret-key and --private-key to sign a token")
    if args.private_key is not None:
        signing_key: Any = decode_private_key(read_key_bytes(args.private_key, "--private-key"), "--private-key")
        if args.signature_algorithm and family_of(args.signature_algorithm) != key_family(signing_key):
            raise ValueError(f"-a {args.signature_algorithm} does not fit the private key ({key_family(signing_key)})")
    else:
        signing_key = decode_secret_key(read_key_bytes(args.secret_key, "--secret-key"), "--secret-key")
    expires_at_s = None
    if args.expiry_time is not None:
        expires_at_s = int(time.time()) + parse_relative_time_s(args.expiry_time)
    headers = {}
    for item in args.headers:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--headers takes KEY=VALUE, got {item!r}")
        headers[name] = value
    out.write(create_token(signing_key, args.subject, expires_at_s=expires_at_s, headers=headers).encode() + b"\n")
    out.flush()
    return 0


def _read_token(args: argparse.Namespace) -> str:
    if args.token is not None:
        return str(args.token).strip()
    if args.stdin:
        return sys.stdin.readline().strip()
    if args.token_file is not None:
        return str(args.token_file.read_text()).strip()
    if os.environ.get("TOKEN"):
        return os.environ["TOKEN"].strip()
    raise ValueError("Token needs to be either passed as an argument or through `--stdin`, `--token-file` "
                     "or by the `TOKEN` environment variable")


def _show(args: argparse.Namespace, out: BinaryIO) -> int:
    parts = _read_token(args).split(".")
    if len(parts) < 2:
        raise ValueError("not a JWT (expected header.payload.signature)")
    try:
        header, claims = (base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)) for p in parts[:2])
    except (binascii.Error, ValueError):
        raise ValueError("not a JWT: its parts are not base64url") from None
    out.write(header + b"\n---\n" + claims + b"\n")
    out.flush()
    return 0


def _validate(args: argparse.Namespace, out: BinaryIO) -> int:
    if (args.secret_key is None) == (args.public_key is None):
        raise ValueError("pass exactly one of --secret-key and --public-key to validate a token")
    if args.public_key is not None:
        validator = TokenValidator.from_settings(public_key=args.public_key, public_alg=args.signature_algorithm)
    else:
        validator = TokenValidator.from_settings(secret_key=args.secret_key)
    identity = validator.validate(_read_token(args))
    out.write(json.dumps(dict(identity.claims), sort_keys=True).encode() + b"\n")
    out.flush()
    return 0


_COMMANDS: Final = {
    "create-secret-key": _create_secret_key,
    "create-key-pair": _create_key_pair,
    "create": _create,
    "show": _show,
    "validate": _validate,
}
