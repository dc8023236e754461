"""velamq: a message-streaming broker in Python that speaks Apache Pulsar's binary protocol."""

from velamq._errors import (
    AlreadyExistsError,
    ChecksumMismatchError,
    ClientError,
    CompressionError,
    CorruptEntryError,
    FrameTooLargeError,
    InvalidTopicNameError,
    LedgerClosedError,
    MetadataError,
    NotFoundError,
    PreconditionFailedError,
    ProtocolError,
    ServerError,
    StorageError,
    VelamqError,
)

__version__ = "0.1.0"

__all__ = [
    "AlreadyExistsError",
    "ChecksumMismatchError",
    "ClientError",
    "CompressionError",
    "CorruptEntryError",
    "FrameTooLargeError",
    "InvalidTopicNameError",
    "LedgerClosedError",
    "MetadataError",
    "NotFoundError",
    "PreconditionFailedError",
    "ProtocolError",
    "ServerError",
    "StorageError",
    "VelamqError",
    "__version__",
]
