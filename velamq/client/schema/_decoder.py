"""Received messages decoded with the consumer's schema, each read with the schema it was written with.

A producer stamps its messages with its schema's version (MessageMetadata.schema_version, 8 bytes).
An Avro value can only be read with the writer's definition, so for an AvroSchema the decoder asks
the broker for that version (GET_SCHEMA) once per topic and version, keeps the definition, and reads
the value by Avro schema resolution into the consumer's record (AvroSchema.decode). JSON and string
values are self-describing: they are decoded without asking. As the official Python client does, a
version the broker cannot give (deleted, or of another type) is logged and the value read with the
consumer's own schema.

A partition's messages are read with its partitioned topic's history (one history for all of them).
The cache is bounded (writer_definitions_max entries, oldest dropped first).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final

from velamq._errors import ClientError
from velamq._topic_name import TopicName
from velamq.client._errors import BrokerError
from velamq.client._message import Message
from velamq.client.schema._schemas import AvroSchema, BytesSchema, Schema
from velamq.protocol import pb

log = logging.getLogger("velamq.client")

# Writer definitions one consumer keeps ((topic, version) pairs; a topic rarely has many versions).
writer_definitions_max: Final = 256

Fetch = Callable[[str, bytes], Awaitable[pb.CommandGetSchemaResponse]]


def needs_decoding(schema: Schema[Any] | None) -> bool:
    return schema is not None and not isinstance(schema, BytesSchema)


class SchemaDecoder:
    """Decodes a consumer's messages: Message.value becomes the decoded value, Message.data() stays
    the payload. `fetch` is the client's GET_SCHEMA (LookupService.get_schema)."""

    def __init__(self, schema: Schema[Any], fetch: Fetch) -> None:
        self.schema = schema
        self._fetch = fetch
        self._writers: OrderedDict[tuple[str, bytes], bytes | None] = OrderedDict()
        self._fetching: dict[tuple[str, bytes], asyncio.Task[bytes | None]] = {}

    @staticmethod
    def _key(message: Message) -> tuple[str, bytes] | None:
        if message.schema_version is None:
            return None
        topic = message.topic or ""
        try:
            topic = str(TopicName.parse(topic).partitioned_parent)
        except ValueError:
            pass  # an odd topic name is asked about as it is
        return topic, message.schema_version

    def _needs_writer(self, message: Message) -> tuple[str, bytes] | None:
        """The (topic, version) whose definition decoding needs and the cache lacks, or None."""
        if not isinstance(self.schema, AvroSchema):
            return None
        key = self._key(message)
        if key is None or key in self._writers:
            return None
        return key

    def ready(self, message: Message) -> bool:
        """Can `message` be decoded now, without asking the broker?"""
        return self._needs_writer(message) is None

    def prefetch(self, message: Message) -> None:
        """Start fetching the writer's definition of `message` (for a later decode_now)."""
        key = self._needs_writer(message)
        if key is not None and key not in self._fetching:
            task = asyncio.get_running_loop().create_task(self._writer(key))
            self._fetching[key] = task
            task.add_done_callback(lambda _: self._fetching.pop(key, None))

    async def decode(self, message: Message) -> Message:
        """Fetch the writer's definition if needed, then decode. Cancelling the wait leaves the
        fetch running (shielded), so the next attempt finds it done."""
        self.prefetch(message)
        key = self._key(message)
        task = self._fetching.get(key) if key is not None else None
        if task is not None:
            await asyncio.shield(task)
        return self.decode_now(message)

    def decode_now(self, message: Message) -> Message:
        """Decode with what is cached (ready() must be true for an exact reading)."""
        payload = message.data()
        writer = None
        if isinstance(self.schema, AvroSchema):
            key = self._key(message)
            writer = self._writers.get(key) if key is not None else None
        try:
            value = self.schema.decode(payload, writer)
        except Exception as exc:
            if writer is None:
                raise
            log.warning("%s: cannot read message %s with its writer's schema (%s); reading it with ours",
                        message.topic, message.message_id, exc)
            value = self.schema.decode(payload, None)
        return message.with_value(value)

    async def _writer(self, key: tuple[str, bytes]) -> bytes | None:
        """The writer's Avro definition of (topic, version), None if the broker has none to give."""
        if key in self._writers:
            return self._writers[key]
        topic, version = key
        definition: bytes | None = None
        try:
            reply = await self._fetch(topic, version)
            if reply.schema.type == pb.Schema.Avro:
                definition = bytes(reply.schema.schema_data)
            else:
                log.warning("%s: schema version %s is %s, not AVRO; reading with ours", topic, version.hex(),
                            pb.Schema.Type.Name(reply.schema.type))
        except BrokerError as exc:
            log.warning("%s: no schema version %s (%s); reading with ours", topic, version.hex(), exc)
        except (ClientError, OSError) as exc:
            # Not the broker's answer (a lost connection, a timeout): ask again for the next message.
            log.warning("%s: could not get schema version %s (%s); reading with ours", topic, version.hex(), exc)
            return None
        self._writers[key] = definition
        if len(self._writers) > writer_definitions_max:
            self._writers.popitem(last=False)
        return definition
