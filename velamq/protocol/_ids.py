"""64-bit ids on the wire. MessageIdData carries ledger and entry ids as uint64, but Pulsar means
int64: earliest is (-1, -1), sent as 2**64-1, and latest is (INT64_MAX, INT64_MAX)."""

from __future__ import annotations

U64 = 1 << 64
I64_MAX = (1 << 63) - 1


def signed64(value: int) -> int:
    """A uint64 from the wire as the signed int64 Pulsar means."""
    return value - U64 if value > I64_MAX else value


def unsigned64(value: int) -> int:
    """A signed id as the uint64 the wire carries."""
    return value % U64
