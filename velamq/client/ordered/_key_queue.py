"""The messages of one partition waiting for a worker, by key, for key_assignment="free_worker".
Sans-IO: no asyncio and no lock here; the caller serialises access.

With key_assignment="hash" (OC-1, ZTO's design) a key always runs on worker hash(key) % N, so the
worker holding the most keys bounds the partition: 1000 uniform keys over 8 partitions x 16 workers
leave the busiest of the 128 workers with 231 messages where the average is 125, and the run can
go no faster than that worker. With "free_worker" the only messages that wait for each other are
those of one key: a key is *ready* when it has waiting messages and none running, and a free worker
takes the ready key whose next message is oldest (the one holding back the acknowledged prefix).
Order per key is the same guarantee: one message of a key at a time, in arrival order.

    add(item, key)   a received message joins its key's queue (a new key is ready at once)
    take()           (item, key) of the oldest ready message, the key now running; None if no key
                     is ready (every waiting message's key is running, or nothing waits)
    release(key)     the key's running message finished: its next message, if any, is ready

The heap holds (ticket of the key's next message, key) for ready keys only; tickets are unique,
so two entries never compare their keys. A key leaves the table when it is neither running nor
waiting, so the table is bounded by the partition's window (max_in_flight messages).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable

from velamq.client.ordered._lanes import Item


class KeyQueue:
    __slots__ = ("_keys", "_ready", "waiting")

    def __init__(self) -> None:
        # A key is in _keys while it runs or has waiting messages. Present with an empty deque:
        # running and nothing behind it. Present with items and not running: in _ready.
        self._keys: dict[Hashable, deque[Item]] = {}
        self._ready: list[tuple[int, Hashable]] = []
        self.waiting = 0  # messages added and not yet taken

    def __len__(self) -> int:
        return self.waiting

    @property
    def ready(self) -> int:
        """Keys a free worker could start now."""
        return len(self._ready)

    @property
    def keys(self) -> int:
        """Keys running or waiting."""
        return len(self._keys)

    def add(self, item: Item, key: Hashable) -> None:
        self.waiting += 1
        queue = self._keys.get(key)
        if queue is None:
            self._keys[key] = deque((item,))
            heapq.heappush(self._ready, (item[0], key))
        else:
            # Not new: either running (release() readies it) or already in the heap with an
            # older message at its head. Either way nothing to push.
            queue.append(item)

    def take(self) -> tuple[Item, Hashable] | None:
        if not self._ready:
            return None
        _, key = heapq.heappop(self._ready)
        self.waiting -= 1
        return self._keys[key].popleft(), key

    def release(self, key: Hashable) -> None:
        queue = self._keys[key]
        if queue:
            heapq.heappush(self._ready, (queue[0][0], key))
        else:
            del self._keys[key]
