"""One worker process of `velamq standalone --workers N`: a whole VelamqServer on the supervisor's
sockets, serving the bundles it owns.

It is started by the supervisor with the same command line and `VELAMQ_WORKER` in its environment
(velamq/workers/_sockets.py: its id, the descriptors it inherited, every worker's URLs). Its share of
the broker's budgets is 1/N of the memory budget and of the connection caps (`--memory` and
brokerMaxConnections are the whole broker's). It tells the supervisor it is ready by writing one
line to the pipe named by `VELAMQ_WORKER_READY`, prints one line saying what it owns and where it
listens, and stops cleanly on SIGTERM (flushes storage and persists cursors, as a lone broker does).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
from typing import Final

from velamq.admin import AdminSockets
from velamq.broker import BrokerConfig, ListenSockets
from velamq.metadata import MetadataStore
from velamq.server import VelamqServer, WorkerRole, raise_fd_limit, tune_collector_for_serving
from velamq.workers._ownership import WorkerOwnership
from velamq.workers._sockets import WorkerSpec, adopt

log = logging.getLogger("velamq.workers")

READY_ENV: Final = "VELAMQ_WORKER_READY"
SUPERVISOR_ENV: Final = "VELAMQ_SUPERVISOR_PID"
_PR_SET_PDEATHSIG: Final = 1
# Namespaces named in the start line at most (the rest are counted).
_named_namespaces_max: Final = 8


def worker_config(config: BrokerConfig, workers: int) -> BrokerConfig:
    """This worker's share of the broker-wide budgets."""
    share: dict[str, object] = {"memory_bytes": max(config.memory_bytes // workers, 64 << 20)}
    if config.max_connections:
        share["max_connections"] = max(config.max_connections // workers, 1)
    return config.with_overrides(**share)


def worker_role(spec: WorkerSpec, config: BrokerConfig) -> WorkerRole:
    own, shared = spec.own, spec.shared

    def ownership(metadata: MetadataStore) -> WorkerOwnership:
        return WorkerOwnership(metadata, spec.worker_id, spec.addresses, config.default_namespace_bundles)

    return WorkerRole(
        worker_id=spec.worker_id,
        broker_sockets=ListenSockets(adopt(own.plain), adopt(own.tls), adopt(shared.plain), adopt(shared.tls)),
        admin_sockets=AdminSockets(adopt(own.web), adopt(own.web_tls), adopt(shared.web), adopt(shared.web_tls)),
        ownership=ownership,
    )


async def _start_line(server: VelamqServer, ownership: WorkerOwnership) -> str:
    namespaces: list[str] = []
    for tenant in await server.metadata.list_tenants():
        namespaces += await server.metadata.list_namespaces(tenant)
    owned = await ownership.owned_bundles(namespaces)
    named = [f"{ns}[{','.join(bundles)}]" for ns, bundles in sorted(owned.items())[:_named_namespaces_max]]
    if len(owned) > _named_namespaces_max:
        named.append(f"and bundles of {len(owned) - _named_namespaces_max} more namespaces")
    address = ownership.me
    listens = " ".join(
        f"{key}={value}"
        for key, value in (
            ("service_url", address.broker_url),
            ("service_url_tls", address.broker_url_tls),
            ("admin_url", address.web_url),
            ("admin_url_tls", address.web_url_tls),
        )
        if value
    )
    return (
        f"velamq worker {ownership.worker_id} of {ownership.workers} ready: pid={os.getpid()} {listens} "
        f"owns {' '.join(named) or 'no bundle of an existing namespace'}"
    )


def die_with_supervisor() -> None:
    """SIGKILL this worker when its supervisor dies (Linux's PR_SET_PDEATHSIG), as a crash of the
    whole broker would; asked here rather than between fork and exec, where the supervisor's
    threads make Python code unsafe. A supervisor gone before the request took effect: exit now."""
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if supervisor is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(supervisor):
        raise SystemExit("velamq worker: its supervisor is gone")


async def serve_worker(spec: WorkerSpec, config: BrokerConfig) -> None:
    die_with_supervisor()
    raise_fd_limit()
    server = VelamqServer(worker_config(config, spec.workers), role=worker_role(spec, config))
    await server.start()
    tune_collector_for_serving()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ownership = server.ownership
    assert isinstance(ownership, WorkerOwnership)
    print(await _start_line(server, ownership), flush=True)
    _tell_ready()
    await stop.wait()
    log.info("worker %d shutting down: flushing storage and persisting cursors", spec.worker_id)
    await server.close()
    log.info("worker %d stopped", spec.worker_id)


def _tell_ready() -> None:
    fd = os.environ.get(READY_ENV)
    if fd is None:
        return
    try:
        os.write(int(fd), b"ready\n")
        os.close(int(fd))
    except OSError as exc:  # the supervisor is gone: nothing to tell
        log.warning("could not tell the supervisor this worker is ready: %s", exc)
