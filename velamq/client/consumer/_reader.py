"""Readers (CO-5): a non-durable, exclusive subscription that starts at a chosen message id.

The subscription is named "reader-<10 hex>" and carries start_message_id (earliest, latest or a
specific id; a chunked message's id starts at its first chunk). The broker delivers from the start
id inclusive; unless start_message_id_inclusive, the client drops the start message itself.
Readers never acknowledge: their position lives in the client, and a reconnect resumes after the
last message read.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator

from velamq.client._errors import AlreadyClosedError
from velamq.client._message import Message, MessageId
from velamq.client._message_batch import Messages
from velamq.client.consumer._consumer import Consumer


class Reader:
    """Reads a topic from a message id on, without a durable subscription (a non-durable Exclusive
    consumer under a generated name): read_next, has_message_available, seek. The broker keeps no
    position for it; after a reconnect it resumes after the last message the application took."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    @property
    def topic(self) -> str:
        return self._consumer.topic

    @property
    def subscription_name(self) -> str:
        return self._consumer.subscription

    async def read_next(self, timeout_ms: int | None = None) -> Message:
        return await self._consumer.receive(timeout_ms)

    async def read_batch(self, max_messages: int | None = None, timeout_ms: int | None = None, *,
                         max_bytes: int | None = None) -> Messages:
        """Messages in bulk, as Consumer.batch_receive (limits from the batch_receive_policy)."""
        return await self._consumer.batch_receive(max_messages, timeout_ms, max_bytes=max_bytes)

    async def has_message_available(self) -> bool:
        return await self._consumer.has_message_available()

    async def seek(self, target: MessageId | int | datetime.datetime) -> None:
        await self._consumer.seek(target)

    async def get_last_message_id(self) -> MessageId:
        return await self._consumer.get_last_message_id()

    def is_connected(self) -> bool:
        return self._consumer.is_connected()

    def is_end_of_topic(self) -> bool:
        """True once the topic is terminated and everything in it was read (Consumer.is_end_of_topic)."""
        return self._consumer.is_end_of_topic()

    async def close(self) -> None:
        await self._consumer.close()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.read_next()
        except AlreadyClosedError:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Reader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
