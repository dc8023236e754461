"""The public surface of velamq.client is pinned: other tools (Spark connector, ordered consumer,
velamq tune, benchmarks) build on these names."""

from __future__ import annotations

import velamq.client as client
from velamq._errors import ClientError, ServerError
from velamq.protocol import pb


def test_all_is_pinned() -> None:
    assert sorted(client.__all__) == sorted([
        "AlreadyClosedError", "AsyncClient", "AuthenticationError", "AuthorizationError", "BlockingConsumer",
        "BlockingOrderedConsumer", "BlockingProducer", "BlockingReader", "BrokerError", "ChecksumError", "Client",
        "ClientConfig",
        "ConnectError", "Consumer", "ConsumerAssignError", "ConsumerBusyError", "ConsumerConfig",
        "ConsumerNotFoundError", "DeadLetterPolicy", "IncompatibleSchemaError", "InvalidConfigurationError",
        "InvalidTopicError", "KeySharedPolicy", "MemoryBufferIsFullError", "Message", "MessageId", "MessageRouter",
        "MessageTooBigError", "NotAllowedError", "OperationTimeoutError", "OrderedConsumer", "OrderedConsumerMetrics",
        "OrderedPartitionMetrics", "Producer",
        "ProducerBlockedQuotaExceededError", "ProducerBusyError", "ProducerConfig", "ProducerFencedError",
        "ProducerInterceptor", "ProducerMessage", "ProducerQueueIsFullError", "Reader", "SendTimeoutError",
        "ServiceNotReadyError", "SubscriptionNotFoundError", "TooManyRequestsError", "TopicNotFoundError",
        "TopicTerminatedError", "boost_hash", "error_from_server", "java_string_hash", "murmur3_32_hash",
        "sign_safe_mod",
    ])
    for name in client.__all__:
        assert hasattr(client, name), name


def test_errors_form_one_tree_mapped_from_server_codes() -> None:
    assert issubclass(client.ProducerQueueIsFullError, ClientError)
    assert issubclass(client.MemoryBufferIsFullError, ClientError)
    assert not issubclass(client.ProducerQueueIsFullError, client.MemoryBufferIsFullError)
    assert issubclass(client.SendTimeoutError, TimeoutError)
    err = client.error_from_server(pb.TopicNotFound, "no such topic")
    assert isinstance(err, client.TopicNotFoundError) and isinstance(err, ServerError) and err.code == pb.TopicNotFound
    assert isinstance(client.error_from_server(pb.ProducerFenced, "x"), client.ProducerFencedError)
    assert isinstance(client.error_from_server(pb.ServiceNotReady, "x"), client.ServiceNotReadyError)
    assert type(client.error_from_server(pb.MetadataError, "x")) is client.BrokerError
    assert client.error_from_server(pb.MetadataError, "x").retriable
    assert not client.error_from_server(pb.TopicNotFound, "x").retriable
