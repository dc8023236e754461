"""`velamq standalone`: start the broker, print where it listens, stop cleanly on SIGTERM/SIGINT (OP-1)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time

from velamq.broker import BrokerConfig
from velamq.security import SecurityConfigError
from velamq.server import VelamqServer, raise_fd_limit, tune_collector_for_serving

log = logging.getLogger("velamq")


def load_config(args: argparse.Namespace) -> BrokerConfig:
    config = BrokerConfig()
    if args.config is not None:
        config = BrokerConfig.from_file(args.config, config)
    return config.with_overrides(
        data_dir=args.data_dir,
        broker_port=args.broker_port,
        http_port=args.http_port,
        bind_address=args.bind_address,
        advertised_address=args.advertised_address,
        sync_policy=args.sync_policy,
        sync_interval_ms=args.sync_interval_ms,
        memory_bytes=args.memory,
        max_message_bytes=args.max_message_size,
        use_uvloop=args.uvloop,
        cluster_name=args.cluster_name,
        default_namespace_bundles=args.default_namespace_bundles,
    )


async def serve(config: BrokerConfig, started_at: float) -> None:
    soft, hard = raise_fd_limit()
    server = VelamqServer(config)
    await server.start()
    log.info(
        "file descriptors: %d (hard limit %d); brokerMaxConnections %d, brokerMaxConnectionsPerIp %d (0: none)",
        soft, hard, server.broker.connection_limits.max_total, server.broker.connection_limits.max_per_ip,
    )
    tune_collector_for_serving()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    elapsed_ms = (time.monotonic() - started_at) * 1000
    tls = ""
    if server.service_url_tls:
        tls += f" service_url_tls={server.service_url_tls}"
    if server.admin.web_service_url_tls:
        tls += f" admin_url_tls={server.admin.web_service_url_tls}"
    print(
        f"velamq standalone ready: service_url={server.service_url} admin_url={server.web_service_url}{tls} "
        f"data_dir={config.data_dir.resolve()} started_in_ms={elapsed_ms:.0f}",
        flush=True,
    )
    await stop.wait()
    log.info("shutting down: flushing storage and persisting cursors")
    await server.close()
    log.info("stopped")


def run_standalone(args: argparse.Namespace) -> int:
    started_at = time.monotonic()
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    try:
        config = load_config(args)
    except (OSError, ValueError) as exc:
        print(f"velamq: bad configuration: {exc}", file=sys.stderr)
        return 2
    if config.use_uvloop:
        import uvloop

        uvloop.install()
    from velamq.workers import Supervisor, serve_worker, worker_spec_from_environment

    worker = worker_spec_from_environment()
    try:
        if worker is not None:  # one of several, started by the supervisor below
            asyncio.run(serve_worker(worker, config))
        elif args.workers > 1:
            return asyncio.run(Supervisor(config, args.workers, sys.argv[1:], started_at).run())
        else:
            asyncio.run(serve(config, started_at))
    except SecurityConfigError as exc:  # a key, certificate or htpasswd file that cannot be used
        print(f"velamq: bad security configuration: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"velamq: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0
