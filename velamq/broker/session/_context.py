"""What the connection and its command handlers need of the broker, as narrow protocols.

BrokerService implements all four; a handler module depends only on the one it names, so what a
command can reach is visible in its signature (and a unit test can tell what it must provide).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol

from velamq._clock import Clock
from velamq._log_limit import RateLimitedLog
from velamq._topic_name import TopicName
from velamq.broker._config import BrokerConfig
from velamq.broker._ownership import BrokerUrls
from velamq.broker.guards._disk import DiskGuard
from velamq.broker.guards._net_budget import NetworkBudget
from velamq.broker.session._auth import AuthCounters, Refreshable
from velamq.broker.session._topic_ports import CommandTopic
from velamq.broker.topic._schemas import BrokerSchemas
from velamq.metadata import Policies
from velamq.security import AuthenticationService, AuthorizationModel
from velamq.storage import PublishBuffer


class OpenConnection(Refreshable, Protocol):
    """What the broker keeps of an open connection (ServerConnection is one): its credentials are
    checked again periodically, and the broker closes it at shutdown."""

    def close(self) -> None: ...


class TopicRegistry(Protocol):
    @property
    def clock(self) -> Clock: ...

    @property
    def schemas(self) -> BrokerSchemas: ...

    @property
    def log_limit(self) -> RateLimitedLog:
        """Where log lines that can repeat per client go (one line per kind per minute)."""
        ...

    async def open_topic(self, name: TopicName, create: bool) -> CommandTopic:
        """The loaded topic of either kind, loading it first; BrokerRequestError(TopicNotFound) if
        it does not exist and may not be created."""
        ...

    def find_topic(self, full_name: str) -> CommandTopic | None:
        """The topic of either kind if it is loaded."""
        ...

    async def policies_for(self, name: TopicName) -> Policies:
        """Topic policy over namespace policy over the broker default, field by field."""
        ...

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run a task the broker owns (cancelled when it closes)."""
        ...


class ProducerBroker(TopicRegistry, Protocol):
    @property
    def publish_buffer(self) -> PublishBuffer: ...

    @property
    def disk_guard(self) -> DiskGuard:
        """Whether producers may write now (read_only), told of failed appends (write_failed) and
        of appended bytes (note_appended)."""
        ...

    def new_producer_name(self) -> str: ...


class DiscoveryBroker(TopicRegistry, Protocol):
    """What discovery (LOOKUP, PARTITIONED_METADATA, topics of a namespace, schemas) needs."""

    @property
    def listeners(self) -> set[str]:
        """Advertised listener names LOOKUP accepts."""
        ...

    @property
    def service_url_plain(self) -> str | None:
        """pulsar:// of the plain port; None on a TLS-only broker."""
        ...

    @property
    def service_url_tls(self) -> str | None: ...

    async def check_namespace(self, name: TopicName) -> None:
        """BrokerRequestError(TopicNotFound) unless the topic's namespace exists."""
        ...

    async def partitions_of(self, name: TopicName) -> int:
        """Partitions of a partitioned topic, 0 for anything else; a missing topic is created
        partitioned first where the automatic topic creation rule says so."""
        ...

    async def topics_of_namespace(self, namespace: str, mode: int) -> list[str]: ...

    async def owner_of(self, name: TopicName) -> BrokerUrls | None:
        """The URLs of the worker serving the topic when it is not this broker (_ownership.py)."""
        ...


class BrokerContext(ProducerBroker, DiscoveryBroker, Protocol):
    """Everything one client connection can reach."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def network(self) -> NetworkBudget:
        """The network's share of the memory budget (outbound bytes, partial frames)."""
        ...

    @property
    def server_version(self) -> str: ...

    @property
    def authentication(self) -> AuthenticationService | None:
        """CONNECT's credentials are checked by it (None: authentication disabled)."""
        ...

    @property
    def auth_counters(self) -> AuthCounters: ...

    @property
    def authorization(self) -> AuthorizationModel | None:
        """Commands are checked against it (None: authorization disabled)."""
        ...

    @property
    def service_url(self) -> str: ...

    def connection_opened(self, connection: OpenConnection) -> None: ...

    def connection_closed(self, connection: OpenConnection) -> None: ...
