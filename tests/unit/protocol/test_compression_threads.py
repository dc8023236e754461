"""Compression from several threads at once (the blocking client and the Spark connector use
threads): every codec must round-trip while other threads compress and decompress too. zstd's
compressor and decompressor contexts are not thread-safe, so each thread must have its own."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from velamq.protocol import compress, decompress, pb

threads = 8
rounds_per_thread = 12


def _payload(seed: int) -> bytes:
    # Compressible but distinct per call, and large enough that the codec releases the GIL for a while.
    rng = random.Random(seed)
    words = [rng.randbytes(rng.randint(3, 12)) for _ in range(64)]
    return b" ".join(rng.choice(words) for _ in range(20_000))


@pytest.mark.parametrize("codec", [pb.ZSTD, pb.LZ4, pb.ZLIB, pb.SNAPPY], ids=["zstd", "lz4", "zlib", "snappy"])
def test_round_trips_from_many_threads_at_once(codec: int) -> None:
    start = threading.Barrier(threads)

    def work(thread_index: int) -> int:
        start.wait()  # every thread compresses at the same moment
        done = 0
        for i in range(rounds_per_thread):
            data = _payload(thread_index * 1000 + i)
            packed = compress(codec, data)
            assert decompress(codec, packed, len(data)) == data
            done += 1
        return done

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(work, range(threads)))
    assert results == [rounds_per_thread] * threads
