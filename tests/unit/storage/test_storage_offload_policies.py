"""The offload check under each topic's own policy (TS-1, TS-7): topics nobody has open are walked
from the storage database and offloaded too, opened only while there is work and closed again;
a policy source per topic (the broker's namespace policies) overrides the broker-wide thresholds
and lag, by size, by age, or not at all, and is read again at every check."""

from __future__ import annotations

from pathlib import Path

import pytest
from _offload_entries import mixed_entries, offloading
from _storage_testing import read_everything, run
from test_storage_offload import HOUR_MS, fill, offload_config

from velamq._clock import ManualClock
from velamq.storage import OffloadPolicy, Storage
from velamq.storage.index._storage_db import StoredOffloadSummary
from velamq.storage.offload import _offloader
from velamq.storage.offload._select import Ledger, local_copies_due, may_be_due, stored_due, to_offload

A = "persistent://public/a/t"
B = "persistent://public/b/t"


async def filled(st: Storage, name: str, count: int) -> list[bytes]:
    """A topic with sealed ledgers, then closed, as an unloaded topic is."""
    ml = await st.open_ledger(name)
    entries = mixed_entries(count)
    await fill(ml, entries)
    await ml.close()
    return entries


def offloaded_flags(st: Storage, name: str) -> list[bool]:
    return [i.offloaded_ms is not None for i in st.open_ledgers[name].ledgers()]


def test_topics_nobody_has_open_are_offloaded_and_closed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    root = tmp_path / "tier"
    names = [f"persistent://public/default/t{i}" for i in range(5)]

    async def main() -> None:
        offload = offload_config(root, threshold_bytes=0)
        async with offloading(tmp_path / "d", clock, ledger_entries_max=5, offload=offload) as st:
            everything = {name: await filled(st, name, 12) for name in names}
            await st.flush()
            assert st.open_ledgers == {}
            await st.check_offload()  # pages of 2 names (set below): every page is walked
            assert st.open_ledgers == {}  # each was opened for its offload only
            clock.advance(HOUR_MS / 1000)
            await st.check_offload()  # the lag has passed: the local copies go, still unopened
            assert st.open_ledgers == {}
            assert st.metrics()["velamq_storage_offload_ledgers_total"] == 2 * len(names)
            assert st.metrics()["velamq_storage_offload_local_deleted_total"] == 2 * len(names)
            for name in names:
                ml = await st.open_ledger(name)
                assert [(i.offloaded_ms is not None, i.local) for i in ml.ledgers()] == [
                    (True, False), (True, False), (False, True)]
                st.read_cache.clear()
                assert [d for _, d in await read_everything(st, name)] == everything[name]

    monkeypatch.setattr(_offloader, "check_page_names", 2)
    run(main())


def test_a_topic_opened_while_borrowed_stays_open_for_its_opener(tmp_path: Path) -> None:
    async def main() -> None:
        async with offloading(tmp_path / "d", offload=offload_config(tmp_path / "tier")) as st:
            await filled(st, A, 3)
            directory = st._ledgers  # the offloader's borrowing, driven by hand
            borrowed = await directory.borrow(A)
            assert borrowed is not None
            opened = await st.open_ledger(A)  # a topic loaded meanwhile
            assert opened is borrowed
            await directory.give_back(borrowed)
            assert borrowed.closing_or_closed is None and st.open_ledgers[A] is borrowed
            assert await directory.borrow("persistent://public/default/none") is None
            # Borrowed and given back with nobody else: closed again.
            await borrowed.close()
            again = await directory.borrow(A)
            assert again is not None
            await directory.give_back(again)
            assert A not in st.open_ledgers

    run(main())


def test_each_topic_follows_its_own_policy_read_at_every_check(tmp_path: Path) -> None:
    clock = ManualClock()
    policies: dict[str, OffloadPolicy] = {A: OffloadPolicy(-1, -1, 0), B: OffloadPolicy(-1, 60, -1)}
    asked: list[list[str]] = []

    async def source(names: list[str]) -> dict[str, OffloadPolicy]:
        asked.append(sorted(names))
        return {n: policies[n] for n in names if n in policies}

    async def main() -> None:
        # Broker-wide: offload everything sealed at once; A says never, B after a minute, kept local.
        offload = offload_config(tmp_path / "tier", threshold_bytes=0, deletion_lag_ms=0)
        async with offloading(tmp_path / "d", clock, ledger_entries_max=5, offload=offload) as st:
            st.set_offload_policies(source)
            for name in (A, B):
                await fill(await st.open_ledger(name), mixed_entries(12))
            await st.check_offload()
            assert asked == [[A, B]]
            assert offloaded_flags(st, A) == offloaded_flags(st, B) == [False, False, False]
            clock.advance(61)
            await st.check_offload()
            assert offloaded_flags(st, A) == [False, False, False]
            assert offloaded_flags(st, B) == [True, True, False]
            clock.advance(HOUR_MS)
            await st.check_offload()
            assert all(i.local for i in st.open_ledgers[B].ledgers())  # a negative lag keeps them
            policies[A] = OffloadPolicy(0, -1, 0)  # changed: applies at the next check
            await st.check_offload()
            await st.check_offload()
            assert [(i.offloaded_ms is not None, i.local) for i in st.open_ledgers[A].ledgers()] == [
                (True, False), (True, False), (False, True)]

    run(main())


def ledger(ledger_id: int, size: int, closed_ms: int | None, offloaded_ms: int | None = None,
           local: bool = True) -> Ledger:
    return Ledger(ledger_id, 10, size, closed_ms, offloaded_ms, local)


def test_the_choice_by_size_by_age_and_by_lag() -> None:
    ledgers = [ledger(1, 100, 1_000, offloaded_ms=2_000), ledger(2, 100, 5_000), ledger(3, 100, 9_000),
               ledger(4, 100, None)]
    assert to_offload(ledgers, OffloadPolicy(-1, -1, 0), 10_000) == []
    assert to_offload(ledgers, OffloadPolicy(0, -1, 0), 10_000) == [2, 3]  # never the current one
    assert to_offload(ledgers, OffloadPolicy(150, -1, 0), 10_000) == [2, 3]  # 300 not offloaded > 150
    assert to_offload(ledgers, OffloadPolicy(200, -1, 0), 10_000) == [2]
    assert to_offload(ledgers, OffloadPolicy(-1, 3, 0), 10_000) == [2]  # sealed more than 3 s ago
    assert to_offload(ledgers, OffloadPolicy(-1, 5, 0), 10_000) == []
    assert local_copies_due(ledgers, OffloadPolicy(-1, -1, 8_000), 10_000) == [1]
    assert local_copies_due(ledgers, OffloadPolicy(-1, -1, 8_001), 10_000) == []
    assert local_copies_due(ledgers, OffloadPolicy(-1, -1, -1), 10_000) == []


def test_a_stored_topics_summary_is_due_by_the_same_rules() -> None:
    # As the database sums up the ledgers above: 300 bytes not offloaded, 2 sealed candidates (the
    # oldest sealed at 5 000), one offloaded ledger still local (offloaded at 2 000).
    summary = StoredOffloadSummary("t", 300, 2, 5_000, 2_000)
    idle = StoredOffloadSummary("u", 100, 0, None, None)  # only a current ledger
    assert may_be_due(summary) and not may_be_due(idle)
    assert may_be_due(StoredOffloadSummary("v", 0, 0, None, 2_000))
    assert not stored_due(summary, OffloadPolicy(-1, -1, -1), 10_000)
    assert stored_due(summary, OffloadPolicy(200, -1, -1), 10_000)
    assert not stored_due(summary, OffloadPolicy(300, -1, -1), 10_000)
    assert stored_due(summary, OffloadPolicy(-1, 4, -1), 10_000)  # sealed more than 4 s ago
    assert not stored_due(summary, OffloadPolicy(-1, 5, -1), 10_000)
    assert stored_due(summary, OffloadPolicy(-1, -1, 8_000), 10_000)
    assert not stored_due(summary, OffloadPolicy(-1, -1, 8_001), 10_000)
    assert not stored_due(idle, OffloadPolicy(0, 0, 0), 10_000)
