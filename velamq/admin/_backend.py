"""What the admin tier needs from the broker: the BrokerBackend protocol (the broker implements it).

Reads and plain metadata changes go straight to `metadata`; anything that must also act on live
topics (closing producers and consumers, deleting ledgers) goes through the broker's methods, so
that each topic's state keeps one owner (DESIGN §3).

`BrokerOperations` lists what the topic and subscription routes call on live topics; BrokerBackend
includes it. Routes still look each one up with `operations()`, so a backend that lacks one (a
test double, a broker built without a feature) answers 501 Not Implemented for that route only.

Names are full topic names ("persistent://t/ns/x"); the routes hand a partitioned topic's
partitions to these methods one by one, never the partitioned topic itself. Message ids are
(ledger_id, entry_id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

from velamq.admin._http import HttpError

if TYPE_CHECKING:
    # Only for annotations: the broker imports velamq.admin, so a runtime import of velamq.broker
    # here could close an import cycle once the broker package imports its service at load time.
    from velamq.broker._stats import BrokerMetrics
    from velamq.metadata import MetadataStore


class BrokerOperations(Protocol):
    async def topic_stats(self, topic: str) -> dict[str, Any]:
        """Pulsar's TopicStats JSON; NotFoundError if the topic is unknown."""
        ...

    async def partitioned_topic_stats(self, topic: str) -> dict[str, Any]:
        """Pulsar's PartitionedTopicStats JSON (aggregate plus "partitions")."""
        ...

    async def topic_internal_stats(self, topic: str) -> dict[str, Any]:
        """Pulsar's PersistentTopicInternalStats JSON: ledgers, cursors, markDeletePosition, ..."""
        ...

    async def unload_topic(self, topic: str) -> None: ...

    async def trigger_compaction(self, topic: str) -> None: ...

    def compaction_status(self, topic: str) -> dict[str, Any]:
        """{"status": "NOT_RUN"|"RUNNING"|"SUCCESS"|"ERROR", "lastError": ""}"""
        ...

    async def last_message_id(self, topic: str) -> dict[str, Any]:
        """{"ledgerId", "entryId", "partitionIndex"}"""
        ...

    async def list_subscriptions(self, topic: str) -> list[str]: ...

    async def create_subscription(self, topic: str, subscription: str, message_id: tuple[int, int] | str) -> None:
        """message_id: "earliest", "latest" or (ledger, entry); AlreadyExistsError if it exists."""
        ...

    async def delete_subscription(self, topic: str, subscription: str, force: bool) -> None: ...

    async def skip_messages(self, topic: str, subscription: str, count: int | None) -> None:
        """count None: skip everything (skip_all)."""
        ...

    async def expire_messages(self, topic: str, subscription: str, seconds: int) -> None: ...

    async def reset_cursor(
        self, topic: str, subscription: str, timestamp_ms: int | None, message_id: tuple[int, int] | None
    ) -> None: ...

    async def peek_messages(self, topic: str, subscription: str, count: int) -> list[tuple[tuple[int, int], bytes]]:
        """The first `count` entries of the subscription's backlog as ((ledger, entry), stored entry
        bytes: [0x0e01][crc][metadata size][MessageMetadata][payload])."""
        ...

    async def policies_changed(self, namespace: str, topic: str | None) -> None:
        """Called after every policy write, so the broker re-reads the policies of live topics."""
        ...

    async def create_topic(self, topic: str) -> None:
        """A non-partitioned topic; AlreadyExistsError if it exists."""
        ...


class BrokerBackend(BrokerOperations, Protocol):
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

def operations(backend: object, *names: str) -> BrokerOperations:
    """The broker as BrokerOperations, after checking it has each method in `names`; HttpError 501
    (Not Implemented) for the first one it lacks."""
    for name in names:
        if not callable(getattr(backend, name, None)):
            raise HttpError(501, f"This broker does not implement {name} yet")
    return cast(BrokerOperations, backend)
