"""AsyncClient: the entry point. Owns the connection pool, lookups, the client-wide memory limit
and every producer, consumer and reader it made; closing it closes them all.

    async with AsyncClient("pulsar://localhost:6650") as client:
        producer = await client.create_producer("t", batching_enabled=True, compression_type="lz4")
        consumer = await client.subscribe("t", "sub", subscription_type="shared")
        reader = await client.create_reader("t", start_message_id="earliest")

Options are given as keyword arguments with Pulsar's names in snake_case, or as a ProducerConfig /
ConsumerConfig (keywords then override its fields).

A secured broker, with the official client's option names:

    AsyncClient("pulsar+ssl://broker:6651", authentication=AuthenticationToken(token_or_supplier),
                tls_trust_certs_file_path="ca.pem", tls_validate_hostname=True)
    AsyncClient("pulsar+ssl://broker:6651", authentication=AuthenticationTLS("me.pem", "me-key.pem"),
                tls_trust_certs_file_path="ca.pem")          # mutual TLS: the role is the CN
    AsyncClient("https://broker:8443", authentication=..., tls_trust_certs_file_path="ca.pem")
                                                             # lookups over HTTP (_http_lookup.py)
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import re
import secrets
from collections.abc import Sequence
from typing import Any

from velamq._clock import Clock, system_clock
from velamq._topic_name import TopicName, TopicPattern
from velamq.client._config import ClientConfig, ConsumerConfig, ProducerConfig
from velamq.client._errors import AlreadyClosedError, InvalidConfigurationError, OperationTimeoutError, is_retriable
from velamq.client._message import MessageId
from velamq.client.consumer._consumer import Consumer
from velamq.client.consumer._reader import Reader
from velamq.client.producer._backpressure import MemoryLimit
from velamq.client.producer._entry_producer import EntryListener, EntryProducer
from velamq.client.producer._producer import Producer
from velamq.client.transport._failover import ServiceInfo, ServiceInfoProvider, check_failover_config, config_for
from velamq.client.transport._http_lookup import HttpLookupService, is_http_url
from velamq.client.transport._live_topics import LiveTopics
from velamq.client.transport._lookup import DiscoveryStats, LookupService
from velamq.client.transport._pool import ConnectionPool, uses_tls

log = logging.getLogger("velamq.client")


def _start_id(value: MessageId | str | bytes) -> MessageId:
    if isinstance(value, MessageId):
        return value
    if isinstance(value, bytes):
        return MessageId.deserialize(value)
    if value == "earliest":
        return MessageId.earliest
    if value == "latest":
        return MessageId.latest
    raise InvalidConfigurationError(f"start_message_id must be a MessageId, 'earliest' or 'latest', not {value!r}")


class AsyncClient:
    """The asyncio client of one service URL (pulsar[+ssl]://host:port, several hosts, or an
    http[s]:// admin URL for lookups over HTTP): the entry point.

    It owns the connection pool (one connection per broker, shared by every producer and consumer),
    topic lookups, the client-wide memory limit of pending messages, and every producer, consumer
    and reader it created; closing it closes them all. Options follow Pulsar's client names in
    snake_case (operation_timeout_s, memory_limit_bytes, ...) or come as a ClientConfig.
    """

    def __init__(self, service_url: str | ServiceInfoProvider, config: ClientConfig | None = None, *,
                 clock: Clock = system_clock, **options: Any) -> None:
        config = config or ClientConfig()
        if options:
            config = _replace(config, options)
        self._provider: ServiceInfoProvider | None = None
        if not isinstance(service_url, str):  # failover between clusters (_failover.py)
            check_failover_config(config)
            try:
                asyncio.get_running_loop()  # the provider's checks run on the client's loop
            except RuntimeError:
                raise InvalidConfigurationError("a client with a service-info provider is made on a running "
                                                "event loop (inside async code, or use the blocking Client)") from None
            self._provider = service_url
            self._service_info = service_url.initial_service_info()
            self._base_config = config
            config = config_for(config, self._service_info)
        else:
            self._service_info = ServiceInfo(service_url, config.authentication, config.tls_trust_certs_file_path)
        self.service_url = self._service_info.service_url
        self.config = config
        self.clock = clock
        self.pool = ConnectionPool(config)
        self._check_tls_files()
        self.request_ids: itertools.count[int] = itertools.count()
        self._producer_ids: itertools.count[int] = itertools.count()
        self._consumer_ids: itertools.count[int] = itertools.count()
        self._discovery = DiscoveryStats()
        self.live_topics = LiveTopics(self._discovery)
        self.lookup: LookupService = self._lookup_service()
        self.memory = MemoryLimit(config.memory_limit_bytes)
        self._producers: set[Producer] = set()
        self._consumers: set[Consumer] = set()
        self._closed = False
        if self._provider is not None:
            self._provider.initialize(self._switch_cluster)

    def _check_tls_files(self) -> None:
        url = self.service_url
        if uses_tls(url) or url.startswith("https://"):
            self.pool.ssl_context()  # unreadable TLS files fail here, not at the first connection

    def _lookup_service(self) -> LookupService:
        """Lookups through the service URL: the binary protocol, or the admin REST API for an
        http(s):// URL (as the official clients do)."""
        lookup = HttpLookupService if is_http_url(self.service_url) else LookupService
        return lookup(self.pool, self.service_url, self.config, self.request_ids, self._discovery)

    def discovery_stats(self) -> DiscoveryStats:
        """How often this client asked where its topics live (PARTITIONED_METADATA, LOOKUP), and how
        often a live producer or consumer of the topic answered instead: a copy, counted since the
        client was made."""
        return dataclasses.replace(self._discovery)

    def get_service_info(self) -> ServiceInfo:
        """The cluster this client uses now (the official client's get_service_info)."""
        return self._service_info

    def _switch_cluster(self, info: ServiceInfo) -> None:
        """The provider moved the client to another cluster: every connection closes, lookups go
        there, and each producer and consumer reconnects there on its usual path."""
        if self._closed or info == self._service_info:
            return
        log.warning("client switching from %s to %s", self.service_url, info.service_url)
        self._service_info = info
        self.service_url = info.service_url
        self.config = config_for(self._base_config, info)
        self.pool.switch_cluster(self.config)
        self.lookup = self._lookup_service()
        for producer in list(self._producers):
            for partition in producer.partition_producers:
                partition.cluster_switched()
        for consumer in list(self._consumers):
            for child in consumer.children:
                child.cluster_switched()

    @property
    def is_closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosedError("client is closed")

    async def _retrying(self, what: str, operation: Any) -> Any:
        deadline = self.clock.monotonic_s() + self.config.operation_timeout_s
        delay = self.config.initial_backoff_s
        while True:
            try:
                return await operation()
            except Exception as exc:
                if not is_retriable(exc) or self._closed:
                    raise
                if self.clock.monotonic_s() + delay > deadline:
                    raise OperationTimeoutError(f"{what}: {exc}") from exc
                await asyncio.sleep(delay)
                delay = min(self.config.max_backoff_s, delay * 2)

    async def partitions_of(self, topic: str) -> int:
        """0 for a non-partitioned topic, else its partition count (PARTITIONED_METADATA). A topic
        this client has a connected producer or consumer on is not partitioned: no request then."""
        self._check_open()
        name = str(TopicName.parse(topic))
        if self.live_topics.known_unpartitioned(name):
            return 0
        result: int = await self._retrying(f"partitions of {name}", lambda: self.lookup.partitions(name))
        return result

    async def get_topic_partitions(self, topic: str) -> list[str]:
        name = TopicName.parse(topic)
        n = await self.partitions_of(topic)
        return [str(name.partition(i)) for i in range(n)] if n else [str(name)]

    # ---- producers -----------------------------------------------------------------------------

    async def create_producer(self, topic: str, config: ProducerConfig | None = None, **options: Any) -> Producer:
        self._check_open()
        config = config or ProducerConfig()
        if options:
            config = config.with_options(**options)
        if config.memory_limit_bytes and self.config.memory_limit_bytes and \
                config.memory_limit_bytes > self.config.memory_limit_bytes:
            log.warning("producer tuned for a %d-byte memory limit, the client has %d",
                        config.memory_limit_bytes, self.config.memory_limit_bytes)
        name = str(TopicName.parse(topic))
        partitions = await self.partitions_of(name)
        producer = Producer(self, name, partitions, config, self._producer_ids)
        self._producers.add(producer)
        try:
            await producer.start()
        except BaseException:
            self._producers.discard(producer)
            raise
        return producer

    def create_entry_producer(self, topic: str, producer_name: str, listener: EntryListener) -> EntryProducer:
        """A producer of entries already built (a geo-replicator's, see EntryProducer), connecting
        in the background: `listener` hears when it is ready, of each receipt and of each loss."""
        self._check_open()
        producer = EntryProducer(self, str(TopicName.parse(topic)), producer_name, next(self._producer_ids), listener)
        producer.connect()
        return producer

    # ---- consumers and readers -----------------------------------------------------------------

    async def subscribe(self, topic: str | Sequence[str] | re.Pattern[str] | None = None,
                        subscription_name: str | None = None, config: ConsumerConfig | None = None, *,
                        topics: Sequence[str] | None = None, topics_pattern: str | re.Pattern[str] | None = None,
                        **options: Any) -> Consumer:
        self._check_open()
        if subscription_name is None:
            raise InvalidConfigurationError("subscribe needs a subscription name")
        config = config or ConsumerConfig()
        if options:
            config = config.with_options(**options)
        pattern: re.Pattern[str] | None = None
        names: list[str] = []
        if isinstance(topic, re.Pattern):
            pattern = topic
        elif isinstance(topic, str):
            names = [topic]
        elif topic is not None:
            names = list(topic)
        if topics:
            names.extend(topics)
        if topics_pattern is not None:
            pattern = re.compile(topics_pattern) if isinstance(topics_pattern, str) else topics_pattern
        if pattern is not None and names:
            raise InvalidConfigurationError("give topics or a topics pattern, not both")
        namespace = None
        if pattern is not None:
            namespace = TopicPattern.parse(pattern.pattern).namespace
        elif not names:
            raise InvalidConfigurationError("subscribe needs a topic, topics or topics_pattern")
        full = [str(TopicName.parse(n)) for n in names]
        if config.dead_letter_policy is not None and config.subscription_type not in ("shared", "key_shared"):
            log.info("dead_letter_policy on a %s subscription: ids are redelivered all at once",
                     config.subscription_type)
        consumer = Consumer(self, full, subscription_name, config, self._consumer_ids, pattern=pattern,
                            pattern_namespace=namespace)
        return await self._start_consumer(consumer)

    async def _start_consumer(self, consumer: Consumer) -> Consumer:
        self._consumers.add(consumer)
        try:
            await consumer.start()
        except BaseException:
            self._consumers.discard(consumer)
            raise
        return consumer

    async def create_reader(self, topic: str, start_message_id: MessageId | str | bytes = "latest",
                            config: ConsumerConfig | None = None, *, reader_name: str | None = None,
                            subscription_role_prefix: str = "reader", **options: Any) -> Reader:
        self._check_open()
        config = config or ConsumerConfig()
        options.setdefault("subscription_type", "exclusive")
        if reader_name is not None:
            options.setdefault("consumer_name", reader_name)
        config = config.with_options(**options)
        start = _start_id(start_message_id)
        subscription = f"{subscription_role_prefix}-{secrets.token_hex(5)}"
        consumer = Consumer(self, [str(TopicName.parse(topic))], subscription, config, self._consumer_ids,
                            durable=False, start_message_id=start)
        await self._start_consumer(consumer)
        return Reader(consumer)

    # ---- lifecycle -----------------------------------------------------------------------------

    def forget(self, child: object) -> None:
        """A producer, consumer or reader of this client closed (ClientOwner's hook)."""
        if isinstance(child, Producer):
            self._producers.discard(child)
        elif isinstance(child, Consumer):
            self._consumers.discard(child)

    async def close(self) -> None:
        if self._closed:
            return
        closing = [p.close() for p in list(self._producers)] + [c.close() for c in list(self._consumers)]
        await asyncio.gather(*closing, return_exceptions=True)
        self._closed = True
        if self._provider is not None:
            await self._provider.close()
        self.pool.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _replace(config: ClientConfig, options: dict[str, Any]) -> ClientConfig:
    names = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise InvalidConfigurationError(f"unknown client option(s) {unknown}")
    return dataclasses.replace(config, **options)

