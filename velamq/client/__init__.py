"""velamq's own Pulsar client: asyncio first, with a blocking facade of the same shape.

    from velamq.client import AsyncClient, Client
    async with AsyncClient("pulsar://localhost:6650") as client:
        producer = await client.create_producer("t", batching_enabled=True, compression_type="lz4")
        msg_id = await producer.send(b"x", key="k", properties={"a": "b"})
        consumer = await client.subscribe("t", "sub", subscription_type="shared", initial_position="earliest")
        msg = await consumer.receive(); await consumer.acknowledge(msg)
        ordered = OrderedConsumer(client, "t", "sub", handler, partition_parallelism=8)  # order per key
        await ordered.start()
    with Client("pulsar://localhost:6650") as client:
        client.create_producer("t").send(b"x")
    AdminClient("http://localhost:8080").request("GET", "/admin/v2/tenants")   # the admin REST API
    producer = await client.create_producer("users", schema=AvroSchema(User))   # User: a Record
    consumer = await client.subscribe("users", "sub", schema=AvroSchema(User))  # msg.value: a User

    Client("pulsar+ssl://host:6651", authentication=AuthenticationToken(token),
           tls_trust_certs_file_path="ca.pem")                  # TLS and token authentication
    AsyncClient(AutoClusterFailover(ServiceInfo("pulsar://east:6650"), [ServiceInfo("pulsar://west:6650")],
                                    check_interval_ms=1000))   # failover between clusters

It speaks the Pulsar binary protocol through velamq.protocol and never imports the broker.
"""

from velamq.client._admin_client import AdminClient, AdminReply
from velamq.client._client import AsyncClient
from velamq.client._config import (
    BatchReceivePolicy,
    ClientConfig,
    ConsumerConfig,
    DeadLetterPolicy,
    KeySharedPolicy,
    ProducerConfig,
)
from velamq.client._errors import (
    AdminError,
    AlreadyClosedError,
    AuthenticationError,
    AuthorizationError,
    BrokerError,
    ChecksumError,
    ConnectAuthenticationError,
    ConnectError,
    ConsumerAssignError,
    ConsumerBusyError,
    ConsumerNotFoundError,
    CredentialsError,
    IncompatibleSchemaError,
    InvalidConfigurationError,
    InvalidTopicError,
    MemoryBufferIsFullError,
    MessageTooBigError,
    NotAllowedError,
    OperationTimeoutError,
    ProducerBlockedQuotaExceededError,
    ProducerBusyError,
    ProducerFencedError,
    ProducerQueueIsFullError,
    SendTimeoutError,
    ServiceNotReadyError,
    SubscriptionNotFoundError,
    TlsHandshakeError,
    TooManyRequestsError,
    TopicNotFoundError,
    TopicTerminatedError,
    error_from_server,
)
from velamq.client._message import Message, MessageId, ProducerMessage, ReceivedBatch
from velamq.client._message_batch import Messages
from velamq.client.blocking._client import BlockingProducer, Client
from velamq.client.blocking._consumer import BlockingConsumer, BlockingReader
from velamq.client.blocking._ordered import BlockingOrderedConsumer
from velamq.client.consumer._consumer import Consumer
from velamq.client.consumer._reader import Reader
from velamq.client.ordered._consumer import OrderedConsumer
from velamq.client.ordered._metrics import OrderedConsumerMetrics, OrderedPartitionMetrics
from velamq.client.producer._boost_hash import boost_hash, java_string_hash, murmur3_32_hash
from velamq.client.producer._entry_producer import EntryListener, EntryProducer
from velamq.client.producer._interceptors import ProducerInterceptor
from velamq.client.producer._producer import Producer
from velamq.client.producer._routing import MessageRouter, sign_safe_mod
from velamq.client.schema._record import Record
from velamq.client.schema._schemas import AvroSchema, BytesSchema, JsonSchema, Schema, StringSchema
from velamq.client.security._auth import Authentication, AuthenticationBasic, AuthenticationTLS, AuthenticationToken
from velamq.client.security._settings import ConnectionSecurity
from velamq.client.transport._controlled_failover import ControlledClusterFailover
from velamq.client.transport._failover import AutoClusterFailover, ServiceInfo, ServiceInfoProvider
from velamq.client.transport._lookup import DiscoveryStats

__all__ = [
    "AdminClient",
    "AdminError",
    "AdminReply",
    "AlreadyClosedError",
    "AsyncClient",
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationError",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AuthorizationError",
    "AutoClusterFailover",
    "AvroSchema",
    "BatchReceivePolicy",
    "BlockingConsumer",
    "BlockingOrderedConsumer",
    "BlockingProducer",
    "BlockingReader",
    "BrokerError",
    "BytesSchema",
    "ChecksumError",
    "Client",
    "ClientConfig",
    "ConnectAuthenticationError",
    "ConnectError",
    "ConnectionSecurity",
    "Consumer",
    "ConsumerAssignError",
    "ConsumerBusyError",
    "ConsumerConfig",
    "ConsumerNotFoundError",
    "ControlledClusterFailover",
    "CredentialsError",
    "DeadLetterPolicy",
    "DiscoveryStats",
    "EntryListener",
    "EntryProducer",
    "IncompatibleSchemaError",
    "InvalidConfigurationError",
    "InvalidTopicError",
    "JsonSchema",
    "KeySharedPolicy",
    "MemoryBufferIsFullError",
    "Message",
    "MessageId",
    "MessageRouter",
    "MessageTooBigError",
    "Messages",
    "NotAllowedError",
    "OperationTimeoutError",
    "OrderedConsumer",
    "OrderedConsumerMetrics",
    "OrderedPartitionMetrics",
    "Producer",
    "ProducerBlockedQuotaExceededError",
    "ProducerBusyError",
    "ProducerConfig",
    "ProducerFencedError",
    "ProducerInterceptor",
    "ProducerMessage",
    "ProducerQueueIsFullError",
    "Reader",
    "ReceivedBatch",
    "Record",
    "Schema",
    "SendTimeoutError",
    "ServiceInfo",
    "ServiceInfoProvider",
    "ServiceNotReadyError",
    "StringSchema",
    "SubscriptionNotFoundError",
    "TlsHandshakeError",
    "TooManyRequestsError",
    "TopicNotFoundError",
    "TopicTerminatedError",
    "boost_hash",
    "error_from_server",
    "java_string_hash",
    "murmur3_32_hash",
    "sign_safe_mod",
]
