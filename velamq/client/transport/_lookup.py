"""Binary-protocol discovery: partitioned metadata, topic lookup with redirects, namespace topics.

    PARTITIONED_METADATA  -> partitions (0: not a partitioned topic)
    LOOKUP                -> Connect: use brokerServiceUrl, or brokerServiceUrlTls when the service
                                      URL is pulsar+ssl:// (through the service URL when
                                      proxy_through_service_url); Redirect: ask that broker again,
                                      with its authoritative flag, at most max_lookup_redirects times
    GET_TOPICS_OF_NAMESPACE -> the namespace's topics (pattern subscriptions filter them here)
    GET_SCHEMA            -> one version of a topic's schema, or its latest (any broker answers)

DiscoveryStats counts the PARTITIONED_METADATA and LOOKUP requests sent (a redirect followed is one
more LOOKUP); the client keeps one for its lifetime, across cluster switches, and adds what its
live handles answered without a request (_live_topics.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from velamq.client._config import ClientConfig
from velamq.client._errors import ConnectError
from velamq.client.transport._connection import Connection
from velamq.client.transport._pool import ConnectionPool, uses_tls
from velamq.protocol import pb

T = pb.BaseCommand
_MODES = {"persistent_only": pb.CommandGetTopicsOfNamespace.PERSISTENT,
          "non_persistent_only": pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
          "all_topics": pb.CommandGetTopicsOfNamespace.ALL}


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    logical_url: str
    physical_url: str


@dataclass(slots=True)
class DiscoveryStats:
    """How often a client asked where topics live, and how often it knew without asking.

    partitioned_metadata  PARTITIONED_METADATA requests sent (over HTTP: partitions GETs)
    lookups               LOOKUP requests sent, each redirect followed included (over HTTP: lookup GETs)
    partitions_remembered partition counts answered by a live handle of the topic, without a request
    lookups_remembered    connections to a topic's owner taken from a live handle, without a LOOKUP
    """

    partitioned_metadata: int = 0
    lookups: int = 0
    partitions_remembered: int = 0
    lookups_remembered: int = 0


class LookupService:
    def __init__(self, pool: ConnectionPool, service_url: str, config: ClientConfig,
                 request_ids: itertools.count[int], stats: DiscoveryStats | None = None) -> None:
        self.pool = pool
        self.service_url = service_url
        self.config = config
        self._request_ids = request_ids
        self._tls = uses_tls(service_url)
        self.stats = stats if stats is not None else DiscoveryStats()

    def new_request_id(self) -> int:
        return next(self._request_ids)

    async def partitions(self, topic: str) -> int:
        connection = await self.pool.get(self.service_url)
        request_id = self.new_request_id()
        self.stats.partitioned_metadata += 1
        command = pb.BaseCommand(type=T.PARTITIONED_METADATA)
        command.partitionMetadata.topic = topic
        command.partitionMetadata.request_id = request_id
        reply = await connection.request(command, request_id)
        return int(reply.partitionMetadataResponse.partitions)

    async def lookup(self, topic: str) -> BrokerAddress:
        url = self.service_url
        authoritative = False
        for _ in range(self.config.max_lookup_redirects + 1):
            connection = await self.pool.get(url)
            request_id = self.new_request_id()
            self.stats.lookups += 1
            command = pb.BaseCommand(type=T.LOOKUP)
            command.lookupTopic.topic = topic
            command.lookupTopic.request_id = request_id
            command.lookupTopic.authoritative = authoritative
            reply = (await connection.request(command, request_id)).lookupTopicResponse
            target = self._target(topic, reply) or url
            if reply.response == pb.CommandLookupTopicResponse.Redirect:
                url = target
                authoritative = reply.authoritative
                continue
            if reply.proxy_through_service_url:
                return BrokerAddress(target, self.service_url)
            return BrokerAddress(target, target)
        raise ConnectError(f"lookup of {topic} redirected more than {self.config.max_lookup_redirects} times")

    def _target(self, topic: str, reply: pb.CommandLookupTopicResponse) -> str:
        return broker_url_for(topic, self._tls, reply.brokerServiceUrl, reply.brokerServiceUrlTls)

    async def get_schema(self, topic: str, version: bytes | None = None) -> pb.CommandGetSchemaResponse:
        """A version of the topic's schema (None: the latest). The broker's refusal (TopicNotFound
        when there is no such schema) is raised as the connection raises any server error."""
        connection = await self._schema_connection(topic)
        request_id = self.new_request_id()
        command = pb.BaseCommand(type=T.GET_SCHEMA)
        command.getSchema.request_id = request_id
        command.getSchema.topic = topic
        if version is not None:
            command.getSchema.schema_version = version
        reply = await connection.request(command, request_id)
        return reply.getSchemaResponse

    async def _schema_connection(self, topic: str) -> Connection:
        return await self.pool.get(self.service_url)  # any broker answers GET_SCHEMA

    async def topics_of_namespace(self, namespace: str, mode: str = "persistent_only") -> list[str]:
        connection = await self.pool.get(self.service_url)
        request_id = self.new_request_id()
        command = pb.BaseCommand(type=T.GET_TOPICS_OF_NAMESPACE)
        command.getTopicsOfNamespace.request_id = request_id
        command.getTopicsOfNamespace.namespace = namespace
        command.getTopicsOfNamespace.mode = _MODES[mode]
        reply = await connection.request(command, request_id)
        return list(reply.getTopicsOfNamespaceResponse.topics)


def broker_url_for(topic: str, tls: bool, url: str, url_tls: str) -> str:
    """A TLS client stays on TLS: the broker's TLS URL, never a plain one (no silent downgrade)."""
    if not tls:
        return url
    if url_tls:
        return url_tls
    if not url or uses_tls(url):
        return url
    raise ConnectError(f"lookup of {topic}: the broker has no TLS address (only {url})")
