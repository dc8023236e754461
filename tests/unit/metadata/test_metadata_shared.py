"""One metadata file shared by several stores and processes (docs/workers.md): each store sees the
others' commits through its watcher, no update is lost when two processes write at once; namespace
bundles, the workers' rows and bundle owners."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import shared_writer as sw
from wait_helpers import until

from velamq._bundles import NamespaceBundles
from velamq._errors import NotFoundError, PreconditionFailedError
from velamq.metadata import MetadataStore, WorkerInfo

NS = "public/ns"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "metadata.db"


@asynccontextmanager
async def opened(path: Path, **options: Any) -> AsyncIterator[MetadataStore]:
    store = MetadataStore(path, **options)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


def worker(i: int, tls: bool = False) -> WorkerInfo:
    return WorkerInfo(
        id=i, broker_url=f"pulsar://h:{6660 + i}", broker_url_tls=f"pulsar+ssl://h:{6670 + i}" if tls else None,
        web_url=f"http://h:{8090 + i}", web_url_tls=None, pid=1000 + i, started_ms=1_700_000_000_000 + i,
    )


# ----------------------------------------------------------------------------- the watcher


def test_a_shared_store_sees_another_stores_commits_and_calls_back(db: Path) -> None:
    async def body() -> None:
        async with opened(db, shared=True, watch_interval_s=0.01) as a, \
                opened(db, shared=True, watch_interval_s=0.01) as b:
            await a.create_namespace(NS)
            calls: list[int] = []

            async def changed() -> None:
                calls.append(len(calls))

            b.on_external_change(changed)
            # b caches what it reads: the answers below must change because a wrote, not because
            # b asked the file again (except a 0 for partitions, which a shared store reads again:
            # test_what_another_store_just_made_is_seen_at_once_not_after_the_watch).
            assert (await b.get_policies(NS)).get("deduplicationEnabled") is None
            assert await b.get_partitions(f"persistent://{NS}/p") == 0
            assert await b.get_bundle_owners(NS) == {}
            assert await b.list_workers() == ()

            await a.set_policy(NS, "deduplicationEnabled", True)
            await until(lambda: _policy(b, "deduplicationEnabled"), "b sees a's policy")
            assert calls, "b's callback ran after it saw the change"

            await a.create_partitioned_topic(f"persistent://{NS}/p", 3)
            await until(lambda: _equals(b.get_partitions(f"persistent://{NS}/p"), 3), "b sees the partitions")
            await a.set_bundle_owner(NS, "0x40000000_0x80000000", 1)
            await until(lambda: _equals(b.get_bundle_owners(NS), {"0x40000000_0x80000000": 1}), "b sees the owner")
            await a.register_worker(worker(0))
            await until(lambda: _equals(b.list_workers(), (worker(0),)), "b sees the worker")
            assert b.external_changes_seen >= 1

    run(body)


async def _policy(store: MetadataStore, key: str) -> Any:
    return (await store.get_policies(NS)).get(key)


async def _equals(value: Awaitable[Any], expected: Any) -> bool:
    return await value == expected


def test_commits_that_change_nothing_cached_do_not_drop_caches_nor_call_back(db: Path) -> None:
    async def body() -> None:
        async with opened(db, shared=True, watch_interval_s=0.01) as a, \
                opened(db, shared=True, watch_interval_s=0.01) as b:
            await a.create_namespace(NS)
            await until(lambda: b.external_changes_seen >= 1, "b saw the namespace made")
            calls: list[int] = []

            async def changed() -> None:
                calls.append(len(calls))

            b.on_external_change(changed)
            assert (await b.get_policies(NS)).get("z") is None  # cached
            commits, changes = b.external_commits_seen, b.external_changes_seen
            await asyncio.gather(*(a.open_topic(f"persistent://{NS}/t{i}", create=True) for i in range(50)))
            await a.create_topic(f"persistent://{NS}/plain")
            await until(lambda: b.external_commits_seen > commits, "b's watcher saw a's topic rows")
            assert (b.external_changes_seen, calls) == (changes, [])
            await a.set_policy(NS, "z", 1)
            await until(lambda: _policy(b, "z"), "b sees a's policy")
            assert (b.external_changes_seen, calls) == (changes + 1, [0])

    run(body)


def test_tenant_and_cluster_changes_call_back(db: Path) -> None:
    async def body() -> None:
        async with opened(db, shared=True, watch_interval_s=0.01) as a, \
                opened(db, shared=True, watch_interval_s=0.01) as b:
            calls: list[int] = []

            async def changed() -> None:
                calls.append(len(calls))

            b.on_external_change(changed)
            # Nothing caches tenants, but b's authorization model follows their admin roles.
            await a.create_tenant("acme", {"adminRoles": ["ops"]})
            await until(lambda: calls, "b called back after a made a tenant")
            seen = len(calls)
            await a.create_cluster("east", {"serviceUrl": "http://east:8080"})
            await until(lambda: len(calls) > seen, "b called back after a made a cluster")

    run(body)


def test_a_store_that_is_not_shared_keeps_its_caches(db: Path) -> None:
    async def body() -> None:
        async with opened(db) as a, opened(db, shared=True, watch_interval_s=0.01) as b:
            await a.create_namespace(NS)
            assert (await a.get_policies(NS)).get("x") is None  # cached by a
            await b.set_policy(NS, "x", 1)
            # a runs no watcher: a third store shows b's change is committed, a still answers from
            # its cache until it writes itself (a one-process broker's case).
            async with opened(db) as c:
                assert (await c.get_policies(NS))["x"] == 1
            assert (await a.get_policies(NS)).get("x") is None
            assert a.external_changes_seen == 0

    run(body)


def test_a_failing_callback_does_not_stop_the_others(db: Path) -> None:
    async def body() -> None:
        async with opened(db, shared=True, watch_interval_s=0.01) as a, \
                opened(db, shared=True, watch_interval_s=0.01) as b:
            seen: list[str] = []

            async def fails() -> None:
                raise RuntimeError("listener bug")

            async def records() -> None:
                seen.append("x")

            b.on_external_change(fails)
            b.on_external_change(records)
            await a.create_namespace(NS)
            await until(lambda: seen, "the second callback ran")
            b.remove_external_change(records)
            count = len(seen)
            await a.set_policy(NS, "y", 2)
            await until(lambda: _policy(b, "y"), "b saw the second change")
            assert len(seen) == count

    run(body)


# ----------------------------------------------------------------------------- two processes


def test_two_processes_writing_at_once_lose_nothing(db: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=sw.write_concurrently, args=(str(db), me, barrier)) for me in (0, 1)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(240)
    assert [proc.exitcode for proc in procs] == [0, 0]

    async def check() -> None:
        async with opened(db) as store:
            assert await store.count_topics(sw.NS) == 2 * sw.TOPICS_EACH + sw.COMMON_TOPICS
            parted = await store.list_partitioned_topics(sw.NS)
            assert len(parted) == 2 * sw.PARTITIONED_EACH
            assert {await store.get_partitions(p) for p in parted} == {4}
            policies = await store.get_policies(sw.NS)
            keys = {f"key-{me}-{i}" for me in (0, 1) for i in range(sw.POLICY_KEYS_EACH)}
            assert keys <= set(policies)
            assert policies["counter"] == 2 * sw.INCREMENTS_EACH

    run(check)


# ----------------------------------------------------------------------------- bundles


def test_namespaces_get_their_bundles_at_creation(db: Path) -> None:
    async def body() -> None:
        async with opened(db, default_bundles_count=8) as store:
            assert await store.get_namespace_bundles("public/default") == NamespaceBundles.even(8)
            await store.create_namespace("public/plain")
            await store.create_namespace("public/two", {"bundles": {"numBundles": 2}})
            await store.create_namespace("public/cut", {"bundles": {"boundaries": ["0x00000000", "0x10000000",
                                                                                     "0xffffffff"]}})
            assert (await store.get_policies("public/plain"))["bundles"] == NamespaceBundles.even(8).to_policy()
            assert await store.get_namespace_bundles("public/two") == NamespaceBundles.even(2)
            cut = await store.get_namespace_bundles("public/cut")
            assert [r.name for r in cut.ranges] == ["0x00000000_0x10000000", "0x10000000_0xffffffff"]
            for bad in ({"numBundles": -1}, {"numBundles": 5000}, {"boundaries": ["0x1", "0x0"]}, "four"):
                with pytest.raises(PreconditionFailedError):
                    await store.create_namespace("public/bad", {"bundles": bad})
            with pytest.raises(NotFoundError):
                await store.get_namespace_bundles("public/ghost")
            with pytest.raises(PreconditionFailedError):
                await store.set_policy("public/two", "bundles", None)
        # The count was stored: another default later changes nothing of these namespaces.
        async with opened(db, default_bundles_count=16) as store:
            assert await store.get_namespace_bundles("public/plain") == NamespaceBundles.even(8)
            assert await store.get_namespace_bundles("public/default") == NamespaceBundles.even(8)
            await store.create_namespace("public/later")
            assert await store.get_namespace_bundles("public/later") == NamespaceBundles.even(16)

    run(body)


def test_an_older_file_gains_the_tables_and_its_namespaces_their_bundles(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            INSERT INTO meta VALUES ('schema_version', '4');
            CREATE TABLE tenants (name TEXT PRIMARY KEY, info TEXT NOT NULL);
            INSERT INTO tenants VALUES ('public', '{}');
            CREATE TABLE namespaces (name TEXT PRIMARY KEY, tenant TEXT NOT NULL, policies TEXT NOT NULL);
            INSERT INTO namespaces VALUES ('public/old', 'public', '{"deduplicationEnabled":true}');
        """)

    async def body() -> None:
        async with opened(db) as store:
            assert await store.get_policies("public/old") == {
                "deduplicationEnabled": True, "bundles": NamespaceBundles.even(4).to_policy(),
            }
            await store.register_worker(worker(0))
            assert await store.list_workers() == (worker(0),)

    run(body)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == "5"


# ----------------------------------------------------------------------------- workers and owners


def test_workers_round_trip(db: Path) -> None:
    async def body() -> None:
        async with opened(db) as store:
            assert await store.list_workers() == ()
            for i in (2, 0, 1):
                await store.register_worker(worker(i))
            assert [w.id for w in await store.list_workers()] == [0, 1, 2]
            await store.register_worker(worker(1, tls=True))  # a restarted worker replaces its row
            assert (await store.list_workers())[1] == worker(1, tls=True)
            assert await store.forget_workers_from(1) == 2
            assert await store.list_workers() == (worker(0),)
            with pytest.raises(PreconditionFailedError):
                await store.register_worker(worker(-1))
        async with opened(db) as store:
            assert await store.list_workers() == (worker(0),)

    run(body)


def test_bundle_owners_round_trip(db: Path) -> None:
    async def body() -> None:
        async with opened(db) as store:
            await store.create_namespace(NS, {"bundles": {"numBundles": 2}})
            assert await store.get_bundle_owners(NS) == {}
            await store.set_bundle_owner(NS, "0x00000000_0x80000000", 1)
            await store.set_bundle_owner(NS, "0X80000000_0XFFFFFFFF", 0)  # any case, stored canonical
            await store.set_bundle_owner(NS, "0x00000000_0x80000000", 3)
            owners = await store.get_bundle_owners(NS)
            assert owners == {"0x00000000_0x80000000": 3, "0x80000000_0xffffffff": 0}
            owners.clear()  # a copy
            assert len(await store.get_bundle_owners(NS)) == 2
            for bad in ("0x00000000_0x40000000", "nonsense"):
                with pytest.raises(PreconditionFailedError):
                    await store.set_bundle_owner(NS, bad, 0)
            with pytest.raises(NotFoundError):
                await store.set_bundle_owner("public/ghost", "0x00000000_0xffffffff", 0)
            assert await store.clear_bundle_owners(NS) == 2
            assert await store.get_bundle_owners(NS) == {}
            await store.set_bundle_owner(NS, "0x00000000_0x80000000", 1)
            await store.delete_namespace(NS)  # its owners go with it
            await store.create_namespace(NS, {"bundles": {"numBundles": 2}})
            assert await store.get_bundle_owners(NS) == {}

    run(body)


def test_update_policy_applies_each_change_to_the_latest_value(db: Path) -> None:
    async def body() -> None:
        async with opened(db) as store:
            await store.create_namespace(NS)
            await asyncio.gather(*(store.update_policy(NS, "n", lambda v: (v or 0) + 1) for _ in range(50)))
            assert (await store.get_policies(NS))["n"] == 50
            assert await store.update_policy(NS, "n", lambda v: None) is None
            assert "n" not in await store.get_policies(NS)
            t = f"persistent://{NS}/t"
            await store.create_topic(t)
            await asyncio.gather(*(
                store.update_topic_policy(t, "props", lambda v, i=i: {**(v or {}), str(i): i}) for i in range(20)
            ))
            assert (await store.get_topic_policies(t))["props"] == {str(i): i for i in range(20)}
            with pytest.raises(PreconditionFailedError):
                await store.update_policy(NS, "bundles", lambda v: v)

    run(body)


def test_what_another_store_just_made_is_seen_at_once_not_after_the_watch(db: Path) -> None:
    # A client creates through one worker and goes on through another (create, then produce via
    # the service URL): a "no" or a 0 cached before must not hide it until the next watch.
    async def body() -> None:
        async with opened(db, shared=True, watch_interval_s=3600) as a, \
                opened(db, shared=True, watch_interval_s=3600) as b:
            await a.create_namespace(NS)
            assert await b.get_partitions(f"persistent://{NS}/t") == 0  # cached by b
            assert not await b.namespace_exists("public/later")
            await a.create_partitioned_topic(f"persistent://{NS}/t", 3)
            await a.create_namespace("public/later")
            assert await b.get_partitions(f"persistent://{NS}/t") == 3
            assert await b.namespace_exists("public/later")

    run(body)
