"""Pending-message permits and the client-wide memory limit (PR-5).

    Permits      one partition producer's maxPendingMessages semaphore: a message (or a chunk)
                 takes one permit when it enters the producer and gives it back on its receipt,
                 its failure or its timeout
    MemoryLimit  one per client: bytes of uncompressed payload between send and receipt

Both admit in FIFO order, so a sender that waited is never overtaken by a later one (messages
stay in the order they were sent). try_* never waits: block_if_queue_full=false fails at once.
A limit of 0 means unlimited. A message larger than the whole memory limit is admitted when
nothing else is reserved (as Java's MemoryLimitController does), so it cannot wait forever.
"""

from __future__ import annotations

import asyncio
from collections import deque


class _FifoCounter:
    __slots__ = ("_waiters", "limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, amount: int) -> bool:
        return self.limit == 0 or self.used + amount <= self.limit or self.used == 0

    def try_acquire(self, amount: int = 1) -> bool:
        if self._waiters or not self._fits(amount):
            return False
        self.used += amount
        return True

    async def acquire(self, amount: int = 1) -> None:
        if self.try_acquire(amount):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (amount, future)
        self._waiters.append(entry)
        try:
            await future
        except BaseException:
            if entry in self._waiters:
                self._waiters.remove(entry)
            elif future.done() and not future.cancelled():
                self.release(amount)  # granted just as we were cancelled: give it back
            raise

    def release(self, amount: int = 1) -> None:
        self.used = max(0, self.used - amount)
        while self._waiters:
            amount_next, future = self._waiters[0]
            if future.done():
                self._waiters.popleft()
                continue
            if not self._fits(amount_next):
                break
            self._waiters.popleft()
            self.used += amount_next
            future.set_result(None)

    @property
    def waiting(self) -> int:
        """How many acquire() calls wait for their turn."""
        return sum(1 for _, future in self._waiters if not future.done())

    @property
    def available(self) -> int:
        """How many units can be taken now without waiting (a large number when unlimited)."""
        if self.limit == 0:
            return 1 << 62
        return 0 if self._waiters else max(0, self.limit - self.used)


class Permits(_FifoCounter):
    """maxPendingMessages of one partition producer."""


class MemoryLimit(_FifoCounter):
    """The client-wide memoryLimit on uncompressed payload bytes."""
