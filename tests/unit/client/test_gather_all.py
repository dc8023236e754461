"""gather_all: gather's outcome, with one awaitable awaited directly."""

from __future__ import annotations

import asyncio

import pytest

from velamq.client._gather import gather_all


async def _value(v: int) -> int:
    return v


async def _fail(message: str) -> int:
    raise ValueError(message)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_results_in_order_as_gather(n: int) -> None:
    async def main() -> None:
        assert await gather_all(_value(i) for i in range(n)) == list(range(n))
        assert await gather_all([_value(i) for i in range(n)]) == await asyncio.gather(*(_value(i) for i in range(n)))

    asyncio.run(main())


@pytest.mark.parametrize("n", [1, 3])
def test_an_exception_raises_or_is_returned_as_gather_does(n: int) -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="boom"):
            await gather_all([_fail("boom")] + [_value(i) for i in range(n - 1)])
        out = await gather_all([_fail("boom")] + [_value(i) for i in range(n - 1)], return_exceptions=True)
        assert isinstance(out[0], ValueError) and out[1:] == list(range(n - 1))

    asyncio.run(main())


def test_a_cancelled_caller_is_cancelled_even_with_return_exceptions() -> None:
    async def main() -> None:
        started = asyncio.Event()

        async def forever() -> None:
            started.set()
            await asyncio.Event().wait()

        task = asyncio.ensure_future(gather_all([forever()], return_exceptions=True))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_a_cancellation_inside_the_one_awaitable_is_returned_with_return_exceptions() -> None:
    async def main() -> None:
        async def cancelled_inside() -> None:
            inner = asyncio.ensure_future(asyncio.Event().wait())
            inner.cancel()
            await inner  # raises CancelledError here, the caller itself not cancelled

        out = await gather_all([cancelled_inside()], return_exceptions=True)
        assert isinstance(out[0], asyncio.CancelledError)
        assert isinstance((await asyncio.gather(cancelled_inside(), return_exceptions=True))[0], asyncio.CancelledError)

    asyncio.run(main())
