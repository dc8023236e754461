"""The state a subscription's parts share (_subscription.py, _dispatch.py, _acks.py).

Subscription is assembled from base classes over one set of attributes: the consumers and the
position bookkeeping (_subscription.py), the dispatch task (_dispatch.py) and acknowledgements and
redeliveries (_acks.py). They are base classes rather than separate objects because they all read
and write the same cursor, read position, in-flight bookkeeping and selector, on the one task that
owns the subscription; splitting that state between objects would only add pointers between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from velamq._clock import Clock
from velamq.broker._rates import SubscriptionRates
from velamq.broker.delayed._tracker import DelayedDeliveryTracker
from velamq.broker.log._compaction import CompactedView
from velamq.broker.subscription._chunk_owners import ChunkOwners
from velamq.broker.subscription._consumer import ServerConsumer
from velamq.broker.subscription._in_flight import InFlight
from velamq.broker.subscription._selector import ConsumerSelector, SubType
from velamq.storage import LedgerStore, ManagedCursor, ManagedLedger, Position

_NO_CONSUMERS: tuple[ServerConsumer, ...] = ()


class SubscriptionState:
    """The attributes of a subscription, declared once for the base classes that make it up, and
    the lazily made parts they all use: the in-flight bookkeeping and the rate counters. The
    attributes are set and documented in Subscription.__init__."""

    __slots__ = (
        "_chunk_owners",
        "_closed",
        "_delayed",
        "_delayed_restored",
        "_epoch",
        "_in_flight",
        "_partition_index",
        "_rates",
        "_read_size",
        "_selector",
        "_storage",
        "_sub_type",
        "_task",
        "_waiter",
        "_wake_pending",
        "allow_out_of_order",
        "clock",
        "compacted_view",
        "cursor",
        "delayed_delivery",
        "durable",
        "ledger",
        "name",
        "read_compacted",
        "read_position",
        "resetting",
        "terminated",
    )

    name: str
    ledger: ManagedLedger
    cursor: ManagedCursor
    durable: bool
    clock: Clock
    read_position: Position
    delayed_delivery: bool
    read_compacted: bool
    compacted_view: CompactedView | None
    resetting: bool
    allow_out_of_order: bool
    terminated: bool
    _sub_type: SubType
    _partition_index: int
    _selector: ConsumerSelector | None
    _in_flight: InFlight | None
    _delayed: DelayedDeliveryTracker | None
    _chunk_owners: ChunkOwners | None
    _storage: LedgerStore | None
    _delayed_restored: bool
    _epoch: int
    _wake_pending: bool
    _waiter: asyncio.Future[None] | None
    _task: asyncio.Task[None] | None
    _closed: bool
    _rates: SubscriptionRates | None

    @property
    def consumers(self) -> Sequence[ServerConsumer]:
        return self._selector.consumers if self._selector is not None else _NO_CONSUMERS

    def _flight(self) -> InFlight:
        in_flight = self._in_flight
        if in_flight is None:
            in_flight = self._in_flight = InFlight()
        return in_flight

    def _counting(self) -> SubscriptionRates:
        rates = self._rates
        if rates is None:
            rates = self._rates = SubscriptionRates.since(self.clock.monotonic_s())
        return rates
