"""The broker's admin operations of tiered storage (docs/offload.md), a base of BrokerAdmin: an
offload asked through the admin API, and its status. The offloading itself is storage's
(velamq/storage/offload); a topic is loaded on demand to reach its managed ledger."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from velamq._errors import PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.broker._service import BrokerService
from velamq.broker.topic._topic import Topic
from velamq.storage import OffloadStatus, Position


class OffloadAdmin:
    # BrokerAdmin's: its broker, and a topic that exists, loaded on demand.
    _broker: BrokerService
    _topic: Callable[[str], Coroutine[Any, Any, Topic]]

    async def trigger_offload(self, topic: str, up_to: Position) -> bool:
        """Offload the topic's sealed ledgers before up_to, in the background; False if an offload
        of the topic is running. PreconditionFailedError when no offload driver is configured."""
        storage = self._broker.storage
        if not storage.offload_enabled:
            raise PreconditionFailedError("offloading is not configured: set managedLedgerOffloadDriver")
        return storage.request_offload((await self._topic(topic)).ledger, up_to)

    def offload_status(self, topic: str) -> OffloadStatus:
        return self._broker.storage.offload_status(str(TopicName.parse(topic)))
