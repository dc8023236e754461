"""The broker-wide publish buffer (ME-2): bytes appended but not yet durable, against one bound.

Every ManagedLedger.append adds its entry's size when it is called and takes it off again when the
append resolves (durable, or failed). The buffer itself never refuses anything, so appends keep
their call order; it tells whoever feeds appends that it is full:

- the broker checks `full` after handing a SEND to storage; when full it stops reading that
  producer connection and registers a callback with `on_room`, which is called once the buffer has
  drained to half its bound (hysteresis, so reading does not flap on and off per entry);
- a library user awaits `wait_for_room()` before appending.

So however hard producers push, memory holds at most the bound plus what was already read from the
sockets when reading stopped. Lives on the event loop; callbacks run there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class PublishBuffer:
    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.size_bytes = 0
        self.bytes_peak = 0
        self.pauses_total = 0  # times a feeder was told to stop (on_room / wait_for_room while full)
        self._waiters: dict[Callable[[], None], None] = {}  # insertion-ordered set

    @property
    def full(self) -> bool:
        return self.size_bytes >= self.bytes_max > 0

    @property
    def resume_bytes(self) -> int:
        """Feeders are resumed once the buffer holds this many bytes or fewer."""
        return self.bytes_max // 2

    @property
    def paused(self) -> int:
        """Feeders waiting for room right now."""
        return len(self._waiters)

    def acquire(self, size: int) -> None:
        self.size_bytes += size
        if self.size_bytes > self.bytes_peak:
            self.bytes_peak = self.size_bytes

    def release(self, size: int) -> None:
        self.size_bytes -= size
        if self._waiters and self.size_bytes <= self.resume_bytes:
            waiters = list(self._waiters)
            self._waiters.clear()
            for resume in waiters:
                resume()

    def on_room(self, resume: Callable[[], None]) -> None:
        """Call `resume` once the buffer has drained (at once if it is not full now)."""
        if not self.full:
            resume()
            return
        if resume not in self._waiters:
            self.pauses_total += 1
            self._waiters[resume] = None

    def cancel(self, resume: Callable[[], None]) -> None:
        """Forget a callback registered with on_room (its connection closed)."""
        self._waiters.pop(resume, None)

    async def wait_for_room(self) -> None:
        if not self.full:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def resume() -> None:
            if not future.done():
                future.set_result(None)

        self.on_room(resume)
        try:
            await future
        finally:
            self.cancel(resume)

    def metrics(self) -> dict[str, float]:
        return {
            "velamq_storage_publish_buffer_bytes": self.size_bytes,
            "velamq_storage_publish_buffer_bytes_max": self.bytes_max,
            "velamq_storage_publish_buffer_bytes_peak": self.bytes_peak,
            "velamq_storage_publish_buffer_paused": self.paused,
            "velamq_storage_publish_buffer_pauses_total": self.pauses_total,
        }
