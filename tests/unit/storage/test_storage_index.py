"""The entry logs' records and the entry index: self-describing records, runs, and an index that
the logs alone can rebuild after any mix of appends, trims, deletions and garbage collection."""

from __future__ import annotations

import asyncio
import tempfile
from array import array
from pathlib import Path

import pytest
from _storage_testing import NEVER_MS, payload, started
from hypothesis import given, settings
from hypothesis import strategies as st

from velamq import CorruptEntryError
from velamq.storage import Position
from velamq.storage._layout import crc_of
from velamq.storage.formats._entry_log import (
    LOG_HEADER_BYTES,
    EntryLogFile,
    Run,
    encode_log_header,
    log_header_ok,
    pack_ends,
    parse_records,
    record_header,
    scan_log,
    unpack_ends,
)
from velamq.storage.index._storage_db import StorageDb


def encode_run(ledger_id: int, first: int, datas: list[bytes]) -> tuple[bytes, array[int]]:
    raw = b""
    ends = array("I")
    for i, data in enumerate(datas):
        raw += record_header(ledger_id, first + i, data, crc_of(data)) + data
        ends.append(len(raw))
    return raw, ends


@given(sizes=st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=40), first=st.integers(0, 10**9))
@settings(max_examples=60, deadline=None)
def test_runs_address_every_record(sizes: list[int], first: int) -> None:
    datas = [payload(i, n) for i, n in enumerate(sizes)]
    raw, ends = encode_run(5, first, datas)
    assert unpack_ends(pack_ends(ends)) == ends
    run_ = Run(5, first, len(datas), 1, 100, ends)
    for i in range(len(datas)):
        start, end = run_.byte_range(first + i, first + i)
        assert raw[start - 100 : end - 100].endswith(datas[i])
    start, end = run_.byte_range(first, first + len(datas) - 1)
    assert parse_records(raw[start - 100 : end - 100], "t", 5, first, len(datas)) == datas


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=200), min_size=1, max_size=20),
    where=st.floats(min_value=0, max_value=1, exclude_max=True),
    bit=st.integers(0, 7),
)
@settings(max_examples=100, deadline=None)
def test_any_flipped_bit_is_caught(sizes: list[int], where: float, bit: int) -> None:
    datas = [payload(i, n) for i, n in enumerate(sizes)]
    raw, _ = encode_run(3, 0, datas)
    damaged = bytearray(raw)
    damaged[int(where * len(raw))] ^= 1 << bit
    with pytest.raises(CorruptEntryError):
        parse_records(bytes(damaged), "t", 3, 0, len(datas))
    # A read-ahead past the wanted records ends quietly before the damage instead.
    got = parse_records(bytes(damaged), "t", 3, 0, len(datas), required=0)
    assert len(got) < len(datas) and got == datas[: len(got)]


def test_log_header_names_its_log(tmp_path: Path) -> None:
    header = encode_log_header(42, 1234)
    assert len(header) == LOG_HEADER_BYTES and log_header_ok(header, 42)
    assert not log_header_ok(header, 43) and not log_header_ok(header[:-1], 42)
    f = EntryLogFile.create(tmp_path, 42, 1234, sync=False)
    datas = [payload(i, 10 * i + 1) for i in range(5)]
    raw, _ = encode_run(9, 0, datas)
    assert f.append([raw], len(raw)) == LOG_HEADER_BYTES
    f.close()
    assert [(r.ledger_id, r.entry_id) for r in scan_log(f.path, 42)] == [(9, i) for i in range(5)]
    with pytest.raises(CorruptEntryError):
        list(scan_log(f.path, 41))


def index_from_logs(data_dir: Path, live: set[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """(ledger, entry) -> (log, offset) of every record of a live ledger, from the logs alone."""
    out = {}
    for path in sorted((data_dir / "logs").iterdir()):
        log_id = int(path.stem)
        for record in scan_log(path, log_id):
            if record.ledger_id in live:
                out[(record.ledger_id, record.entry_id)] = (log_id, record.offset)
    return out


def index_from_db(db: StorageDb) -> tuple[set[int], dict[tuple[int, int], tuple[int, int]]]:
    live: set[int] = set()
    out = {}
    for _, name in db.ml_names(limit=1000):
        ml_id = db.find_ml(name)
        assert ml_id is not None
        for ledger_id in db.ledger_ids_of(ml_id):
            live.add(ledger_id)
            for r in db.runs_of_ledger(ledger_id):
                for i in range(r.count):
                    entry_id = r.first_entry + i
                    out[(ledger_id, entry_id)] = (r.log_id, r.byte_range(entry_id, entry_id)[0])
    return live, out


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 3), st.integers(1, 3000)),
        st.tuples(st.just("trim"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("delete"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
        st.tuples(st.just("gc"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@given(ops=OPS)
@settings(max_examples=30, deadline=None)
def test_the_index_is_what_the_logs_say_after_any_history(ops: list[tuple[str, int, int]]) -> None:
    """Records describe themselves: scanning the logs gives, for every live ledger, exactly the
    locations the index has (so the index could be rebuilt from them), whatever happened."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        expected: dict[str, list[tuple[Position, bytes]]] = {}

        async def main() -> None:
            settings_ = {"ledger_entries_max": 5, "flush_interval_ms": NEVER_MS, "entry_log_bytes_max": 64 * 1024}
            async with started(data_dir, **settings_) as storage:
                for k, (op, topic, size) in enumerate(ops):
                    name = f"t{topic}"
                    if op == "append":
                        ml = await storage.open_ledger(name)
                        data = payload(k, size)
                        expected.setdefault(name, []).append((await ml.append(data), data))
                    elif op == "trim" and name in expected:
                        ml = await storage.open_ledger(name)
                        for ledger_id in await ml.trim(expected[name][-1][0]):
                            expected[name] = [(p, d) for p, d in expected[name] if p.ledger_id != ledger_id]
                    elif op == "delete":
                        await storage.delete_ledger(name)
                        expected.pop(name, None)
                    elif op == "flush":
                        await storage.flush()
                    elif op == "gc":
                        await storage.collect_garbage()
                for name, entries in expected.items():
                    ml = await storage.open_ledger(name)
                    got = await ml.read_entries(Position(0, 0), 10_000)
                    assert [(e.position, e.data) for e in got] == entries

        asyncio.run(main())
        db = StorageDb(data_dir / "storage.db", sync=False)
        try:
            live, indexed = index_from_db(db)
            assert index_from_logs(data_dir, live) == indexed
            assert db.orphans() == dict.fromkeys(db.orphans(), 0)
            for row in db.logs():  # live bytes are exactly the bytes of the runs still indexed
                assert row.live_bytes == sum(r.size_bytes for r in db.runs_in_log(row.log_id))
        finally:
            db.close()
