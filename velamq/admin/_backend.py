"""What the admin tier needs from the broker: the BrokerBackend protocol (the broker implements it).

Reads and plain metadata changes go straight to `metadata`; anything that must also act on live
topics (closing producers and consumers, deleting ledgers) goes through the broker's methods, so
that each topic's state keeps one owner (DESIGN §3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    # Only for annotations: the broker imports velamq.admin, so a runtime import of velamq.broker
    # here could close an import cycle once the broker package imports its service at load time.
    from velamq.broker._stats import BrokerMetrics
    from velamq.metadata import MetadataStore


class BrokerBackend(Protocol):
    @property
    def metadata(self) -> MetadataStore: ...

    @property
    def service_url(self) -> str:
        """"pulsar://host:port" """
        ...

    @property
    def service_url_tls(self) -> str | None:
        """"pulsar+ssl://host:port", or None without TLS."""
        ...

    @property
    def web_service_url(self) -> str:
        """"http://host:port" of this admin server."""
        ...

    def metrics_snapshot(self) -> BrokerMetrics:
        """Figures taken on the loop; must be cheap (the /metrics scrape calls it each time)."""
        ...

    async def delete_topic(self, topic: str, force: bool) -> None:
        """Close live producers/consumers (or raise PreconditionFailedError if in use and not force),
        delete the ledger and the metadata row. NotFoundError if there is no such topic."""
        ...

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """Metadata now; the partitions themselves are created lazily when first used."""
        ...

    async def delete_partitioned_topic(self, topic: str, force: bool) -> None:
        """Like delete_topic for every partition, then the partitioned topic's metadata."""
        ...
