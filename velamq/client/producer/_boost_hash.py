"""The three key hashes Pulsar clients route keyed messages with (PR-3, WC-3).

    boost        boost::hash<std::string> of Boost >= 1.81 on a 64-bit platform, as the C++ client
                 behind PyPI pulsar-client computes it (lib/BoostHash.cc: `hash(key) & INT32_MAX`).
                 The string hash is boost::hash_range(seed=0) over the bytes, the random-access char
                 specialisation in container_hash/detail/hash_range.hpp:

                     q = 0x9e3779b97f4a7c15, k = 0xdf442d22ce4859b9 (q*q), mulx(x, y) = lo(x*y) ^ hi(x*y)
                     w = mulx(seed + q, k);  h = w ^ n
                     for each full 8-byte little-endian word v:  w += q;  h ^= mulx(v + w, k)
                     tail (0..7 bytes) packed into v as the C++ does;  w += q;  h ^= mulx(v + w, k)
                     return mulx(h + w, k)
    java_string  Java's String.hashCode() over UTF-16 code units (what Java producers use by default)
    murmur3_32   MurmurHash3 x86_32, seed 0, over the UTF-8 bytes (Java's Murmur3_32Hash)

Every scheme returns a non-negative 31-bit int; the partition is signSafeMod(hash, partitions).
"""

from __future__ import annotations

from collections.abc import Callable

from velamq._hashing import pulsar_murmur3_32

_M64 = (1 << 64) - 1
_Q = 0x9E3779B97F4A7C15
_K = 0xDF442D22CE4859B9
_I32_MAX = 0x7FFFFFFF


def _mulx(x: int, y: int) -> int:
    r = (x & _M64) * (y & _M64)
    return (r & _M64) ^ (r >> 64)


def _read32le(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "little")


def boost_hash_bytes(data: bytes, seed: int = 0) -> int:
    """boost::hash_range over chars, 64-bit size_t (Boost >= 1.81). Returns the full 64-bit value."""
    n = len(data)
    w = _mulx(seed + _Q, _K)
    h = w ^ n
    p = 0
    while n >= 8:
        v = int.from_bytes(data[p : p + 8], "little")
        w = (w + _Q) & _M64
        h ^= _mulx(v + w, _K)
        p += 8
        n -= 8
    v = 0
    if n >= 4:
        v = (_read32le(data, p + n - 4) << ((n - 4) * 8)) | _read32le(data, p)
    elif n >= 1:
        x1 = (n - 1) & 2
        x2 = n >> 1
        v = (data[p + x1] << (x1 * 8)) | (data[p + x2] << (x2 * 8)) | data[p]
    w = (w + _Q) & _M64
    h ^= _mulx(v + w, _K)
    return _mulx(h + w, _K)


def boost_hash(key: str) -> int:
    """The C++ client's BoostHash::makeHash: the low 31 bits of boost::hash<std::string>."""
    return boost_hash_bytes(key.encode("utf-8")) & _I32_MAX


def java_string_hash(key: str) -> int:
    """Java's JavaStringHash.makeHash: String.hashCode() & Integer.MAX_VALUE."""
    h = 0
    units = key.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h & _I32_MAX


def murmur3_32_hash(key: str) -> int:
    """Java's Murmur3_32Hash.makeHash over the UTF-8 bytes."""
    return pulsar_murmur3_32(key.encode("utf-8"))


HASHING_SCHEMES: dict[str, Callable[[str], int]] = {
    "boost": boost_hash,
    "java_string": java_string_hash,
    "murmur3_32": murmur3_32_hash,
}


def hash_function(scheme: str) -> Callable[[str], int]:
    try:
        return HASHING_SCHEMES[scheme]
    except KeyError:
        raise ValueError(f"unknown hashing scheme {scheme!r}; one of {sorted(HASHING_SCHEMES)}") from None
