"""Durable cursors: acks with holes, mark-delete across ledgers, batch ack sets, persistence (BR-2)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from _storage_testing import NEVER_MS, TOPIC, config, payload, run, started
from wait_helpers import until

from velamq._clock import ManualClock
from velamq.storage import ManagedLedger, Position, RangeSet, Storage
from velamq.storage.formats._journal_file import SegmentReader, list_segments, segment_name
from velamq.storage.formats._meta_ops import CURSOR_PUT, from_record
from velamq.storage.ledger._cursor import CursorState


def journaled_states(data_dir: Path) -> list[Any]:
    """Every cursor state in the journal, oldest first: what a crash now would keep."""
    out = []
    journal = data_dir / "journal"
    for seq in list_segments(journal):
        for record in SegmentReader(journal / segment_name(seq), seq, 0).records():
            op = from_record(record.ledger_id, record.entry_id, record.data)
            if op is not None and op.kind == CURSOR_PUT:
                out.append(json.loads(op.cursor()[1]))
    return out


async def filled(ml: ManagedLedger, n: int) -> list[Position]:
    return [await ml.append(payload(i)) for i in range(n)]


def test_individual_acks_with_holes_and_mark_delete_across_ledgers(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=4) as storage:
            ml = await storage.open_ledger(TOPIC)
            p = await filled(ml, 10)  # ledgers: p[0..3], p[4..7], p[8..9]
            c = await ml.open_cursor("sub", "earliest")
            assert c.mark_delete_position == Position(p[0].ledger_id, -1)
            assert c.backlog == 10

            c.ack([p[2], p[3], p[5]])
            assert c.mark_delete_position == Position(p[0].ledger_id, -1)
            assert c.individually_acked.ranges() == [(p[2], p[3]), (p[5], p[5])]
            assert c.backlog == 7
            assert [c.is_acked(x) for x in p[:6]] == [False, False, True, True, False, True]

            c.ack([p[0]])
            assert c.mark_delete_position == p[0]
            c.ack([p[1]])  # closes the hole: mark-delete runs to the end of the first ledger
            assert c.mark_delete_position == p[3]
            assert c.individually_acked.ranges() == [(p[5], p[5])]
            c.ack([p[4]])  # the next ledger's first entry continues it
            assert c.mark_delete_position == p[5]
            assert len(c.individually_acked) == 0 and c.backlog == 4

            c.ack([p[8], p[9]])
            c.ack([p[6], p[7]])  # p[7] is its ledger's last entry: mark-delete crosses into p[8]'s
            assert c.mark_delete_position == p[9]
            assert c.backlog == 0
            c.ack([p[3], Position(p[9].ledger_id, 10), Position(99_999, 0)])  # acked, or not in the log
            assert c.mark_delete_position == p[9] and len(c.individually_acked) == 0

    run(main())


def test_cumulative_ack_reset_and_backlog(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, ledger_entries_max=3) as storage:
            ml = await storage.open_ledger(TOPIC)
            p = await filled(ml, 9)
            c = await ml.open_cursor("sub", "earliest")
            c.ack([p[5], p[6], p[8]])
            c.ack_cumulative(p[3])
            assert c.mark_delete_position == p[3]
            assert c.backlog == 2  # p[4] and p[7]
            c.ack_cumulative(p[4])  # and the acked run after it follows
            assert c.mark_delete_position == p[6]
            assert c.individually_acked.ranges() == [(p[8], p[8])]
            c.ack_cumulative(p[2])  # never backwards
            assert c.mark_delete_position == p[6]

            c.set_batch_ack_set(p[7], [0b0110])
            c.reset(p[1])  # seek back: acks after it are forgotten, batch ack sets too
            assert c.mark_delete_position == p[1]
            assert len(c.individually_acked) == 0 and c.batch_ack_set(p[7]) is None
            assert c.backlog == 7
            c.reset(Position(p[0].ledger_id, -1))
            assert c.backlog == 9

            new = await ml.append(b"more")
            assert c.backlog == 10
            latest = await ml.open_cursor("tail", "latest")
            assert latest.mark_delete_position == new and latest.backlog == 0
            await ml.append(b"even more")
            assert latest.backlog == 1

    run(main())


def test_cursors_on_an_empty_topic(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            early = await ml.open_cursor("early", "earliest")
            late = await ml.open_cursor("late", "latest")
            empty = Position(ml.current_ledger_id, -1)
            assert early.mark_delete_position == empty == late.mark_delete_position
            assert early.backlog == 0
            first = await ml.append(b"a")
            assert early.backlog == 1 and late.backlog == 1
            early.ack([first])
            assert early.mark_delete_position == first and early.backlog == 0

    run(main())


def test_batch_ack_sets(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            p = await filled(ml, 5)
            c = await ml.open_cursor("sub", "earliest")
            c.set_batch_ack_set(p[1], [0b1010, -1])
            c.set_batch_ack_set(p[3], [0b1])
            assert c.batch_ack_set(p[1]) == [0b1010, -1]
            assert c.batch_ack_set(p[0]) is None
            c.set_batch_ack_set(p[3], None)
            assert c.batch_ack_set(p[3]) is None
            c.ack([p[2]])  # a fully acked entry has no ack set, and none can be set for it
            c.set_batch_ack_set(p[2], [0b1])
            assert c.batch_ack_set(p[2]) is None
            c.set_batch_ack_set(p[3], [0b11])
            c.ack_cumulative(p[1])  # covers p[1]'s ack set
            assert c.batch_ack_set(p[1]) is None
            assert c.batch_ack_sets == {p[3]: [0b11]}
            c.ack([p[3]])
            assert c.batch_ack_set(p[3]) is None and c.mark_delete_position == p[3]

    run(main())


def test_cursor_state_survives_close_and_reopen(tmp_path: Path) -> None:
    async def main() -> tuple[Position, RangeSet, dict[Position, list[int]]]:
        async with started(tmp_path, ledger_entries_max=4, cursor_persist_interval_s=60) as storage:
            ml = await storage.open_ledger(TOPIC)
            p = await filled(ml, 12)
            c = await ml.open_cursor("sub/with:odd name", "earliest")
            c.ack([p[0], p[1], p[4], p[5], p[9]])
            c.set_batch_ack_set(p[7], [0b101, 7])
            await ml.open_cursor("other", "latest")
            return c.mark_delete_position, c.individually_acked.copy(), c.batch_ack_sets

    mark_delete, acked, batch = run(main())

    async def reopen() -> None:
        async with started(tmp_path, ledger_entries_max=4) as storage:
            ml = await storage.open_ledger(TOPIC)
            assert sorted(ml.cursors) == ["other", "sub/with:odd name"]  # recovered on open
            c = await ml.open_cursor("sub/with:odd name", "latest")  # initial is ignored: it exists
            assert c is ml.cursors["sub/with:odd name"]
            assert c.mark_delete_position == mark_delete
            assert c.individually_acked == acked
            assert c.batch_ack_sets == batch
            assert c.backlog == 12 - 2 - 3
            await ml.delete_cursor("other")
            await ml.delete_cursor("never existed")
        async with started(tmp_path, ledger_entries_max=4) as storage:
            ml = await storage.open_ledger(TOPIC)
            assert list(ml.cursors) == ["sub/with:odd name"]

    run(reopen())


def test_persistence_is_rate_bounded_and_a_crash_only_means_redelivery(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    clock = ManualClock()

    async def main() -> None:
        settings = {"cursor_persist_interval_s": 0.2, "flush_interval_ms": NEVER_MS}
        storage = Storage(config(data_dir, sync_policy="fsync", **settings), clock=clock)
        await storage.start()
        try:
            ml = await storage.open_ledger(TOPIC)
            p = await filled(ml, 200)
            c = await ml.open_cursor("sub", "earliest")
            base = storage.metrics()["velamq_storage_cursor_persists_total"]

            def persists() -> float:
                return storage.metrics()["velamq_storage_cursor_persists_total"] - base

            for x in p[:100]:
                c.ack([x])  # 100 changes ...
            await until(lambda: persists() == 1, "the first change is written")
            assert journaled_states(data_dir)[-1]["mark_delete"] == list(p[99])  # ... one write
            asleep = clock.sleepers  # the write cache's age timer
            c.ack([p[100]])
            c.ack([p[150]])
            await until(lambda: clock.sleepers == asleep + 1, "the next write waits for the interval")
            clock.advance(0.1)  # not yet
            await asyncio.sleep(0)
            assert persists() == 1 and clock.sleepers == asleep + 1
            # Crash now (a copy of the directory as it is): the last acks are not on disk yet.
            shutil.copytree(data_dir, tmp_path / "crashed")
            clock.advance(0.1)  # the interval is over: the dirty cursor is written
            await until(lambda: persists() == 2, "the second round is written")
            doc = journaled_states(data_dir)[-1]
            assert doc["mark_delete"] == list(p[100])
            assert doc["individually_acked"] == [[p[150].ledger_id, 150, 150]]
        finally:
            await storage.close()

        async with started(tmp_path / "crashed") as storage:
            ml = await storage.open_ledger(TOPIC)
            c = ml.cursors["sub"]
            # Behind the live cursor, never ahead of it: p[100] and p[150] are delivered again.
            assert c.mark_delete_position == p[99] and len(c.individually_acked) == 0
            assert c.backlog == 100

    run(main())


def test_a_cursor_ahead_of_a_log_that_lost_its_tail_is_pulled_back(tmp_path: Path) -> None:
    # Only possible without fsync: acknowledged entries lost in a power cut (here: after the
    # checkpoint, so the journal cannot bring them back).
    async def before() -> list[Position]:
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            p = await filled(ml, 6)
            c = await ml.open_cursor("sub", "earliest")
            c.ack([*p[:4], p[5]])
            c.set_batch_ack_set(p[4], [0b1])
            return p

    p = run(before())
    # Damage the index as a power cut could have under sync policy "none": the ledger now ends
    # after entry 1, while the cursor state says more was acknowledged.
    conn = sqlite3.connect(tmp_path / "storage.db")
    conn.execute("UPDATE ledgers SET entries = 2 WHERE id = ?", (p[0].ledger_id,))
    conn.commit()
    conn.close()

    async def after() -> None:
        async with started(tmp_path) as storage:
            ml = await storage.open_ledger(TOPIC)
            c = ml.cursors["sub"]
            assert c.mark_delete_position == p[1]
            assert len(c.individually_acked) == 0 and c.batch_ack_sets == {}
            assert await ml.append(b"new") == p[2]
            assert c.backlog == 1 and not c.is_acked(p[2])

    run(after())


def test_a_cursor_file_with_thousands_of_scattered_acks_stays_small(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(tmp_path, cursor_persist_interval_s=60) as storage:
            ml = await storage.open_ledger(TOPIC)
            p = await filled(ml, 4001)
            c = await ml.open_cursor("sub", "earliest")
            c.ack(p[1::2])  # 2000 acks, every other entry: 2000 holes
            assert c.individually_acked.range_count() == 2000
        conn = sqlite3.connect(tmp_path / "storage.db")
        (state,) = conn.execute("SELECT state FROM cursors WHERE name = 'sub'").fetchone()
        conn.close()
        assert len(state) < 1000
        async with started(tmp_path) as storage:
            c = (await storage.open_ledger(TOPIC)).cursors["sub"]
            assert c.individually_acked.range_count() == 2000 and c.backlog == 2001

    run(main())


def test_format_1_cursor_state_is_still_read() -> None:
    # Cursor files of storage format 1 are migrated as they are (_migrate_v1).
    raw = json.dumps({
        "format": 1, "name": "sub", "mark_delete": [7, 0], "individually_acked": [[7, 2, 3]], "batch_ack_sets": [],
    }).encode()
    state = CursorState.from_json_bytes(raw, "test")
    assert state.mark_delete == Position(7, 0) and state.individually_acked == [[7, 2, 3]]
