"""asyncio.gather for the client's fan-outs over partitions, cheaper for the common case of one.

A producer or consumer of a non-partitioned topic has one child, and starting, closing or adding
a topic gathered that one child anyway: a task for it and a gathering future with its callbacks,
on every create and close (a tenth of the client's CPU when topics are created and closed one
after the other). With one awaitable it is awaited here instead, with gather's outcome: its result
in a list, or its exception (returned in the list with `return_exceptions`, as gather does, except
a cancellation of the caller itself, which propagates as it would through gather).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any


async def gather_all(awaitables: Iterable[Awaitable[Any]], *, return_exceptions: bool = False) -> list[Any]:
    items = list(awaitables)
    if len(items) != 1:
        return list(await asyncio.gather(*items, return_exceptions=return_exceptions))
    try:
        return [await items[0]]
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if not return_exceptions or (task is not None and task.cancelling()):
            raise
        return [exc]
    except Exception as exc:
        if not return_exceptions:
            raise
        return [exc]
