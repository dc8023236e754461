"""A velamq server inside the test process: its event loop in a background thread, on free ports,
with its own data dir. Faster to start than a BrokerProcess and lets a test reach the server's
objects (`broker.server`), e.g. to run a coroutine on its loop with `broker.run(...)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from velamq._clock import Clock, system_clock
from velamq.broker import BrokerConfig
from velamq.server import VelamqServer

R = TypeVar("R")

call_timeout_s = 30.0


class BrokerThread:
    """One VelamqServer on a loop of its own thread. Call start() once and stop() once."""

    def __init__(
        self,
        data_dir: Path,
        clock: Clock = system_clock,
        *,
        config: BrokerConfig | None = None,
        plain_port: bool = True,
        **options: Any,
    ) -> None:
        """The ports of `config` become free ones: the plain binary port (none if not
        `plain_port`), the HTTP port and the TLS ports its security settings have."""
        base = config or BrokerConfig()
        security = base.security
        security = replace(
            security,
            broker_port_tls=None if security.broker_port_tls is None else 0,
            web_port_tls=None if security.web_port_tls is None else 0,
        )
        self.config = replace(
            base, data_dir=data_dir, broker_port=0 if plain_port else None, http_port=0,
            bind_address="127.0.0.1", advertised_address="127.0.0.1", security=security,
        )
        self._clock = clock
        self._options = options
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="velamq-broker", daemon=True)
        self._server: VelamqServer | None = None

    @property
    def server(self) -> VelamqServer:
        if self._server is None:
            raise RuntimeError("broker not started")
        return self._server

    @property
    def service_url(self) -> str:
        return self.server.service_url

    @property
    def admin_url(self) -> str:
        return self.server.web_service_url

    def run(self, coroutine: Coroutine[Any, Any, R], timeout_s: float = call_timeout_s) -> R:
        """Run a coroutine on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=timeout_s)

    def start(self) -> None:
        self._thread.start()

        async def start() -> VelamqServer:
            server = VelamqServer(self.config, self._clock, **self._options)
            await server.start()
            return server

        self._server = self.run(start())

    def stop(self) -> None:
        if self._server is not None:
            self.run(self._server.close())
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=call_timeout_s)
        self._loop.close()


@contextlib.contextmanager
def run_broker_in_thread(
    data_dir: str | Path | None = None, clock: Clock = system_clock, **options: Any
) -> Iterator[BrokerThread]:
    """A BrokerThread started for the block; a temporary data dir (removed after) unless given.
    `options` go to BrokerThread: config=BrokerConfig(...), admin_timeout_s=..., ..."""
    tmp = None
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix="velamq-test-")
        data_dir = Path(tmp) / "data"
    broker = BrokerThread(Path(data_dir), clock, **options)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
