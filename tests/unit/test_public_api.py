"""The public API of every package is pinned: changing it is a decision, not an accident.

Each package's `__all__` is written out here; a name added, removed or renamed fails this test
until the list below is changed with it. Every name in `__all__` must exist, and every package
under velamq must be listed (a new package is a new public surface).
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import velamq

PUBLIC_API: dict[str, list[str]] = {
    "velamq": [
        "AlreadyExistsError", "ChecksumMismatchError", "ClientError", "CompressionError", "CorruptEntryError",
        "FrameTooLargeError", "InvalidTopicNameError", "LedgerClosedError", "MetadataError", "NotFoundError",
        "PreconditionFailedError", "ProtocolError", "ServerError", "StorageError", "VelamqError", "__version__",
    ],
    "velamq.client": [
        "AdminClient", "AdminError", "AdminReply", "AlreadyClosedError", "AsyncClient", "Authentication",
        "AutoClusterFailover", "ControlledClusterFailover", "ServiceInfo", "ServiceInfoProvider",
        "AuthenticationBasic", "AuthenticationError", "AuthenticationTLS", "AuthenticationToken", "AuthorizationError",
        "AvroSchema", "BatchReceivePolicy", "BlockingConsumer", "BlockingOrderedConsumer", "BlockingProducer",
        "BlockingReader", "BrokerError", "BytesSchema", "ChecksumError", "Client", "ClientConfig",
        "ConnectAuthenticationError", "ConnectError", "ConnectionSecurity", "CredentialsError", "Consumer",
        "ConsumerAssignError", "ConsumerBusyError", "ConsumerConfig", "ConsumerNotFoundError", "DeadLetterPolicy",
        "DiscoveryStats", "EntryListener", "EntryProducer",
        "IncompatibleSchemaError", "InvalidConfigurationError", "InvalidTopicError", "JsonSchema", "KeySharedPolicy",
        "MemoryBufferIsFullError", "Message", "MessageId", "MessageRouter", "MessageTooBigError", "Messages",
        "NotAllowedError", "OperationTimeoutError", "OrderedConsumer", "OrderedConsumerMetrics",
        "OrderedPartitionMetrics", "Producer", "ProducerBlockedQuotaExceededError", "ProducerBusyError",
        "ProducerConfig", "ProducerFencedError", "ProducerInterceptor", "ProducerMessage", "ProducerQueueIsFullError",
        "Reader", "ReceivedBatch", "Record", "Schema", "SendTimeoutError", "ServiceNotReadyError", "StringSchema",
        "SubscriptionNotFoundError", "TlsHandshakeError", "TooManyRequestsError", "TopicNotFoundError",
        "TopicTerminatedError", "boost_hash", "error_from_server", "java_string_hash", "murmur3_32_hash",
        "sign_safe_mod",
    ],
    "velamq.protocol": [
        "AssembledMessage", "ChunkAssembler", "ChunkOutcome", "EvictedMessage", "Frame", "FrameDecoder", "I64_MAX",
        "MessageColumns", "SendReceiptEncoder", "build_batch", "build_entry", "chunk_uuid", "codec_from_name",
        "compress", "crc32c", "decode_batch", "decompress", "encode_batch", "encode_command", "encode_payload_command",
        "entry_messages", "entry_metadata_bytes", "parse_batch", "parse_entry_metadata", "parse_entry_metadata_bytes",
        "pb", "signed64",
        "single_columns", "split_chunks", "split_entry", "unsigned64", "varint", "verify_entry", "with_checksum",
    ],
    "velamq.spark": [
        "VelamqDataLossError", "VelamqDataSource", "VelamqOptionError", "VelamqSchemaError", "VelamqSparkSetupError",
        "check_workers", "register", "source_schema",
    ],
    "velamq.storage": [
        "CursorOwner", "Entry", "EntryRows", "LedgerInfo", "LedgerStore", "ManagedCursor", "ManagedLedger",
        "MemoryBudget", "OffloadConfig", "OffloadPolicy", "OffloadStatus", "PolicySource", "Position",
        "PublishBuffer", "RangeSet", "RowColumns", "ShardedStorage", "Storage", "StorageConfig",
    ],
    "velamq.metadata": [
        "BacklogQuota", "DEFAULT_CLUSTER", "DEFAULT_NAMESPACE", "DEFAULT_TENANT", "SchemaCompatibilityError",
        "InvalidSchemaDataError", "MetadataStore", "Policies", "SchemaData", "SchemaRegistry", "SchemaType",
        "StoredSchema", "Strategy", "TopicOpen", "allow_auto_update", "decode_version", "effective_strategy",
        "encode_version", "get_schema_response", "partitions_max", "resolve_policies", "schema_from_payload",
        "schema_id", "validation_enforced", "TopicListing", "WorkerInfo",
    ],
    "velamq.security": [
        "ALGORITHMS", "family_of", "key_family",
        "AccessDeniedError", "AuthAction", "AuthResult", "AuthenticationFailedError", "AuthenticationProvider",
        "AuthenticationProviderBasic", "AuthenticationProviderTls", "AuthenticationProviderToken",
        "AuthenticationService",
        "AuthorizationModel", "BASIC_PROVIDER", "HTTP_METHOD_HEADER", "HtpasswdFile", "InvalidGrantError",
        "KeyPairDer", "NamespaceAuth", "NamespaceOperation", "REFRESH_CHALLENGE", "ReloadingServerContext",
        "SECURITY_KEYS", "SecurityConfigError", "SecurityError", "SecuritySettings", "TLS_PROVIDER",
        "TOKEN_PROVIDER", "TlsServerSettings", "TokenIdentity", "TokenValidator", "TopicOperation",
        "basic_auth_conf_location", "build_authentication_service", "build_server_context", "certificate_role",
        "create_key_pair", "create_secret_key", "create_token", "decode_private_key", "decode_public_key",
        "decode_secret_key", "read_key_bytes",
    ],
    "velamq.broker": [
        "BrokerAdmin", "BrokerConfig", "BrokerMetrics", "BrokerOverview", "BrokerRequestError", "BrokerService",
        "BrokerUrls", "CompactionStatus", "ConsumerStats", "CursorStats", "DiskUsage", "InternalStats",
        "LastMessageId", "LedgerStats", "ListenSockets", "NamespaceMetrics", "NonPersistentTopicStats",
        "Ownership", "PublisherStats", "RateSeries", "SubscriptionMetrics", "SubscriptionStats", "TopicMetrics",
        "TopicStats", "listening_socket",
    ],
    "velamq.admin": ["AdminServer", "AdminSockets", "BrokerBackend", "WorkerRouting"],
    "velamq.workers": ["Supervisor", "WorkerOwnership", "WorkerSpec", "serve_worker", "worker_spec_from_environment"],
    "velamq.replication": ["ReplicationService", "ReplicatorStats"],
    "velamq.testing": ["BrokerProcess", "BrokerThread", "free_port", "run_broker", "run_broker_in_thread"],
    "velamq.cli": [],  # no importable API: its entry point is the `velamq` command
    "velamq.client.schema": [
        "Array", "AvroSchema", "Boolean", "Bytes", "BytesSchema", "CustomEnum", "Double", "Field", "Float",
        "Integer", "JsonSchema", "Long", "Map", "Null", "Record", "Schema", "String", "StringSchema",
    ],
}

# The rooms of broker, client and storage (docs/architecture.md): subpackages of private modules,
# whose docstring is their map. They export nothing; what is public is re-exported by their package.
ROOMS = [
    "velamq.broker.delayed", "velamq.broker.guards", "velamq.broker.log", "velamq.broker.nonpersistent",
    "velamq.broker.service",
    "velamq.broker.session", "velamq.broker.stats", "velamq.broker.subscription", "velamq.broker.topic",
    "velamq.client.blocking", "velamq.client.consumer", "velamq.client.ordered", "velamq.client.producer",
    "velamq.client.security", "velamq.client.transport",
    "velamq.storage.formats", "velamq.storage.gc", "velamq.storage.index", "velamq.storage.journal",
    "velamq.storage.ledger", "velamq.storage.offload", "velamq.storage.startup", "velamq.storage.write",
]


def _packages() -> list[str]:
    found = ["velamq"]
    for info in pkgutil.walk_packages(velamq.__path__, "velamq."):
        if info.ispkg and not any(part.startswith("_") for part in info.name.split(".")):
            found.append(info.name)
    return sorted(found)


def test_every_package_is_pinned() -> None:
    assert _packages() == sorted([*PUBLIC_API, *ROOMS])


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_exports_nothing_and_its_docstring_is_its_map(room: str) -> None:
    module = importlib.import_module(room)
    assert getattr(module, "__all__", []) == []
    assert [name for name in vars(module) if not name.startswith("_")] == []  # no re-exports
    doc = module.__doc__ or ""
    assert "May import" in doc and "Imported by" in doc, f"{room}: its docstring says what it may import"


@pytest.mark.parametrize("package", sorted(PUBLIC_API))
def test_all_is_pinned_and_every_name_exists(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(getattr(module, "__all__", []))
    assert sorted(exported) == sorted(PUBLIC_API[package])
    assert len(set(exported)) == len(exported), "a name listed twice in __all__"
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == []


def test_every_exported_error_descends_from_the_root() -> None:
    for package in PUBLIC_API:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                assert issubclass(value, velamq.VelamqError), f"{package}.{name}"
