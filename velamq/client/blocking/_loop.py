"""The blocking client's event-loop thread, as the client and everything it hands out use it.

Client, BlockingProducer, BlockingConsumer, BlockingReader and BlockingOrderedConsumer each hold
the one ClientLoop of their client (not the client itself): a coroutine is submitted to the loop
and waited for, and refused once the client is closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from velamq.client._errors import AlreadyClosedError

R = TypeVar("R")


class ClientLoop:
    """An asyncio loop on a daemon thread of its own, and whether its client is closed."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="velamq-client-loop", daemon=True)
        self._thread.start()
        self.closed = False

    def run(self, coroutine: Coroutine[Any, Any, R], timeout_s: float | None = None) -> R:
        """Run `coroutine` on the loop and wait for its result (from any thread but the loop's)."""
        if self.closed:
            coroutine.close()
            raise AlreadyClosedError("client is closed")
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("blocking client call from inside its own event loop: use AsyncClient there")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def stop(self) -> None:
        """The client closed: later calls are refused, the loop stops and its thread ends."""
        self.closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self.loop.is_running():
            self.loop.close()
