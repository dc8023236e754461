"""What one published entry waits for, acted on the moment storage resolves it (issue 12).

Storage resolves an append on the loop, in the write path, when its journal group is durable (or
failed). An asyncio.Future there costs a future per entry plus a scheduled callback for each
party that waits on it (the topic's dispatch wake-up, deduplication, the receipt): three loop
turns' worth of handles per unbatched SEND. A Published is storage's AppendWaiter instead: when
the entry is durable it updates deduplication, wakes the subscriptions and calls `durable` at once,
in the order the entries were appended, so receipts keep the order of the sends. A failure is
handed on with call_soon, as a future's callbacks were: what it sets off (the broker going
read-only, producers closed) must not run inside the write path.

Durability is unchanged: `durable` runs only once storage has made the entry durable under the
sync policy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from velamq.broker.topic._dedup import Deduplication
from velamq.storage import Position


class Wakeable(Protocol):
    def wake(self) -> None:
        """New entries are there: a subscription's dispatch looks again."""
        ...


class PublishTarget(Protocol):
    """What a durable entry sets off in its topic (Topic is one): every subscription woken, then
    the checks that follow a publish."""

    @property
    def subscriptions(self) -> Mapping[str, Wakeable]: ...

    @property
    def entry_watchers(self) -> Sequence[Callable[[], None]]:
        """Told after each durable append (the geo-replicators' wake-ups)."""
        ...

    def after_durable(self) -> None: ...


log = logging.getLogger(__name__)


class Published:
    """Storage's AppendWaiter for one entry a topic appended; subclasses say what follows in
    `durable` and `failed` (both run on the loop and must not raise)."""

    __slots__ = ("_dedup", "_dedup_name", "_dedup_sequence_id", "_done", "_topic")

    _topic: PublishTarget
    _dedup: Deduplication | None

    def __init__(self) -> None:
        # Only `_done` is read before appended_to: a subclass may set just that (see _Receipt).
        self._done = False

    def appended_to(
        self, topic: PublishTarget, dedup: Deduplication | None, producer_name: str, sequence_id: int
    ) -> None:
        """Called by Topic.publish_with before the append: the topic to wake, and deduplication's
        figure to move (None: not tracked) once the entry is durable."""
        self._topic = topic
        self._dedup = dedup
        self._dedup_name = producer_name
        self._dedup_sequence_id = sequence_id

    # ---- storage's side (AppendWaiter) ------------------------------------------------------------

    def done(self) -> bool:
        return self._done

    def set_result(self, position: Position, /) -> None:
        self._done = True
        try:
            if self._dedup is not None:
                self._dedup.persisted_up_to(self._dedup_name, self._dedup_sequence_id)
            topic = self._topic
            for subscription in topic.subscriptions.values():
                subscription.wake()
            for watch in topic.entry_watchers:
                watch()
            self.durable(position)
            topic.after_durable()  # the backlog quota, checked after the receipt went out
        except Exception:  # never into the write path, which resolves the rest of the group
            log.exception("after a durable append")

    def set_exception(self, exception: BaseException, /) -> None:
        self._done = True
        asyncio.get_running_loop().call_soon(self._failed_now, exception)

    def _failed_now(self, exception: BaseException) -> None:
        if self._dedup is not None:
            self._dedup.failed(self._dedup_name)  # later sends with the same ids are accepted again
        self.failed(exception)

    # ---- what follows ------------------------------------------------------------------------------

    def durable(self, position: Position) -> None:
        """The entry is durable at `position` (or a duplicate: DUPLICATE_POSITION, nothing stored)."""

    def failed(self, exception: BaseException) -> None:
        """The append failed: nothing was stored."""


class PublishedFuture(Published):
    """A Published that resolves a future: Topic.publish's answer."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[Position]) -> None:
        super().__init__()
        self.future = future

    def durable(self, position: Position) -> None:
        if not self.future.done():
            self.future.set_result(position)

    def failed(self, exception: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exception)
