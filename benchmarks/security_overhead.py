"""What do TLS and token authentication cost? The official client produces and consumes the same
load against a plain broker and against a secured one (TLS port, token authentication,
authorization), in the same run. (Issue 11)

    .venv/bin/python benchmarks/security_overhead.py                 # about a minute
    .venv/bin/python benchmarks/security_overhead.py --batched 200000 --unbatched 50000

Both brokers are `velamq standalone` processes started with velamq.testing.run_broker (default
settings: fsync before each receipt); the secured one reads a config file with
brokerServicePortTls, certificates made by velamq.testing._certs.make_test_pki, the token provider
with a fresh HS256 key and authorizationEnabled, and the client connects over pulsar+ssl:// with a
superuser token (so every lookup, producer and subscribe passes the authorization checks too).
Prints one table per broker (benchmarks/produce_consume.py's columns) and the ratios secured/plain.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pulsar
from _machine import machine_facts
from produce_consume import Row, consume, measured, produce, table

from velamq.security import TOKEN_PROVIDER, create_secret_key, create_token
from velamq.testing import free_port, run_broker
from velamq.testing._certs import make_test_pki


@contextmanager
def secured_broker(directory: Path) -> Iterator[tuple[str, int | None, dict[str, Any]]]:
    """(pulsar+ssl URL, broker pid, client options) of a broker with TLS and token authentication."""
    pki = make_test_pki(directory)
    key = create_secret_key()
    (directory / "secret.key").write_bytes(key)
    config = directory / "broker.conf"
    config.write_text(
        f"brokerServicePortTls={free_port()}\n"
        f"tlsCertificateFilePath={pki.server_cert}\ntlsKeyFilePath={pki.server_key}\n"
        "authenticationEnabled=true\n"
        f"authenticationProviders={TOKEN_PROVIDER}\n"
        f"tokenSecretKey=file://{directory / 'secret.key'}\n"
        "authorizationEnabled=true\nsuperUserRoles=bench\n"
    )
    with run_broker(directory / "data", config_file=config) as broker:
        assert broker.service_url_tls is not None
        options = {
            "tls_trust_certs_file_path": str(pki.ca_cert),
            "authentication": pulsar.AuthenticationToken(create_token(key, "bench")),
        }
        yield broker.service_url_tls, broker.pid, options


@contextmanager
def plain_broker(directory: Path) -> Iterator[tuple[str, int | None, dict[str, Any]]]:
    with run_broker(directory / "data") as broker:
        yield broker.service_url, broker.pid, {}


def run_load(url: str, pid: int | None, options: dict[str, Any], args: argparse.Namespace) -> list[Row]:
    client = pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
                           **options)
    rows: list[Row] = []
    try:
        run = uuid.uuid4().hex[:8]
        for batched, n in ((True, args.batched), (False, args.unbatched)):
            label = "batched" if batched else "unbatched"
            topic = f"bench-{label}-{run}"
            client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest).close()
            rows.append(measured(functools.partial(produce, client, topic, n, args.size, batched, 1000, 1000), pid))
            rows.append(measured(functools.partial(consume, client, topic, n, args.size, label), pid))
            print(f"  {url}: {rows[-2].mode} {rows[-2].msgs_per_s:,.0f} msg/s, {rows[-1].mode} "
                  f"{rows[-1].msgs_per_s:,.0f} msg/s", file=sys.stderr, flush=True)
    finally:
        client.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batched", type=int, default=300_000, help="messages in the batched run")
    ap.add_argument("--unbatched", type=int, default=50_000, help="messages in the unbatched run")
    ap.add_argument("--size", type=int, default=100, help="payload bytes per message")
    args = ap.parse_args(argv)
    results: dict[str, list[Row]] = {}
    with tempfile.TemporaryDirectory(prefix="velamq-bench-security-") as tmp:
        for name, broker in (("plain", plain_broker), ("TLS + token + authorization", secured_broker)):
            directory = Path(tmp) / name.split()[0]
            directory.mkdir()
            with broker(directory) as (url, pid, options):
                results[name] = run_load(url, pid, options, args)
    print(f"\nofficial client, {args.size}-byte messages, 1000 in flight, batches of up to 1000, fsync\n")
    for name, rows in results.items():
        print(f"{name}:\n\n{table(rows)}\n")
    plain, secured = results["plain"], results["TLS + token + authorization"]
    for a, b in zip(plain, secured, strict=True):
        broker = ""
        if a.broker_cpu_s and b.broker_cpu_s:
            broker = f", broker CPU {b.broker_cpu_s / a.broker_cpu_s:.2f}x"
        print(f"- {a.mode}: secured/plain {b.msgs_per_s / a.msgs_per_s:.2f}x msg/s{broker}")
    print()
    for k, v in machine_facts(("pulsar-client",)):
        print(f"- {k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
