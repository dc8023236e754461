"""`velamq` entry point: subcommands and their flags."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from velamq import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="velamq", description="A Pulsar-compatible message broker in Python.")
    parser.add_argument("--version", action="version", version=f"velamq {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    standalone = commands.add_parser("standalone", help="run a single-node broker with durable storage")
    standalone.add_argument("--data-dir", type=Path, help="where ledgers and metadata live (default ./data)")
    standalone.add_argument("--broker-port", type=int, help="Pulsar binary protocol port (default 6650)")
    standalone.add_argument("--http-port", type=int, help="admin REST and metrics port (default 8080)")
    standalone.add_argument("--config", type=Path, help="Pulsar-style key=value config file")
    standalone.add_argument("--bind-address", help="address to listen on (default 0.0.0.0)")
    standalone.add_argument("--advertised-address", help="host name clients are told to connect to (default localhost)")
    standalone.add_argument(
        "--sync-policy",
        choices=["fsync", "interval", "none"],
        help="fsync before each receipt (default), every --sync-interval-ms, or never (unsafe)",
    )
    standalone.add_argument("--sync-interval-ms", type=int, help="with --sync-policy interval (default 100)")
    standalone.add_argument("--memory", type=_size, help="memory budget, e.g. 512M or 2G (default 1G)")
    standalone.add_argument(
        "--workers", type=_workers, default=1,
        help="broker processes sharing the machine, each owning namespace bundles: a number, or auto "
        "(one per core); default 1 (docs/workers.md)",
    )
    standalone.add_argument("--max-message-size", type=int, help="bytes; told to clients (default 5 MiB)")
    standalone.add_argument("--cluster-name", help="this node's cluster (clusterName; default standalone)")
    standalone.add_argument(
        "--default-namespace-bundles", type=int,
        help="bundles of a namespace created without a count (defaultNumberOfNamespaceBundles; default 4)",
    )
    standalone.add_argument("--uvloop", action="store_true", default=None, help="run on uvloop instead of asyncio")
    standalone.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")

    from velamq.cli._admin import add_admin_parser

    add_admin_parser(commands)

    from velamq.cli._tune import add_tune_parser

    add_tune_parser(commands)

    from velamq.cli._perf_args import add_perf_parser

    add_perf_parser(commands)
    from velamq.cli._tokens import add_tokens_parser

    add_tokens_parser(commands)
    return parser


def _workers(text: str) -> int:
    if text == "auto":
        return max(os.cpu_count() or 1, 1)
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers takes a number or auto, not {text!r}") from None
    if not 1 <= count <= 256:
        raise argparse.ArgumentTypeError("--workers takes 1 to 256")
    return count


def _size(text: str) -> int:
    """Bytes from '512M', '2G', '1048576' (K, M, G, T are powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().removesuffix("B")
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 512M or 2G)") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "standalone":
        from velamq.cli._standalone import run_standalone

        return run_standalone(args)
    if args.command == "admin":
        from velamq.cli._admin import run_admin

        return run_admin(args)
    if args.command == "tune":
        from velamq.cli._tune import run_tune

        return run_tune(args)
    if args.command == "perf":
        from velamq.cli._perf import run_perf

        return run_perf(args)
    if args.command == "tokens":
        from velamq.cli._tokens import run_tokens

        return run_tokens(args)
    print(f"unknown command {args.command}", file=sys.stderr)
    return 2
