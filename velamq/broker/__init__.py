"""The broker tier: the Pulsar protocol server over storage and metadata."""

from velamq.broker._config import BrokerConfig
from velamq.broker._service import BrokerService

__all__ = ["BrokerConfig", "BrokerService"]
