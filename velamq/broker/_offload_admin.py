"""The broker's admin operations of tiered storage (docs/offload.md), a base of BrokerAdmin: an
offload asked through the admin API, its status, and whether a namespace's offload policies name
the broker's own store. The offloading itself is storage's (velamq/storage/offload); a topic is
loaded on demand to reach its managed ledger."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from velamq._errors import PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.broker._service import BrokerService
from velamq.broker.topic._topic import Topic
from velamq.storage import OffloadConfig, OffloadStatus, Position


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

    def offload_store_differs(self, driver: str, bucket: str, endpoint: str, region: str, uri: str) -> str | None:
        """Why offload policies naming this store cannot apply here (velamq writes all offloaded
        ledgers of a broker to its one configured store), or None when they name that store (an
        empty field names it too)."""
        config = self._broker.config.offload
        if config is None:
            return "offloading is not configured on this broker: set managedLedgerOffloadDriver in its configuration"
        one_store = "velamq offloads every ledger of a broker to the store its configuration names"
        if (driver.lower() in ("s3", "aws-s3")) != config.is_s3:
            return f"this broker offloads with the {config.driver} driver, not {driver}: {one_store}"
        if config.is_s3:
            fields = (("bucket", bucket, config.bucket), ("service endpoint", endpoint, config.endpoint),
                      ("region", region, config.region))
            for what, given, have in fields:
                if given and given != have:
                    return f"this broker offloads to the {what} {have or '(default)'!r}, not {given!r}: {one_store}"
            return None
        data_dir = self._broker.config.data_dir
        if uri and OffloadConfig(uri=uri).root_dir(data_dir) != config.root_dir(data_dir):
            return f"this broker offloads under {config.root_dir(data_dir)}, not {uri}: {one_store}"
        return None
