"""The offset index of a sealed ledger and the ledger file header: round trips and damage (hypothesis)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from velamq.storage._ledger_file import (
    LEDGER_HEADER_BYTES,
    RECORD_HEADER_BYTES,
    create_ledger_file,
    decode_index,
    encode_index,
    encode_ledger_header,
    parse_ledger_header,
    read_records,
    record_header,
    scan,
    write_all,
)

record_sizes = st.lists(st.integers(min_value=1, max_value=5000), max_size=300)


def offsets_of(sizes: list[int]) -> tuple[list[int], int]:
    offsets, pos = [], LEDGER_HEADER_BYTES
    for size in sizes:
        offsets.append(pos)
        pos += RECORD_HEADER_BYTES + size
    return offsets, pos


@given(
    sizes=record_sizes,
    ledger_id=st.integers(min_value=1, max_value=2**63 - 1),
    created_ms=st.integers(min_value=0, max_value=2**62),
    open_ms=st.integers(min_value=0, max_value=10**9),
)
@settings(max_examples=200, deadline=None)
def test_index_round_trip(sizes: list[int], ledger_id: int, created_ms: int, open_ms: int) -> None:
    offsets, file_bytes = offsets_of(sizes)
    raw = encode_index(ledger_id, offsets, file_bytes, created_ms, created_ms + open_ms)
    index = decode_index(raw, ledger_id)
    assert index is not None
    assert (index.entries, index.file_bytes, index.created_ms, index.closed_ms) == (
        len(sizes),
        file_bytes,
        created_ms,
        created_ms + open_ms,
    )
    assert [index.offset(i) for i in range(len(sizes) + 1)] == [*offsets, file_bytes]
    assert index.offset(len(sizes) + 5) == file_bytes  # past the end: the file length
    assert decode_index(raw, ledger_id + 1) is None  # another ledger's index never verifies


@given(sizes=record_sizes, where=st.floats(min_value=0.0, max_value=1.0, exclude_max=True), bit=st.integers(0, 7))
@settings(max_examples=200, deadline=None)
def test_any_damaged_index_is_refused(sizes: list[int], where: float, bit: int) -> None:
    offsets, file_bytes = offsets_of(sizes)
    raw = bytearray(encode_index(9, offsets, file_bytes, 1, 2))
    raw[int(where * len(raw))] ^= 1 << bit
    assert decode_index(bytes(raw), 9) is None
    assert decode_index(bytes(raw[:-1]), 9) is None


@given(sizes=record_sizes.filter(bool), data=st.data())
@settings(max_examples=60, deadline=None)
def test_offsets_from_a_scan_match_the_index_and_address_every_record(sizes: list[int], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "1.log"
        create_ledger_file(path, 1, 1234, sync=False)
        payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
        with open(path, "ab") as f:
            write_all(f.fileno(), [b for p in payloads for b in (record_header(p), p)])
        result = scan(path, 1)
        offsets, file_bytes = offsets_of(sizes)
        assert list(result.offsets) == offsets and result.valid_bytes == file_bytes == result.file_bytes
        assert result.created_ms == 1234
        index = decode_index(encode_index(1, result.offsets, result.valid_bytes, 1234, 5678), 1)
        assert index is not None
        first = data.draw(st.integers(0, len(sizes) - 1))
        last = data.draw(st.integers(first, len(sizes) - 1))
        got = read_records(path, "t", first, index.offset(first), index.offset(last + 1), last - first + 1)
        assert got == payloads[first : last + 1]


def test_ledger_header_names_its_ledger() -> None:
    raw = encode_ledger_header(42, 99)
    assert len(raw) == LEDGER_HEADER_BYTES
    assert parse_ledger_header(raw, 42) == 99
    assert parse_ledger_header(raw, 43) is None
    assert parse_ledger_header(raw[:-1], 42) is None
    assert parse_ledger_header(bytes(LEDGER_HEADER_BYTES), 42) is None  # zeros: a creation cut short
