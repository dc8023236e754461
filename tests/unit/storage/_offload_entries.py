"""Pulsar entries for the offload tests, as producers make them, and a Storage that offloads them
(given the broker's EntryRows, as the broker's composition root gives it) (a unique module name)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from _storage_testing import config

from velamq._clock import Clock, system_clock
from velamq.broker.log._offload_rows import PulsarEntryRows
from velamq.protocol import build_batch, build_entry, compress, pb
from velamq.storage import Storage

ROWS = PulsarEntryRows()


@asynccontextmanager
async def offloading(data_dir: Path, clock: Clock = system_clock, **kwargs: Any) -> AsyncIterator[Storage]:
    """A started Storage that can offload (kwargs: StorageConfig's, offload= among them)."""
    storage = Storage(config(data_dir, **kwargs), clock, ROWS)
    await storage.start()
    try:
        yield storage
    finally:
        await storage.close()

CODECS = (pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY)


def batch_entry(n: int, *, codec: int = pb.NONE, seq: int = 0, tag: str = "m") -> bytes:
    """A batch of n messages: every other one keyed, each with a property and an event time."""
    messages = []
    for i in range(n):
        single = pb.SingleMessageMetadata()
        if i % 2:
            single.partition_key = f"key-{i}"
        single.properties.add(key="i", value=str(i))
        single.sequence_id = seq + i
        single.event_time = 1_000 + i
        messages.append((single, f"{tag}-{seq + i}-".encode() * 3))
    plain = build_batch(messages)
    metadata = pb.MessageMetadata(producer_name="producer-a", sequence_id=seq, publish_time=1_700_000_000_000 + seq,
                                  num_messages_in_batch=n, compression=codec, uncompressed_size=len(plain))
    return build_entry(metadata, compress(codec, plain))


def single_entry(value: bytes, *, codec: int = pb.NONE, seq: int = 0) -> bytes:
    metadata = pb.MessageMetadata(producer_name="producer-b", sequence_id=seq, publish_time=1_700_000_000_000 + seq,
                                  partition_key="single", compression=codec, uncompressed_size=len(value),
                                  ordering_key=b"order", schema_version=b"\x00\x01")
    metadata.properties.add(key="p", value="q")
    return build_entry(metadata, compress(codec, value))


def encrypted_entry(ciphertext: bytes) -> bytes:
    metadata = pb.MessageMetadata(producer_name="producer-c", sequence_id=7, publish_time=1_700_000_000_007,
                                  encryption_algo="RSA", encryption_param=b"nonce", num_messages_in_batch=3)
    metadata.encryption_keys.add(key="client-key", value=b"\x01\x02wrapped")
    return build_entry(metadata, ciphertext)


def chunk_entries(value: bytes, chunks: int) -> list[bytes]:
    """A message chunked as producers do: each chunk an entry holding a piece of the payload."""
    size = -(-len(value) // chunks)
    out = []
    for k in range(chunks):
        metadata = pb.MessageMetadata(producer_name="producer-d", sequence_id=9, publish_time=1_700_000_000_009,
                                      uuid="producer-d-9", chunk_id=k, num_chunks_from_msg=chunks,
                                      total_chunk_msg_size=len(value), uncompressed_size=len(value))
        out.append(build_entry(metadata, value[k * size : (k + 1) * size]))
    return out


def mixed_entries(count: int) -> list[bytes]:
    """count entries cycling through every kind above."""
    out: list[bytes] = []
    k = 0
    while len(out) < count:
        codec = CODECS[k % len(CODECS)]
        out.append(batch_entry(1 + k % 7, codec=codec, seq=k * 10))
        out.append(single_entry(b"value-%d-" % k * (1 + k % 50), codec=codec, seq=k))
        if k % 5 == 0:
            out.append(encrypted_entry(b"\x00\xffopaque-%d" % k))
        if k % 7 == 0:
            out += chunk_entries(b"chunked-%d-" % k * 40, 3)
        k += 1
    return out[:count]
