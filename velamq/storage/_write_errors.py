"""What a failed write is: its kind by errno (a full disk, no descriptors left, anything else) and
the StorageError that keeps the OSError as its cause. Shared by the journal, the flusher, the write
health (write/_health.py) and the garbage collector, below all of them.
"""

from __future__ import annotations

import errno

from velamq._errors import StorageError

_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_NO_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})


def failure_kind(exc: BaseException | None) -> str:
    """"no_space", "no_descriptors" or "other", from the OSError behind a storage error."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno is not None:
            if exc.errno in _NO_SPACE:
                return "no_space"
            if exc.errno in _NO_DESCRIPTORS:
                return "no_descriptors"
            return "other"
        text = str(exc)
        if "No space left" in text or "database or disk is full" in text or "Disk quota" in text:
            return "no_space"
        if "Too many open files" in text:
            return "no_descriptors"
        exc = exc.__cause__ or exc.__context__
    return "other"


def storage_error(what: str, exc: BaseException) -> StorageError:
    """A StorageError for a failed write, keeping the OSError (and its errno) as its cause."""
    error = StorageError(f"{what}: {exc}")
    error.__cause__ = exc
    return error
