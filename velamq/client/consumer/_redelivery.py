"""Asking the broker to deliver messages again (CO-3).

    NegativeAcks   negative_acknowledge(id) redelivers the id after negative_ack_redelivery_delay_ms
                   (ids that come due together leave in one REDELIVER)
    AckTimeouts    a message handed to the application and not acknowledged within ack_timeout_ms
                   is redelivered; checked every ack_timeout_tick_ms

Both call `redeliver(ids)`; the consumer sends REDELIVER_UNACKNOWLEDGED_MESSAGES with the ids on
Shared / Key_Shared subscriptions and without ids (everything unacked) on Exclusive / Failover, as
the official clients do, after moving ids that reached max_redeliver_count to the dead-letter topic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from velamq._clock import Clock
from velamq.client._message import MessageId

Redeliver = Callable[[list[MessageId]], None]


class NegativeAcks:
    def __init__(self, redeliver: Redeliver, delay_ms: int, clock: Clock) -> None:
        self._redeliver = redeliver
        self.delay_ms = delay_ms
        self._clock = clock
        self._due: dict[MessageId, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, message_id: MessageId) -> None:
        self._due[message_id] = self._clock.monotonic_s() + self.delay_ms / 1000
        self._arm()

    def remove(self, message_id: MessageId) -> None:
        self._due.pop(message_id, None)

    def _arm(self) -> None:
        if self._timer is not None or not self._due:
            return
        wait_s = max(0.0, min(self._due.values()) - self._clock.monotonic_s())
        self._timer = asyncio.get_running_loop().call_later(wait_s + 0.001, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self._clock.monotonic_s()
        due = [mid for mid, at in self._due.items() if at <= now]
        for mid in due:
            del self._due[mid]
        if due:
            self._redeliver(due)
        self._arm()

    def __len__(self) -> int:
        return len(self._due)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due.clear()


class AckTimeouts:
    def __init__(self, redeliver: Redeliver, timeout_ms: int, tick_ms: int, clock: Clock) -> None:
        self._redeliver = redeliver
        self.timeout_ms = timeout_ms
        self.tick_ms = max(100, min(tick_ms, timeout_ms)) if timeout_ms else tick_ms
        self._clock = clock
        self._deadlines: dict[MessageId, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    @property
    def enabled(self) -> bool:
        return self.timeout_ms > 0

    def add(self, message_id: MessageId) -> None:
        if not self.enabled:
            return
        self._deadlines[message_id] = self._clock.monotonic_s() + self.timeout_ms / 1000
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.tick_ms / 1000, self._tick)

    def remove(self, message_id: MessageId) -> None:
        self._deadlines.pop(message_id, None)

    def remove_up_to(self, message_id: MessageId) -> None:
        for mid in [m for m in self._deadlines if m <= message_id]:
            del self._deadlines[mid]

    def clear(self) -> None:
        self._deadlines.clear()

    def _tick(self) -> None:
        self._timer = None
        now = self._clock.monotonic_s()
        expired = [mid for mid, at in self._deadlines.items() if at <= now]
        for mid in expired:
            del self._deadlines[mid]
        if expired:
            self._redeliver(expired)
        if self._deadlines:
            self._timer = asyncio.get_running_loop().call_later(self.tick_ms / 1000, self._tick)

    def __len__(self) -> int:
        return len(self._deadlines)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._deadlines.clear()
