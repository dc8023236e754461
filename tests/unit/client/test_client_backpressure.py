"""Permits and the memory limit (PR-5): FIFO admission, fail-fast, release."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from velamq.client.producer._backpressure import MemoryLimit, Permits


def test_try_acquire_fails_at_the_limit_and_release_frees() -> None:
    p = Permits(2)
    assert p.try_acquire() and p.try_acquire() and not p.try_acquire()
    p.release()
    assert p.available == 1 and p.try_acquire()


def test_unlimited_and_oversized() -> None:
    assert Permits(0).try_acquire(10**6)
    m = MemoryLimit(100)
    assert m.try_acquire(500)  # nothing reserved: one oversized message may pass
    assert not m.try_acquire(1)
    m.release(500)
    assert m.used == 0


async def until(condition: Callable[[], bool], turns_max: int = 1000) -> None:
    """Let other tasks run until the condition holds (no I/O here: only turns of the loop count)."""
    for _ in range(turns_max):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def test_waiters_are_served_in_order() -> None:
    async def run() -> list[int]:
        p = Permits(1)
        await p.acquire()
        order: list[int] = []

        async def waiter(i: int, amount: int) -> None:
            await p.acquire(amount)
            order.append(i)
            await asyncio.sleep(0)
            p.release(amount)

        tasks = [asyncio.create_task(waiter(i, 1)) for i in range(5)]
        await until(lambda: p.waiting == 5)
        assert not p.try_acquire()  # waiters go first
        p.release()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(run()) == [0, 1, 2, 3, 4]


def test_cancelled_waiter_gives_nothing_away() -> None:
    async def run() -> None:
        p = Permits(1)
        await p.acquire()
        t = asyncio.create_task(p.acquire())
        await until(lambda: p.waiting == 1)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        p.release()
        assert p.used == 0 and p.try_acquire()

    asyncio.run(run())
