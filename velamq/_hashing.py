"""Key hashes shared by the broker (Key_Shared) and the client (partition routing, WC-3).

Murmur3_32 here is Pulsar's Murmur3_32Hash: MurmurHash3 x86_32, seed 0, over the UTF-8 bytes,
and the result masked to a non-negative int (`& 0x7fffffff`), as Java's makeHash does.
"""

from __future__ import annotations

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_M32 = 0xFFFFFFFF

KEY_SHARED_HASH_RANGE = 65536  # Key_Shared hash ranges cover 0..65535


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 as an unsigned 32-bit int."""
    h = seed & _M32
    n = len(data)
    nblocks = n // 4
    for i in range(nblocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _C1) & _M32
        k = ((k << 15) | (k >> 17)) & _M32
        k = (k * _C2) & _M32
        h ^= k
        h = ((h << 13) | (h >> 19)) & _M32
        h = (h * 5 + 0xE6546B64) & _M32
    tail = data[4 * nblocks :]
    k = 0
    if len(tail) == 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if len(tail) >= 1:
        k ^= tail[0]
        k = (k * _C1) & _M32
        k = ((k << 15) | (k >> 17)) & _M32
        k = (k * _C2) & _M32
        h ^= k
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def pulsar_murmur3_32(key: bytes) -> int:
    """Pulsar's Murmur3_32Hash.makeHash: the 32-bit hash with the sign bit cleared."""
    return murmur3_32(key) & 0x7FFFFFFF


def key_shared_slot(key: bytes) -> int:
    """The Key_Shared hash slot (0..65535) of a sticky key."""
    return pulsar_murmur3_32(key) % KEY_SHARED_HASH_RANGE
