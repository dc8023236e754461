"""The broker tier: the Pulsar protocol server over storage and metadata.

    broker = BrokerService(config, storage, metadata, clock)   # storage, metadata started first
    await broker.start(); broker.service_url; await broker.close()
    BrokerAdmin(broker)                                         # what the admin tier talks to

velamq/server.py composes them with the admin server. The stats records are what BrokerAdmin
answers with; the admin tier renders them. DiskUsage is what a disk_stat function returns (the
disk guard's view of a filesystem, injected by tests).
"""

from velamq.broker._broker_admin import BrokerAdmin
from velamq.broker._config import BrokerConfig
from velamq.broker._errors import BrokerRequestError
from velamq.broker._ownership import BrokerUrls, Ownership
from velamq.broker._service import BrokerService
from velamq.broker.guards._disk import DiskUsage
from velamq.broker.log._compaction import CompactionStatus
from velamq.broker.nonpersistent._stats import NonPersistentTopicStats
from velamq.broker.session._listener import ListenSockets, listening_socket
from velamq.broker.stats._rate_history import RateSeries
from velamq.broker.stats._records import (
    BrokerMetrics,
    BrokerOverview,
    ConsumerStats,
    CursorStats,
    InternalStats,
    LastMessageId,
    LedgerStats,
    NamespaceMetrics,
    PublisherStats,
    SubscriptionMetrics,
    SubscriptionStats,
    TopicMetrics,
    TopicStats,
)

__all__ = [
    "BrokerAdmin",
    "BrokerConfig",
    "BrokerMetrics",
    "BrokerOverview",
    "BrokerRequestError",
    "BrokerService",
    "BrokerUrls",
    "CompactionStatus",
    "ConsumerStats",
    "CursorStats",
    "DiskUsage",
    "InternalStats",
    "LastMessageId",
    "LedgerStats",
    "ListenSockets",
    "NamespaceMetrics",
    "NonPersistentTopicStats",
    "Ownership",
    "PublisherStats",
    "RateSeries",
    "SubscriptionMetrics",
    "SubscriptionStats",
    "TopicMetrics",
    "TopicStats",
    "listening_socket",
]
