"""Whole-payload compression, as Pulsar does it (PR-7).

    NONE    bytes as they are
    LZ4     LZ4 block format, no frame header (uncompressed size is in the metadata)
    ZLIB    zlib stream (RFC 1950: deflate with the 2-byte header and Adler-32)
    ZSTD    one zstd frame
    SNAPPY  raw snappy block format (no framing)

metadata.uncompressed_size tells the decoder how large the result is; every decoder is bounded
by it so a hostile payload cannot inflate past it.

A ZstdCompressor / ZstdDecompressor must not be used by two threads at once (python-zstandard
documents it; the blocking client and the Spark connector run code in threads), and making one
per call costs a context allocation per message: each thread gets its own pair, on first use.
"""

from __future__ import annotations

import threading
import zlib

import cramjam
import lz4.block
import zstandard

from velamq._errors import CompressionError
from velamq.protocol import _pulsar_api_pb2 as pb

NONE = pb.NONE
LZ4 = pb.LZ4
ZLIB = pb.ZLIB
ZSTD = pb.ZSTD
SNAPPY = pb.SNAPPY

_NAMES = {"none": NONE, "lz4": LZ4, "zlib": ZLIB, "zstd": ZSTD, "snappy": SNAPPY}

zstd_level = 3


class _ZstdContexts(threading.local):
    """One compressor and one decompressor per thread (threading.local runs __init__ in each)."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=zstd_level)
        self.decompressor = zstandard.ZstdDecompressor()


_zstd = _ZstdContexts()


def codec_from_name(name: str) -> int:
    try:
        return _NAMES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown compression type {name!r}; one of {sorted(_NAMES)}") from None


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == LZ4:
        return bytes(lz4.block.compress(data, store_size=False))
    if codec == ZLIB:
        return zlib.compress(data)
    if codec == ZSTD:
        return bytes(_zstd.compressor.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    raise CompressionError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes, uncompressed_size: int) -> bytes:
    if codec == NONE:
        return data
    try:
        if codec == LZ4:
            if uncompressed_size == 0:
                return b""
            out = bytes(lz4.block.decompress(data, uncompressed_size=uncompressed_size))
        elif codec == ZLIB:
            d = zlib.decompressobj()
            out = d.decompress(data, uncompressed_size)
            if d.unconsumed_tail:
                raise CompressionError("zlib payload inflates past its uncompressed size")
        elif codec == ZSTD:
            out = bytes(_zstd.decompressor.decompress(data, max_output_size=uncompressed_size))
        elif codec == SNAPPY:
            out = bytes(cramjam.snappy.decompress_raw(data))
        else:
            raise CompressionError(f"unknown compression codec {codec}")
    except CompressionError:
        raise
    except Exception as exc:  # each library has its own error type; translate at this one boundary
        raise CompressionError(f"cannot decompress payload of codec {codec}: {exc}") from None
    if len(out) != uncompressed_size:
        raise CompressionError(f"payload decompressed to {len(out)} bytes, metadata says {uncompressed_size}")
    return out
