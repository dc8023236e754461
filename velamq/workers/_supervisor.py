"""The supervisor of `velamq standalone --workers N`: it binds every port, starts N worker processes
(its children), restarts one that dies, and stops them all cleanly on SIGTERM.

It serves nothing itself. Workers are started with the supervisor's own command line (so they read
the same configuration) and `VELAMQ_WORKER` in their environment (_sockets.py). A worker that exits
while the broker runs is started again on the same sockets, at once the first time and then with a
growing delay while it keeps dying young (a broken disk must not make a fork loop). A worker dies
with its supervisor (PR_SET_PDEATHSIG: a supervisor killed with -9 takes its workers with it, as a
crash of the whole broker would; the worker asks for it itself, _worker.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from velamq.broker import BrokerConfig
from velamq.metadata import MetadataStore
from velamq.workers._sockets import ENV_VAR, SupervisorSockets
from velamq.workers._worker import READY_ENV, SUPERVISOR_ENV

log = logging.getLogger("velamq.workers")

# How long a worker may take to say it is ready (recovery of a big journal included).
ready_timeout_s: Final = 300.0
# How long a stopping worker may take to flush and persist before it is killed.
stop_timeout_s: Final = 120.0
# A worker that dies sooner than this after its start is restarted after a growing delay.
young_s: Final = 10.0
restart_delay_max_s: Final = 30.0

class WorkerProcess:
    """One worker slot: the process now running in it, and how often it had to be restarted."""

    def __init__(self, worker_id: int) -> None:
        self.worker_id = worker_id
        self.process: asyncio.subprocess.Process | None = None
        self.started_at = 0.0
        self.restarts = 0
        self.delay_s = 0.0


class Supervisor:
    def __init__(self, config: BrokerConfig, workers: int, argv: Sequence[str], started_at: float) -> None:
        self.config = config
        self.workers = workers
        self.argv = list(argv)
        self.started_at = started_at
        self._slots = [WorkerProcess(i) for i in range(workers)]
        self._sockets: SupervisorSockets | None = None
        self._stopping = asyncio.Event()

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT; the exit code of `velamq standalone`."""
        check_data_dir(self.config.data_dir)
        await prepare_metadata(self.config)
        self._sockets = SupervisorSockets(self.config, self.workers)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        try:
            started = await asyncio.gather(*(self._start(slot) for slot in self._slots))
            if not all(started):
                log.error("a worker did not start: stopping")
                return 1
            self._print_ready()
            watchers = [asyncio.create_task(self._watch(slot)) for slot in self._slots]
            await self._stopping.wait()
            log.info("shutting down %d workers: each flushes storage and persists cursors", self.workers)
            for task in watchers:
                task.cancel()
            return 0
        finally:
            await self._stop_all()
            self._sockets.close()

    def _print_ready(self) -> None:
        assert self._sockets is not None
        sockets, config = self._sockets, self.config
        host = config.advertised_address
        parts = []
        if (port := sockets.port_of(sockets.shared.plain)) is not None:
            parts.append(f"service_url=pulsar://{host}:{port}")
        if (port := sockets.port_of(sockets.shared.web)) is not None:
            parts.append(f"admin_url=http://{host}:{port}")
        if (port := sockets.port_of(sockets.shared.tls)) is not None:
            parts.append(f"service_url_tls=pulsar+ssl://{host}:{port}")
        if (port := sockets.port_of(sockets.shared.web_tls)) is not None:
            parts.append(f"admin_url_tls=https://{host}:{port}")
        elapsed_ms = (time.monotonic() - self.started_at) * 1000
        print(
            f"velamq standalone ready: {' '.join(parts)} data_dir={config.data_dir.resolve()} "
            f"workers={self.workers} started_in_ms={elapsed_ms:.0f}",
            flush=True,
        )

    async def _start(self, slot: WorkerProcess) -> bool:
        """Start a worker in the slot; True once it said it is ready, False if it died first."""
        assert self._sockets is not None
        sockets = self._sockets
        read_end, write_end = os.pipe()
        env = {
            **os.environ,
            ENV_VAR: sockets.spec(slot.worker_id).to_env(),
            READY_ENV: str(write_end),
            SUPERVISOR_ENV: str(os.getpid()),
            "PYTHONUNBUFFERED": "1",
        }
        try:
            slot.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "velamq", *self.argv,
                env=env, pass_fds=[*sockets.fds_for(slot.worker_id), write_end],
            )
        finally:
            os.close(write_end)
        slot.started_at = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            said = await asyncio.wait_for(loop.run_in_executor(None, os.read, read_end, 64), ready_timeout_s)
        except TimeoutError:
            said = b""
        finally:
            os.close(read_end)
        return said.startswith(b"ready")

    async def _watch(self, slot: WorkerProcess) -> None:
        """Restart the slot's worker each time it exits, until the broker stops."""
        while not self._stopping.is_set():
            process = slot.process
            assert process is not None
            code = await process.wait()
            if self._stopping.is_set():
                return
            lived_s = time.monotonic() - slot.started_at
            slot.delay_s = 0.0 if lived_s >= young_s else min(max(slot.delay_s * 2, 0.5), restart_delay_max_s)
            slot.restarts += 1
            log.error(
                "worker %d (pid %d) exited with %s after %.1f s: starting it again%s",
                slot.worker_id, process.pid, code, lived_s,
                f" in {slot.delay_s:.1f} s" if slot.delay_s else "",
            )
            if slot.delay_s:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), slot.delay_s)
                if self._stopping.is_set():
                    return
            await self._start(slot)

    async def _stop_all(self) -> None:
        running = [s.process for s in self._slots if s.process is not None and s.process.returncode is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                await asyncio.wait_for(process.wait(), stop_timeout_s)
            except TimeoutError:
                log.error("worker pid %d did not stop in %.0f s: killing it", process.pid, stop_timeout_s)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


def check_data_dir(data_dir: Path) -> None:
    """A data directory holds either one broker's storage or bundles' storages: never both, and
    never the wrong one for the command (the other's data would look lost)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if (data_dir / "journal").exists() or (data_dir / "storage.db").exists():
        raise ValueError(
            f"{data_dir} holds the storage of a one-process broker: start it without --workers "
            "(storage per bundle, which several workers need, is chosen when a data directory is new)"
        )


async def prepare_metadata(config: BrokerConfig) -> None:
    """Create or migrate metadata.db once, before the workers open it together."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    store = MetadataStore(config.data_dir / "metadata.db", cluster_name=config.cluster_name)
    await store.start()
    await store.close()
