"""The top-level public API is pinned: changing it is a decision, not an accident (DESIGN §4)."""

from __future__ import annotations

import velamq


def test_top_level_all_is_pinned() -> None:
    assert sorted(velamq.__all__) == [
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
    for name in velamq.__all__:
        assert hasattr(velamq, name)


def test_every_error_descends_from_the_root() -> None:
    for name in velamq.__all__:
        value = getattr(velamq, name)
        if isinstance(value, type):
            assert issubclass(value, velamq.VelamqError)
