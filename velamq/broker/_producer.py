"""A producer attached to a topic over one connection."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from velamq.broker._channel import NO_REQUEST_ID, Channel
from velamq.broker._rates import RateCounter
from velamq.protocol import pb

if TYPE_CHECKING:
    from velamq.broker._topic import Topic


@dataclass(eq=False, slots=True)
class ServerProducer:
    """The broker's side of one client producer: its name (the deduplication key), its epoch and
    access mode (who may publish, see _producer_access.py) and its publish counters."""

    channel: Channel
    producer_id: int
    name: str
    topic: Topic
    epoch: int
    access_mode: int  # pb.ProducerAccessMode
    connected_since_ms: int = 0
    schema_version: bytes | None = None  # its schema's version (8 bytes), None without a schema
    rate_in: RateCounter = field(default_factory=RateCounter)
    chunks_in: RateCounter = field(default_factory=RateCounter)

    def close_by_broker(self) -> None:
        """Detach from topic and connection and tell the client; it reconnects (or learns it is fenced)."""
        self.topic.remove_producer(self)
        self.channel.forget_producer(self)
        command = pb.BaseCommand(type=pb.BaseCommand.CLOSE_PRODUCER)
        command.close_producer.producer_id = self.producer_id
        command.close_producer.request_id = NO_REQUEST_ID
        self.channel.send_command(command)
