"""What do TLS and token authentication cost? Plain against TLS + token, same broker, same run (OP-5).

One broker process (velamq standalone, fsync before each receipt, its default) listens on a plain
port and a TLS port, with token authentication enabled: clients without credentials are the
anonymous role (so the plain rows pay for neither TLS nor a token), clients on the TLS port present
a token signed with the broker's key (checked once per connection; a refresh would be a challenge).
For each client - velamq's asyncio client and the official pulsar-client - and each mode, the plain
row and the TLS + token row run back to back with the same settings: produce batched and unbatched
(send_async, bounded in flight, then flush) and consume (receive + acknowledge from the earliest
position of the batched topic). The table gives msg/s and MB/s of both and the ratio TLS / plain,
then the machine.

    .venv/bin/python benchmarks/tls_auth.py                         # ~1-2 min
    .venv/bin/python benchmarks/tls_auth.py --batched 300000 --unbatched 30000 --size 1024
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
from _machine import machine_facts
from client_throughput import ours_consume, ours_produce
from produce_consume import consume as official_consume
from produce_consume import produce as official_produce

from velamq.client import AsyncClient, AuthenticationToken
from velamq.security import TOKEN_PROVIDER, create_secret_key, create_token
from velamq.testing import free_port, run_broker
from velamq.testing._certs import make_test_pki


@dataclass(frozen=True, slots=True)
class Pair:
    client: str
    mode: str
    messages: int
    size: int
    plain_s: float
    secured_s: float

    def rate(self, seconds: float) -> float:
        return self.messages / seconds if seconds > 0 else float("inf")

    def mb(self, seconds: float) -> float:
        return self.messages * self.size / 1e6 / seconds if seconds > 0 else float("inf")


@dataclass(frozen=True, slots=True)
class Endpoints:
    plain_url: str
    tls_url: str
    ca_file: str
    token: str


@contextlib.contextmanager
def secured_broker(directory: Path) -> Iterator[Endpoints]:
    pki = make_test_pki(directory / "pki")
    secret = create_secret_key()
    (directory / "secret.key").write_bytes(secret)
    tls_port = free_port()
    config = directory / "broker.conf"
    config.write_text("".join(f"{k}={v}\n" for k, v in {
        "brokerServicePortTls": tls_port,
        "tlsCertificateFilePath": pki.server_cert,
        "tlsKeyFilePath": pki.server_key,
        "authenticationEnabled": "true",
        "authenticationProviders": TOKEN_PROVIDER,
        "anonymousUserRole": "anonymous",
        "tokenSecretKey": f"file://{directory / 'secret.key'}",
    }.items()))
    with run_broker(directory / "data", ["--config", str(config)]) as broker:
        yield Endpoints(f"pulsar://127.0.0.1:{broker.broker_port}", f"pulsar+ssl://localhost:{tls_port}",
                        str(pki.ca_cert), create_token(secret, "bench"))


def _topic(label: str) -> str:
    return f"persistent://public/default/tls-bench-{label}-{uuid.uuid4().hex[:8]}"


async def run_ours(ep: Endpoints, args: argparse.Namespace) -> list[Pair]:
    payload = b"x" * args.size
    plain = AsyncClient(ep.plain_url)
    secured = AsyncClient(ep.tls_url, authentication=AuthenticationToken(ep.token),
                          tls_trust_certs_file_path=ep.ca_file)
    topics: dict[str, str] = {}
    times: dict[tuple[str, str], float] = {}
    try:
        for client in (plain, secured):  # warm-up: connections, topic loads, code paths
            await ours_produce(client, _topic("warm-up"), args.warm_up, payload, True, args.in_flight, 1000)
        for mode, n, batched in (("produce batched", args.batched, True), ("produce unbatched", args.unbatched, False)):
            for name, client in (("plain", plain), ("tls", secured)):
                topic = _topic(f"ours-{name}-{batched}")
                if batched:
                    topics[name] = topic
                _, times[(mode, name)] = await ours_produce(client, topic, n, payload, batched, args.in_flight, 1000)
        for name, client in (("plain", plain), ("tls", secured)):
            _, times[("consume", name)] = await ours_consume(client, topics[name], args.batched)
    finally:
        await plain.close()
        await secured.close()
    counts = {"produce batched": args.batched, "produce unbatched": args.unbatched, "consume": args.batched}
    return [Pair("velamq", mode, n, args.size, times[(mode, "plain")], times[(mode, "tls")])
            for mode, n in counts.items()]


def run_official(ep: Endpoints, args: argparse.Namespace) -> list[Pair]:
    plain = pulsar.Client(ep.plain_url)
    secured = pulsar.Client(ep.tls_url, authentication=pulsar.AuthenticationToken(ep.token),
                            tls_trust_certs_file_path=ep.ca_file)
    topics: dict[str, str] = {}
    times: dict[tuple[str, str], float] = {}
    try:
        for client in (plain, secured):
            official_produce(client, _topic("warm-up"), args.warm_up, args.size, True, args.in_flight, 1000)
        for mode, n, batched in (("produce batched", args.batched, True), ("produce unbatched", args.unbatched, False)):
            for name, client in (("plain", plain), ("tls", secured)):
                topic = _topic(f"official-{name}-{batched}")
                if batched:
                    topics[name] = topic
                row = official_produce(client, topic, n, args.size, batched, args.in_flight, 1000)
                times[(mode, name)] = row.seconds
        for name, client in (("plain", plain), ("tls", secured)):
            times[("consume", name)] = official_consume(client, topics[name], args.batched, args.size, name).seconds
    finally:
        plain.close()
        secured.close()
    counts = {"produce batched": args.batched, "produce unbatched": args.unbatched, "consume": args.batched}
    return [Pair("pulsar-client", mode, n, args.size, times[(mode, "plain")], times[(mode, "tls")])
            for mode, n in counts.items()]


def table(pairs: list[Pair]) -> str:
    lines = ["| client | mode | messages | plain msg/s | TLS+token msg/s | plain MB/s | TLS+token MB/s | TLS / plain |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for p in pairs:
        plain, secured = p.rate(p.plain_s), p.rate(p.secured_s)
        lines.append(f"| {p.client} | {p.mode} | {p.messages:,} | {plain:,.0f} | {secured:,.0f} | "
                     f"{p.mb(p.plain_s):.2f} | {p.mb(p.secured_s):.2f} | {secured / plain:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--batched", type=int, default=200_000, help="messages in the batched rows and consume")
    ap.add_argument("--unbatched", type=int, default=20_000, help="messages in the unbatched rows")
    ap.add_argument("--size", type=int, default=1024, help="payload bytes")
    ap.add_argument("--in-flight", type=int, default=1000, help="max pending sends per producer")
    ap.add_argument("--warm-up", type=int, default=5000, help="messages each client sends before measuring")
    ap.add_argument("--clients", default="velamq,official", help="velamq, official or both (comma separated)")
    args = ap.parse_args(argv)
    runs: dict[str, Callable[[Endpoints, argparse.Namespace], list[Pair]]] = {
        "velamq": lambda ep, a: asyncio.run(run_ours(ep, a)),
        "official": run_official,
    }
    pairs: list[Pair] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="velamq-tls-bench-") as tmp, secured_broker(Path(tmp)) as ep:
        for name in args.clients.split(","):
            pairs += runs[name.strip()](ep, args)
    print(f"velamq benchmark: plain vs TLS + token, {args.size}-byte payloads, "
          f"{args.in_flight} in flight, one broker, fsync durability ({time.perf_counter() - started:.0f} s)\n")
    print(table(pairs))
    print()
    facts: list[tuple[str, Any]] = machine_facts(["pulsar-client", "cryptography", "PyJWT"])
    print("\n".join(f"{k}: {v}" for k, v in facts))
    print("command: " + " ".join(["python", *sys.argv]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
