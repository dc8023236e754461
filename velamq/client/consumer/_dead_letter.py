"""Publishing to the dead-letter topic (CO-3), as the official clients do it on the client side.

The dead-letter producer is created on first use (unbatched, not blocking); with the policy's
initial_subscription_name it asks the broker to create that subscription on the dead-letter topic
(from its earliest message, unless it exists), so dead-lettered messages are kept for it. A dead-lettered
message keeps payload, key, ordering key, event time and properties, plus REAL_TOPIC (where it came
from) and ORIGIN_MESSAGE_ID, the property names Pulsar uses.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from velamq.client._message import Message, MessageId

if TYPE_CHECKING:
    from velamq.client.producer._producer import Producer


class ProducerFactory(Protocol):
    """Where the dead-letter producer comes from: the consumer's client."""

    async def create_producer(self, topic: str, **options: Any) -> Producer: ...

PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"


def default_dead_letter_topic(topic: str, subscription: str) -> str:
    return f"{topic}-{subscription}-DLQ"


class DeadLetterSender:
    def __init__(self, client: ProducerFactory, topic: str, initial_subscription_name: str | None = None) -> None:
        self.client = client
        self.topic = topic
        self.initial_subscription_name = initial_subscription_name
        self._producer: Producer | None = None
        self._lock = asyncio.Lock()

    async def _get_producer(self) -> Producer:
        async with self._lock:
            if self._producer is None:
                self._producer = await self.client.create_producer(
                    self.topic, batching_enabled=False, block_if_queue_full=False,
                    initial_subscription_name=self.initial_subscription_name)
            return self._producer

    async def send(self, message: Message) -> MessageId:
        producer = await self._get_producer()
        properties = dict(message.properties)
        properties[PROPERTY_REAL_TOPIC] = message.topic
        properties[PROPERTY_ORIGIN_MESSAGE_ID] = str(message.message_id)
        return await producer.send(message.data(), key=message.key, properties=properties,
                                   event_time=message.event_time, ordering_key=message.ordering_key)

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()
