"""Chunk splitting and reassembly (CH-1, CH-3, CH-4), sans-IO."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from velamq.protocol import ChunkAssembler, chunk_uuid, split_chunks


@given(st.binary(max_size=5000), st.integers(min_value=1, max_value=700))
def test_split_joins_back(payload: bytes, size: int) -> None:
    chunks = split_chunks(payload, size)
    assert b"".join(chunks) == payload
    assert all(0 < len(c) <= size for c in chunks) or payload == b""


def _chunks_of(uuid: str, payload: bytes, size: int) -> list[tuple[str, int, int, int, bytes]]:
    parts = split_chunks(payload, size)
    return [(uuid, i, len(parts), len(payload), p) for i, p in enumerate(parts)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=400), min_size=1, max_size=6), st.integers(min_value=1, max_value=50),
       st.randoms(use_true_random=False))
def test_interleaved_producers_reassemble(payloads: list[bytes], size: int, rnd: random.Random) -> None:
    # Chunks of several messages interleave, but each message's chunks stay in order.
    streams = [_chunks_of(chunk_uuid(f"p{i}", 0), p, size) for i, p in enumerate(payloads)]
    assembler: ChunkAssembler[int] = ChunkAssembler(len(payloads), 60_000, False)
    done: dict[str, bytes] = {}
    position = 0
    while any(streams):
        stream = rnd.choice([s for s in streams if s])
        uuid, cid, n, total, part = stream.pop(0)
        out = assembler.add(uuid, cid, n, total, position, part, now_ms=0)
        position += 1
        assert out.evicted == ()
        if out.assembled is not None:
            done[out.assembled.uuid] = out.assembled.payload
            assert len(out.assembled.chunk_ids) == n
            assert list(out.assembled.chunk_ids) == sorted(out.assembled.chunk_ids)
    assert done == {chunk_uuid(f"p{i}", 0): p for i, p in enumerate(payloads)}
    assert len(assembler) == 0


def test_out_of_order_chunk_drops_the_message() -> None:
    a: ChunkAssembler[str] = ChunkAssembler(10, 60_000, True)
    assert a.add("u", 0, 3, 3, "c0", b"a", 0).assembled is None
    out = a.add("u", 2, 3, 3, "c2", b"c", 0)
    assert out.assembled is None
    assert [(e.uuid, e.chunk_ids, e.reason, e.acknowledge) for e in out.evicted] == \
        [("u", ("c0", "c2"), "out_of_order", False)]
    # The late chunk 1 is then an orphan and is dropped too.
    assert a.add("u", 1, 3, 3, "c1", b"b", 0).evicted[0].reason == "out_of_order"
    assert len(a) == 0


def test_chunk_zero_again_restarts_the_message() -> None:
    a: ChunkAssembler[int] = ChunkAssembler(10, 60_000, False)
    a.add("u", 0, 2, 2, 1, b"x", 0)
    a.add("u", 0, 2, 2, 2, b"a", 0)
    out = a.add("u", 1, 2, 2, 3, b"b", 0)
    assert out.assembled is not None and out.assembled.payload == b"ab" and out.assembled.chunk_ids == (2, 3)


def test_queue_full_evicts_the_oldest_with_the_configured_policy() -> None:
    for auto_ack in (True, False):
        a: ChunkAssembler[int] = ChunkAssembler(2, 60_000, auto_ack)
        a.add("u1", 0, 2, 2, 1, b"a", 0)
        a.add("u2", 0, 2, 2, 2, b"a", 0)
        out = a.add("u3", 0, 2, 2, 3, b"a", 0)
        assert [(e.uuid, e.reason, e.acknowledge) for e in out.evicted] == [("u1", "queue_full", auto_ack)]
        assert len(a) == 2
        assert a.add("u2", 1, 2, 2, 4, b"b", 0).assembled is not None


def test_incomplete_messages_expire() -> None:
    a: ChunkAssembler[int] = ChunkAssembler(10, 1000, True)
    a.add("old", 0, 2, 2, 1, b"a", 0)
    a.add("new", 0, 2, 2, 2, b"a", 900)
    assert a.expire(999) == []
    expired = a.expire(1000)
    assert [(e.uuid, e.reason, e.acknowledge) for e in expired] == [("old", "expired", True)]
    assert len(a) == 1
