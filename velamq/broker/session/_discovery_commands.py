"""Discovery commands of one connection: where a topic lives and what it looks like.

PARTITIONED_METADATA, LOOKUP and GET_TOPICS_OF_NAMESPACE answer from the metadata store (a lookup
answers Connect with the URLs of the broker that serves the topic: this one, or the worker that owns
its bundle when several share the machine);
GET_SCHEMA and GET_OR_CREATE_SCHEMA from the schema registry. Each runs as a task of the
connection (_connection.py), which turns a BrokerRequestError raised here into the reply the
client expects; the schema requests answer errors in their own response type instead.
"""

from __future__ import annotations

from velamq._errors import InvalidTopicNameError
from velamq._topic_name import TopicName
from velamq.broker._channel import CLOSED_CHANNEL, Channel
from velamq.broker._errors import BrokerRequestError
from velamq.broker.session._context import DiscoveryBroker
from velamq.broker.topic._schemas import protocol_schema
from velamq.metadata import encode_version
from velamq.protocol import Frame, pb

T = pb.BaseCommand


class DiscoveryCommands:
    """The handlers of one connection's discovery and schema requests; they keep no state but the
    channel the replies go to (a closed one once the connection is gone)."""

    def __init__(self, channel: Channel, broker: DiscoveryBroker) -> None:
        self._channel = channel
        self._broker = broker

    def detach(self) -> None:
        """The connection is gone: let go of it (late replies go nowhere)."""
        self._channel = CLOSED_CHANNEL

    async def on_partitioned_metadata(self, frame: Frame) -> None:
        request = frame.command.partitionMetadata
        name = TopicName.parse(request.topic)
        await self._broker.check_namespace(name)
        reply = pb.BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
        reply.partitionMetadataResponse.request_id = request.request_id
        reply.partitionMetadataResponse.partitions = await self._broker.partitions_of(name)
        reply.partitionMetadataResponse.response = pb.CommandPartitionedTopicMetadataResponse.Success
        self._channel.send_command(reply)

    async def on_lookup(self, frame: Frame) -> None:
        request = frame.command.lookupTopic
        broker = self._broker
        if request.advertised_listener_name and request.advertised_listener_name not in broker.listeners:
            raise BrokerRequestError(
                pb.ServiceNotReady, f"the broker do not have {request.advertised_listener_name} listener"
            )
        name = TopicName.parse(request.topic)
        await broker.check_namespace(name)
        reply = pb.BaseCommand(type=T.LOOKUP_RESPONSE)
        r = reply.lookupTopicResponse
        r.request_id = request.request_id
        r.response = pb.CommandLookupTopicResponse.Connect
        # The owner's URLs (another worker's, or this broker's own), as any Pulsar broker answers
        # for a bundle someone owns: Connect, authoritative. Both URLs where both ports are open:
        # the client takes the one of its own scheme.
        owner = await broker.owner_of(name)
        url, url_tls = (broker.service_url_plain, broker.service_url_tls) if owner is None else owner
        if url:
            r.brokerServiceUrl = url
        if url_tls:
            r.brokerServiceUrlTls = url_tls
        r.authoritative = True
        r.proxy_through_service_url = False
        self._channel.send_command(reply)

    async def on_get_topics(self, frame: Frame) -> None:
        request = frame.command.getTopicsOfNamespace
        topics = await self._broker.topics_of_namespace(request.namespace, int(request.mode))
        reply = pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
        r = reply.getTopicsOfNamespaceResponse
        r.request_id = request.request_id
        r.topics.extend(topics)
        r.filtered = False
        r.changed = True
        self._channel.send_command(reply)

    async def on_get_schema(self, frame: Frame) -> None:
        request = frame.command.getSchema
        reply = pb.BaseCommand(type=T.GET_SCHEMA_RESPONSE)
        r = reply.getSchemaResponse
        r.request_id = request.request_id
        version = request.schema_version if request.HasField("schema_version") else None
        try:
            if version == b"":
                raise BrokerRequestError(pb.IncompatibleSchema, "Empty schema version")
            sid, stored = await self._broker.schemas.get(str(TopicName.parse(request.topic)), version)
            if stored is None:
                raise BrokerRequestError(pb.TopicNotFound, f"Topic not found or no-schema {request.topic}")
        except (BrokerRequestError, InvalidTopicNameError) as exc:
            # The schema requests answer errors in their own response type, not with ERROR.
            r.error_code, r.error_message = _error_fields(exc)  # type: ignore[assignment]
        else:
            r.schema.CopyFrom(protocol_schema(sid, stored))
            r.schema_version = encode_version(stored.version)
        self._channel.send_command(reply)

    async def on_get_or_create_schema(self, frame: Frame) -> None:
        request = frame.command.getOrCreateSchema
        reply = pb.BaseCommand(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
        r = reply.getOrCreateSchemaResponse
        r.request_id = request.request_id
        try:
            name = TopicName.parse(request.topic)
            await self._broker.open_topic(name, create=False)  # TopicNotFound unless it exists
            version = await self._broker.schemas.for_producer(name, request.schema)
        except (BrokerRequestError, InvalidTopicNameError) as exc:
            r.error_code, r.error_message = _error_fields(exc)  # type: ignore[assignment]
        else:
            r.schema_version = version or b""
        self._channel.send_command(reply)


def _error_fields(exc: BrokerRequestError | InvalidTopicNameError) -> tuple[int, str]:
    if isinstance(exc, BrokerRequestError):
        return exc.code, exc.message
    return pb.InvalidTopicName, str(exc)
