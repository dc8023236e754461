"""The client's exception tree, and the one boundary where Pulsar ServerError codes become it.

    velamq._errors.ClientError
    ├── ConnectError                     no connection to the broker (refused, lost, handshake failed)
    │   ├── CredentialsError             the client's own credentials cannot be had (supplier failed, no file)
    │   └── TlsHandshakeError            the broker's certificate was not trusted, or ours was refused
    ├── OperationTimeoutError            a request got no answer within operation_timeout_s (also TimeoutError)
    │   └── SendTimeoutError             a message got no receipt within send_timeout_ms
    ├── AlreadyClosedError               the client, producer or consumer is closed
    ├── ProducerQueueIsFullError         max_pending_messages reached and block_if_queue_full is false (PR-5)
    ├── MemoryBufferIsFullError          the client-wide memory limit reached, block_if_queue_full false (PR-5)
    ├── MessageTooBigError               a payload above the broker's max message size, chunking disabled
    ├── InvalidConfigurationError        options that contradict each other (also ValueError)
    ├── AdminError                       an admin REST call failed: HTTP status (0: unreachable) and reason
    └── BrokerError                      the broker answered with a ServerError code (also velamq ServerError)
        ├── TopicNotFoundError           TopicNotFound
        ├── SubscriptionNotFoundError    SubscriptionNotFound
        ├── ConsumerNotFoundError        ConsumerNotFound
        ├── ConsumerBusyError            ConsumerBusy
        ├── ConsumerAssignError          ConsumerAssignError (Key_Shared ranges)
        ├── ProducerBusyError            ProducerBusy
        ├── ProducerFencedError          ProducerFenced
        ├── ProducerBlockedQuotaExceededError   ProducerBlockedQuotaExceeded{Error,Exception}
        ├── TopicTerminatedError         TopicTerminatedError
        ├── AuthenticationError          AuthenticationError
        │   └── ConnectAuthenticationError   the broker refused CONNECT's credentials (also ConnectError)
        ├── AuthorizationError           AuthorizationError
        ├── IncompatibleSchemaError      IncompatibleSchema
        ├── InvalidTopicError            InvalidTopicName
        ├── NotAllowedError              NotAllowedError
        ├── ChecksumError                ChecksumError (SEND_ERROR)
        ├── ServiceNotReadyError         ServiceNotReady        (retried)
        ├── TooManyRequestsError         TooManyRequests        (retried)
        └── any other code               BrokerError itself     (UnknownError, MetadataError, ... retried)

Retriable errors are retried with backoff until the operation timeout, as the official clients do;
the others fail the operation at once.
"""

from __future__ import annotations

from velamq._errors import ClientError, ServerError
from velamq.protocol import pb


class ConnectError(ClientError):
    """No usable connection to the broker."""


class CredentialsError(ConnectError):
    """The authentication plugin could not produce credentials (a token supplier raised, a token
    file is missing or empty): retrying cannot help, so the operation fails at once."""

    retriable = False


class TlsHandshakeError(ConnectError):
    """The TLS handshake failed for a reason retrying cannot fix: the broker's certificate is not
    trusted (tls_trust_certs_file_path), its name does not match (tls_validate_hostname), or the
    broker refused our client certificate."""

    retriable = False


class OperationTimeoutError(ClientError, TimeoutError):
    """A request or operation did not complete in time."""


class SendTimeoutError(OperationTimeoutError):
    def __init__(self, topic: str, sequence_id: int, timeout_ms: int) -> None:
        super().__init__(f"{topic}: message {sequence_id} got no receipt within {timeout_ms} ms")
        self.topic = topic
        self.sequence_id = sequence_id


class AlreadyClosedError(ClientError):
    """The client, producer or consumer is already closed."""


class ProducerQueueIsFullError(ClientError):
    def __init__(self, topic: str, max_pending_messages: int) -> None:
        super().__init__(f"{topic}: producer send queue is full ({max_pending_messages} pending messages)")
        self.topic = topic
        self.max_pending_messages = max_pending_messages


class MemoryBufferIsFullError(ClientError):
    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"client memory buffer is full: cannot reserve {size_bytes} of {limit_bytes} bytes")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class MessageTooBigError(ClientError):
    def __init__(self, topic: str, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"{topic}: message of {size_bytes} bytes exceeds the broker's limit of {limit_bytes} bytes")
        self.topic = topic
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class InvalidConfigurationError(ClientError, ValueError):
    """Options that cannot be used together, or a value out of range."""


class AdminError(ClientError):
    """An admin REST call failed: the HTTP status (0 when the server could not be reached), the
    `reason` of Pulsar's error body, and the request's method and URL."""

    def __init__(self, status: int, reason: str, method: str = "", url: str = "") -> None:
        outcome = f"{reason} (HTTP {status})" if status else reason
        super().__init__(f"{method} {url}: {outcome}" if method else outcome)
        self.status = status
        self.reason = reason
        self.method = method
        self.url = url


class BrokerError(ClientError, ServerError):
    """The broker answered a request with a Pulsar ServerError code."""

    retriable = True

    def __init__(self, code: int, message: str) -> None:
        ServerError.__init__(self, code, message)


class _FatalBrokerError(BrokerError):
    retriable = False


class TopicNotFoundError(_FatalBrokerError):
    pass


class SubscriptionNotFoundError(_FatalBrokerError):
    pass


class ConsumerNotFoundError(_FatalBrokerError):
    pass


class ConsumerBusyError(_FatalBrokerError):
    pass


class ConsumerAssignError(_FatalBrokerError):
    pass


class ProducerBusyError(_FatalBrokerError):
    pass


class ProducerFencedError(_FatalBrokerError):
    pass


class ProducerBlockedQuotaExceededError(_FatalBrokerError):
    pass


class TopicTerminatedError(_FatalBrokerError):
    pass


class AuthenticationError(_FatalBrokerError):
    pass


class ConnectAuthenticationError(AuthenticationError, ConnectError):
    """The broker refused the credentials sent in CONNECT (wrong token, expired, wrong password, no
    provider for the method). Not retried: the same credentials would be refused again."""


class AuthorizationError(_FatalBrokerError):
    pass


class IncompatibleSchemaError(_FatalBrokerError):
    pass


class InvalidTopicError(_FatalBrokerError):
    pass


class NotAllowedError(_FatalBrokerError):
    pass


class ChecksumError(_FatalBrokerError):
    pass


class ServiceNotReadyError(BrokerError):
    pass


class TooManyRequestsError(BrokerError):
    pass


_BY_CODE: dict[int, type[BrokerError]] = {
    pb.TopicNotFound: TopicNotFoundError,
    pb.SubscriptionNotFound: SubscriptionNotFoundError,
    pb.ConsumerNotFound: ConsumerNotFoundError,
    pb.ConsumerBusy: ConsumerBusyError,
    pb.ConsumerAssignError: ConsumerAssignError,
    pb.ProducerBusy: ProducerBusyError,
    pb.ProducerFenced: ProducerFencedError,
    pb.ProducerBlockedQuotaExceededError: ProducerBlockedQuotaExceededError,
    pb.ProducerBlockedQuotaExceededException: ProducerBlockedQuotaExceededError,
    pb.TopicTerminatedError: TopicTerminatedError,
    pb.AuthenticationError: AuthenticationError,
    pb.AuthorizationError: AuthorizationError,
    pb.IncompatibleSchema: IncompatibleSchemaError,
    pb.InvalidTopicName: InvalidTopicError,
    pb.NotAllowedError: NotAllowedError,
    pb.UnsupportedVersionError: NotAllowedError,
    pb.ChecksumError: ChecksumError,
    pb.ServiceNotReady: ServiceNotReadyError,
    pb.TooManyRequests: TooManyRequestsError,
}


def error_from_server(code: int, message: str) -> BrokerError:
    """The one translation of a Pulsar ServerError code into the client's exception tree."""
    return _BY_CODE.get(code, BrokerError)(code, message)


def is_retriable(exc: BaseException) -> bool:
    """Worth retrying with backoff until the operation timeout (as the official clients do)."""
    if isinstance(exc, BrokerError):
        return exc.retriable
    if not getattr(exc, "retriable", True):
        return False
    return isinstance(exc, (ConnectError, OperationTimeoutError, OSError))
