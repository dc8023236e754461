"""The one exception tree of velamq: every exception class of the package derives from VelamqError
(tests/unit/test_exception_tree.py walks the package and checks it). Where a class also derives from
a builtin, it is named after "also": code that catches the builtin keeps working.

    VelamqError
    ├── ProtocolError                     bytes on the wire that are not a valid Pulsar frame
    │   ├── FrameTooLargeError            a frame above the negotiated size limit
    │   ├── ChecksumMismatchError         CRC32C of metadata + payload does not verify
    │   └── CompressionError              a payload that does not decompress
    ├── protocol._columns._Slow           (private) a batch the column codec hands to the per-message one
    ├── StorageError                      the managed ledger could not do what was asked
    │   ├── CorruptEntryError             a stored entry whose checksum does not verify
    │   └── LedgerClosedError             append or read on a closed / deleted ledger
    ├── MetadataError                     the metadata store could not do what was asked
    │   ├── NotFoundError                 tenant, namespace or topic does not exist      (HTTP 404)
    │   ├── AlreadyExistsError            it exists already                              (HTTP 409)
    │   ├── PreconditionFailedError       it exists but cannot be changed that way       (HTTP 412)
    │   ├── metadata.SchemaCompatibilityError  a schema the topic's compatibility strategy refuses
    │   └── metadata.InvalidSchemaDataError    a schema definition that does not parse
    ├── security.SecurityError            the broker's and admin's security (velamq/security/_errors.py)
    │   ├── SecurityConfigError           security settings that cannot be used (at start or reload)
    │   ├── AuthenticationFailedError     credentials refused (ServerError.AuthenticationError, HTTP 401)
    │   ├── AccessDeniedError             a role lacks the right (ServerError.AuthorizationError, HTTP 403)
    │   └── InvalidGrantError             a grant or permission body Pulsar's admin API would refuse (HTTP 400)
    ├── InvalidTopicNameError             a topic or namespace name that does not parse (also ValueError)
    ├── _bundles.BundleError              a bundle range or boundaries that are not well formed (also ValueError)
    ├── ServerError                       a Pulsar ServerError code: .code, .message
    │   ├── broker.BrokerRequestError     a request the broker refuses, with the code it answers
    │   └── client.BrokerError            the client got that code back (also ClientError; see below)
    ├── ClientError                       the client could not do what was asked (velamq/client/_errors.py)
    │   ├── ConnectError                  no connection to the broker
    │   │   ├── CredentialsError          the client's own credentials could not be read
    │   │   ├── TlsHandshakeError         the TLS handshake failed (unknown CA, bad certificate)
    │   │   └── client.TlsConfigurationError  TLS files that do not load (also InvalidConfigurationError)
    │   ├── OperationTimeoutError         no answer within operation_timeout_s (also TimeoutError)
    │   │   └── SendTimeoutError          no receipt within send_timeout_ms
    │   ├── AlreadyClosedError            the client, producer or consumer is closed
    │   ├── ProducerQueueIsFullError      max_pending_messages reached, not blocking
    │   ├── MemoryBufferIsFullError       the client-wide memory limit reached, not blocking
    │   ├── MessageTooBigError            a payload above the broker's limit, chunking disabled
    │   ├── InvalidConfigurationError     options that contradict each other (also ValueError)
    │   │   ├── client.InvalidAuthParamsError  an authentication parameter string that does not parse
    │   │   ├── cli.SecurityArgumentError      security flags of `velamq` that do not fit together
    │   │   └── spark.SecurityOptionError      the Spark source's security options, the same
    │   ├── AdminError                    an admin REST call failed: .status (0: unreachable), .reason
    │   └── BrokerError                   one subclass per fatal ServerError code, named as the official
    │                                     client names them (TopicNotFoundError, ProducerBusyError,
    │                                     ProducerFencedError, TopicTerminatedError, AuthenticationError
    │                                     and ConnectAuthenticationError, AuthorizationError,
    │                                     IncompatibleSchemaError, NotAllowedError, ...) and two
    │                                     retried ones (ServiceNotReadyError, TooManyRequestsError)
    ├── broker.HashRangeOverlapError      a Key_Shared STICKY consumer whose ranges overlap another's
    ├── admin.HttpError                   an HTTP request the admin server answers with an error status
    ├── admin.PeerError                   another worker's admin server could not be asked
    ├── cli.PerfError                     `velamq perf` cannot run as asked
    ├── cli.LeanError                     `velamq perf --lean`: the broker refused the load or answered oddly
    ├── replication.ClusterError          a cluster's data that does not say how to reach it (also ValueError)
    └── spark                             the PySpark data source (velamq.spark)
        ├── VelamqOptionError             an option unknown, missing, malformed or in conflict (also ValueError)
        ├── VelamqSchemaError             a DataFrame to write lacks `value` or has a bad column (also ValueError)
        ├── VelamqDataLossError           messages a query had not read are gone (also RuntimeError)
        └── VelamqSparkSetupError         Spark's workers cannot import velamq (also RuntimeError)

No two exception classes have the same name (tests/unit/test_exception_tree.py): the client's
names are the official Python client's (AuthenticationError, IncompatibleSchemaError, ...), so the
broker's side of the same refusals has its own (AuthenticationFailedError, SchemaCompatibilityError).

Errors carry structured fields (topic, producer, code) so the broker can translate them into
Pulsar ServerError codes at one boundary, and the admin API into HTTP status codes.
"""

from __future__ import annotations


class VelamqError(Exception):
    """Root of every error velamq raises on purpose."""


class ProtocolError(VelamqError):
    """Bytes that are not a valid Pulsar frame or command."""


class FrameTooLargeError(ProtocolError):
    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"frame of {size_bytes} bytes exceeds the limit of {limit_bytes} bytes")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class ChecksumMismatchError(ProtocolError):
    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"CRC32C mismatch: frame says {expected:#010x}, computed {actual:#010x}")
        self.expected = expected
        self.actual = actual


class CompressionError(ProtocolError):
    """A payload that cannot be compressed or decompressed with the codec it names."""


class StorageError(VelamqError):
    """The managed ledger could not complete an operation."""


class CorruptEntryError(StorageError):
    def __init__(self, where: str, detail: str) -> None:
        super().__init__(f"corrupt entry in {where}: {detail}")
        self.where = where


class LedgerClosedError(StorageError):
    """Append or read on a managed ledger that is closed or deleted."""


class MetadataError(VelamqError):
    """The metadata store could not complete an operation."""


class NotFoundError(MetadataError):
    pass


class AlreadyExistsError(MetadataError):
    pass


class PreconditionFailedError(MetadataError):
    pass


class InvalidTopicNameError(VelamqError, ValueError):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"invalid topic name {name!r}: {reason}")
        self.name = name
        self.reason = reason


class ServerError(VelamqError):
    """A broker answered with a Pulsar ServerError code (see protocol's ServerError enum)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"server error {code}: {message}")
        self.code = code
        self.message = message


class ClientError(VelamqError):
    """The client could not complete an operation."""
