"""What the broker's commands do with a topic's schema, over the metadata store's registry.

    PRODUCER with a schema      register it, or find the live version equal to it, under the topic's
                                compatibility strategy and isAllowAutoUpdateSchema; the 8-byte version
                                goes back in PRODUCER_SUCCESS. The client stamps its messages with it;
                                the broker neither stamps nor checks message versions (as Pulsar).
    PRODUCER without a schema   accepted, unless the topic has one and schemaValidationEnforced is set
    SUBSCRIBE with a schema     checked as Pulsar's checkConsumerCompatibility; registered only on an
                                idle topic without schema. AUTO_CONSUME consumers are not checked.
    GET_SCHEMA                  one version, or the latest
    GET_OR_CREATE_SCHEMA        as PRODUCER, on a topic that exists

A None or BYTES schema counts as no schema (the official clients send none for bytes). Every
refusal is BrokerRequestError(IncompatibleSchema), which the official client raises as
pulsar.IncompatibleSchema. The policies are read per request: a changed strategy applies to the
next producer or consumer, as in Pulsar.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final, Protocol

from velamq._topic_name import TopicName
from velamq.broker._errors import BrokerRequestError
from velamq.metadata import (
    InvalidSchemaDataError,
    SchemaCompatibilityError,
    SchemaData,
    SchemaRegistry,
    SchemaType,
    StoredSchema,
    Strategy,
    allow_auto_update,
    decode_version,
    effective_strategy,
    encode_version,
    schema_id,
    validation_enforced,
)
from velamq.protocol import pb


class _SchemaConsumer(Protocol):
    @property
    def auto_consume(self) -> bool: ...


class _SchemaSubscription(Protocol):
    @property
    def consumers(self) -> Collection[_SchemaConsumer]: ...


class SchemaTopic(Protocol):
    """What the schema checks read of a topic (Topic is one): its names, and whether it is in use."""

    @property
    def name(self) -> TopicName: ...

    @property
    def full_name(self) -> str: ...

    @property
    def producers(self) -> Mapping[str, object]: ...

    @property
    def has_entries(self) -> bool:
        """Entries were stored (or, on a non-persistent topic, went through it)."""
        ...

    @property
    def subscriptions(self) -> Mapping[str, _SchemaSubscription]: ...

# (namespace policies, topic policies) of a topic, as the metadata store keeps them.
PolicyReader = Callable[[TopicName], Awaitable[tuple[Mapping[str, Any], Mapping[str, Any]]]]

_NO_SCHEMA: Final = (SchemaType.NONE, SchemaType.BYTES)


def schema_data(schema: pb.Schema | None) -> SchemaData | None:
    """The registry's view of a wire schema; None for no schema, None or BYTES.
    InvalidSchemaDataError for a type number velamq does not know."""
    if schema is None:
        return None
    kind = SchemaType.from_protocol(int(schema.type))
    if kind in _NO_SCHEMA:
        return None
    return SchemaData(kind, bytes(schema.schema_data), {kv.key: kv.value for kv in schema.properties})


def protocol_schema(sid: str, stored: StoredSchema) -> pb.Schema:
    """A stored version as GET_SCHEMA answers it: named by its schema id, as Pulsar does."""
    schema = stored.schema
    out = pb.Schema(name=sid, schema_data=schema.data, type=pb.Schema.Type.ValueType(schema.type.protocol_number))
    for key, value in sorted(schema.properties.items()):
        out.properties.add(key=key, value=value)
    return out


@contextmanager
def _refusals() -> Iterator[None]:
    """Registry errors become the ServerError the client expects."""
    try:
        yield
    except (SchemaCompatibilityError, InvalidSchemaDataError) as exc:
        raise BrokerRequestError(pb.IncompatibleSchema, str(exc)) from None


def topic_active(topic: SchemaTopic) -> bool:
    """Pulsar's test before it lets a consumer's schema become the topic's: producers, consumers
    other than AUTO_CONSUME ones, or entries (stored, or passed through a non-persistent topic)."""
    if topic.producers or topic.has_entries:
        return True
    return any(not c.auto_consume for s in topic.subscriptions.values() for c in s.consumers)


class BrokerSchemas:
    """The broker's side of the schema registry: wire schemas in, versions and refusals out."""

    def __init__(self, registry: SchemaRegistry, policies: PolicyReader) -> None:
        self.registry = registry
        self._policies = policies

    async def _settings(self, name: TopicName) -> tuple[Strategy, bool, bool]:
        namespace, topic = await self._policies(name)
        return (effective_strategy(namespace, topic), allow_auto_update(namespace),
                validation_enforced(namespace, topic))

    async def for_producer(self, name: TopicName, schema: pb.Schema | None) -> bytes | None:
        """The version for PRODUCER_SUCCESS (None: the producer has no schema, nothing to send)."""
        with _refusals():
            data = schema_data(schema)
            if data is None:
                # Only the enforcement matters to a producer without a schema (most of them: the
                # strategy is not worked out for each).
                namespace, topic = await self._policies(name)
                if validation_enforced(namespace, topic) and await self.registry.get(str(name)) is not None:
                    raise SchemaCompatibilityError(
                        "Producers cannot connect or send message without a schema to topics with a schema"
                    )
                return None
            strategy, auto_update, _ = await self._settings(name)
            version, _ = await self.registry.register(str(name), data, strategy, auto_update)
        return encode_version(version)

    async def for_consumer(self, topic: SchemaTopic, schema: pb.Schema | None) -> None:
        """Check a subscribing consumer's schema (nothing to do without one or for AUTO_CONSUME)."""
        if schema is None or int(schema.type) == SchemaType.AUTO_CONSUME.protocol_number:
            return
        with _refusals():
            data = schema_data(schema)
            if data is None:
                return
            strategy, auto_update, _ = await self._settings(topic.name)
            await self.registry.register_for_consumer(topic.full_name, data, strategy, topic_active(topic), auto_update)

    async def get(self, topic: str, version: bytes | None) -> tuple[str, StoredSchema | None]:
        """(schema id, the version asked for or the latest live one, None if there is none)."""
        with _refusals():
            number = None if version is None else decode_version(version)
        sid = schema_id(topic)
        return sid, await self.registry.get(topic, number)
