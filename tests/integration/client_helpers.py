"""Running a test body with velamq's asyncio client against a broker process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from velamq.client import AsyncClient
from velamq.testing import BrokerProcess

R = TypeVar("R")


def run_with_client(broker: BrokerProcess, body: Callable[[AsyncClient], Awaitable[R]]) -> R:
    """`body(client)` on a fresh event loop with a client of `broker` (operations time out after
    15 s, the whole body after 120 s: upper bounds only); the client closes after it."""

    async def main() -> R:
        async with AsyncClient(broker.service_url, operation_timeout_s=15) as client:
            return await asyncio.wait_for(body(client), 120)

    return asyncio.run(main())
