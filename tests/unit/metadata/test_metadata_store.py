"""MetadataStore: every operation and error, defaults, persistence, caches, concurrency (WC-2, WC-4)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from velamq._bundles import NamespaceBundles
from velamq._errors import (
    AlreadyExistsError,
    InvalidTopicNameError,
    MetadataError,
    NotFoundError,
    PreconditionFailedError,
)
from velamq.metadata import MetadataStore, TopicOpen, partitions_max

# Every namespace's policies carry its bundles, the default 4 unless given at creation.
BUNDLES = {"bundles": NamespaceBundles.even(4).to_policy()}

Body = Callable[[MetadataStore], Awaitable[Any]]

T = "persistent://public/default/t"
T_PLAIN = "persistent://public/default/plain"
T_P = "persistent://public/default/p"


def run(path: Path, body: Body) -> Any:
    """Start a store at `path`, run `body(store)`, close the store; all in one event loop."""

    async def main() -> Any:
        store = MetadataStore(path)
        await store.start()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "metadata.db"


# ----------------------------------------------------------------------------- defaults, files


def test_first_start_creates_standalone_public_default(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        assert await s.list_clusters() == ["standalone"]
        assert await s.list_tenants() == ["public"]
        assert await s.get_tenant("public") == {"adminRoles": [], "allowedClusters": ["standalone"]}
        assert await s.list_namespaces("public") == ["public/default"]
        assert await s.namespace_exists("public/default")
        assert await s.get_policies("public/default") == BUNDLES
        assert await s.list_topics("public/default") == []

    run(db, body)
    assert db.exists()


def test_sqlite_file_is_wal_with_full_sync(db: Path) -> None:
    run(db, lambda s: s.list_tenants())
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"meta", "clusters", "tenants", "namespaces", "partitioned_topics", "topics"} <= tables
    finally:
        conn.close()


def test_everything_persists_across_close_and_reopen(db: Path) -> None:
    async def write(s: MetadataStore) -> None:
        await s.create_cluster("other", {"serviceUrl": "http://x"})
        await s.create_tenant("acme", {"adminRoles": ["admin"], "allowedClusters": ["standalone"]})
        await s.create_namespace("acme/orders", {"retention_policies": {"retentionTimeInMinutes": 5}})
        await s.set_policy("acme/orders", "deduplicationEnabled", True)
        await s.create_partitioned_topic("persistent://acme/orders/p", 3)
        await s.create_topic("persistent://acme/orders/p-partition-1")
        await s.create_topic("non-persistent://acme/orders/np")

    async def read(s: MetadataStore) -> None:
        assert await s.list_clusters() == ["other", "standalone"]
        assert await s.get_cluster("other") == {"serviceUrl": "http://x"}
        assert await s.get_tenant("acme") == {"adminRoles": ["admin"], "allowedClusters": ["standalone"]}
        assert await s.get_policies("acme/orders") == {
            **BUNDLES,
            "retention_policies": {"retentionTimeInMinutes": 5},
            "deduplicationEnabled": True,
        }
        assert await s.get_partitions("persistent://acme/orders/p") == 3
        assert await s.list_partitioned_topics("acme/orders") == ["persistent://acme/orders/p"]
        assert await s.list_topics("acme/orders") == [
            "non-persistent://acme/orders/np",
            "persistent://acme/orders/p-partition-1",
        ]

    run(db, write)
    run(db, read)


def test_defaults_come_back_at_restart_like_pulsar_standalone(db: Path) -> None:
    async def delete(s: MetadataStore) -> None:
        await s.delete_namespace("public/default")
        assert not await s.namespace_exists("public/default")

    run(db, delete)
    assert run(db, lambda s: s.namespace_exists("public/default")) is True


def test_unusable_path_fails_start_with_metadata_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")

    async def main() -> None:
        store = MetadataStore(blocker / "metadata.db")
        with pytest.raises((MetadataError, OSError)):
            await store.start()
        await store.close()

    asyncio.run(main())


def test_calls_after_close_raise_metadata_error(db: Path) -> None:
    async def main() -> None:
        store = MetadataStore(db)
        await store.start()
        await store.close()
        await store.close()  # idempotent
        with pytest.raises(MetadataError):
            await store.list_tenants()

    asyncio.run(main())


def test_calls_before_start_raise_metadata_error(db: Path) -> None:
    async def main() -> None:
        with pytest.raises(MetadataError):
            await MetadataStore(db).list_tenants()

    asyncio.run(main())


# ----------------------------------------------------------------------------- clusters, tenants


def test_clusters(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        with pytest.raises(AlreadyExistsError):
            await s.create_cluster("standalone", {})
        with pytest.raises(NotFoundError):
            await s.get_cluster("nope")
        assert await s.get_cluster("standalone") == {}

    run(db, body)


def test_tenant_lifecycle_and_errors(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_tenant("acme", {"adminRoles": ["a", "a", "b"], "extra": 1})
        assert await s.get_tenant("acme") == {"adminRoles": ["a", "b"], "allowedClusters": []}
        with pytest.raises(AlreadyExistsError):
            await s.create_tenant("acme", {})
        await s.update_tenant("acme", {"adminRoles": [], "allowedClusters": ["standalone"]})
        assert (await s.get_tenant("acme"))["allowedClusters"] == ["standalone"]
        assert await s.list_tenants() == ["acme", "public"]
        with pytest.raises(NotFoundError):
            await s.update_tenant("ghost", {})
        with pytest.raises(NotFoundError):
            await s.get_tenant("ghost")
        with pytest.raises(NotFoundError):
            await s.delete_tenant("ghost")
        with pytest.raises(PreconditionFailedError, match="Clusters do not exist"):
            await s.create_tenant("x", {"allowedClusters": ["mars"]})
        with pytest.raises(PreconditionFailedError):
            await s.create_tenant("y", {"adminRoles": "not-a-list"})
        await s.create_namespace("acme/ns")
        with pytest.raises(PreconditionFailedError, match="active namespaces"):
            await s.delete_tenant("acme")
        await s.delete_namespace("acme/ns")
        await s.delete_tenant("acme")
        assert await s.list_tenants() == ["public"]

    run(db, body)


@pytest.mark.parametrize("name", ["", "a/b", "sp ace", "x" * 300, "tab\t"])
def test_bad_tenant_names(db: Path, name: str) -> None:
    async def body(s: MetadataStore) -> None:
        with pytest.raises(InvalidTopicNameError):
            await s.create_tenant(name, {})

    run(db, body)


# ----------------------------------------------------------------------------- namespaces, policies


def test_namespace_lifecycle_and_errors(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        with pytest.raises(NotFoundError, match="Tenant"):
            await s.create_namespace("ghost/ns")
        await s.create_namespace("public/b")
        await s.create_namespace("public/a", {"k": [1, 2]})
        with pytest.raises(AlreadyExistsError):
            await s.create_namespace("public/a")
        assert await s.list_namespaces("public") == ["public/a", "public/b", "public/default"]
        with pytest.raises(NotFoundError):
            await s.list_namespaces("ghost")
        assert await s.get_policies("public/a") == {**BUNDLES, "k": [1, 2]}
        with pytest.raises(NotFoundError):
            await s.get_policies("public/ghost")
        with pytest.raises(NotFoundError):
            await s.delete_namespace("public/ghost")
        await s.delete_namespace("public/b")
        assert not await s.namespace_exists("public/b")

    run(db, body)


@pytest.mark.parametrize("ns", ["public", "public/", "/x", "a/b/c/d", "public/sp ace", "public//x"])
def test_bad_namespace_names(db: Path, ns: str) -> None:
    async def body(s: MetadataStore) -> None:
        with pytest.raises(InvalidTopicNameError):
            await s.create_namespace(ns)
        with pytest.raises(InvalidTopicNameError):
            await s.namespace_exists(ns)

    run(db, body)


def test_v1_namespace_names_are_accepted(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_namespace("public/standalone/old")
        await s.create_topic("persistent://public/standalone/old/t")
        assert await s.list_topics("public/standalone/old") == ["persistent://public/standalone/old/t"]

    run(db, body)


def test_namespace_with_topics_cannot_be_deleted(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_namespace("public/n1")
        await s.create_topic("persistent://public/n1/t")
        with pytest.raises(PreconditionFailedError, match="non empty"):
            await s.delete_namespace("public/n1")
        await s.delete_topic("persistent://public/n1/t")
        await s.create_partitioned_topic("non-persistent://public/n1/p", 2)
        with pytest.raises(PreconditionFailedError):
            await s.delete_namespace("public/n1")
        await s.delete_partitioned_topic("non-persistent://public/n1/p")
        await s.delete_namespace("public/n1")

    run(db, body)


def test_set_policy_sets_replaces_and_removes(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        ns = "public/default"
        await s.set_policy(ns, "deduplicationEnabled", True)
        await s.set_policy(ns, "schema_compatibility_strategy", "FORWARD")
        await s.set_policy(ns, "deduplicationEnabled", False)
        assert await s.get_policies(ns) == {
            **BUNDLES, "deduplicationEnabled": False, "schema_compatibility_strategy": "FORWARD"
        }
        await s.set_policy(ns, "deduplicationEnabled", None)
        await s.set_policy(ns, "never-set", None)
        assert await s.get_policies(ns) == {**BUNDLES, "schema_compatibility_strategy": "FORWARD"}
        with pytest.raises(NotFoundError):
            await s.set_policy("public/ghost", "x", 1)
        with pytest.raises(PreconditionFailedError):
            await s.set_policy(ns, "", 1)

    run(db, body)


# ----------------------------------------------------------------------------- partitioned topics


def test_partitioned_topic_lifecycle(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_partitioned_topic("t", 4)  # short name resolves to persistent://public/default/t
        assert await s.get_partitions(T) == 4
        assert await s.get_partitions("t") == 4
        assert await s.list_partitioned_topics("public/default") == [T]
        with pytest.raises(AlreadyExistsError):
            await s.create_partitioned_topic(T, 2)
        await s.update_partitions(T, 6)
        assert await s.get_partitions(T) == 6
        await s.update_partitions(T, 6)  # same count: nothing to do (as Pulsar)
        with pytest.raises(PreconditionFailedError):
            await s.update_partitions(T, 5)
        with pytest.raises(NotFoundError):
            await s.update_partitions("persistent://public/default/ghost", 5)
        await s.delete_partitioned_topic(T)
        assert await s.get_partitions(T) == 0
        with pytest.raises(NotFoundError):
            await s.delete_partitioned_topic(T)

    run(db, body)


def test_partitioned_topic_errors(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        with pytest.raises(NotFoundError, match="Namespace"):
            await s.create_partitioned_topic("persistent://public/ghost/t", 2)
        for bad in (0, -1, partitions_max + 1):
            with pytest.raises(PreconditionFailedError):
                await s.create_partitioned_topic(T, bad)
        with pytest.raises(PreconditionFailedError):
            await s.create_partitioned_topic(T, True)
        with pytest.raises(PreconditionFailedError, match="-partition-"):
            await s.create_partitioned_topic(T + "-partition-1", 2)
        await s.create_topic("persistent://public/default/plain")
        with pytest.raises(AlreadyExistsError):
            await s.create_partitioned_topic("persistent://public/default/plain", 2)
        with pytest.raises(InvalidTopicNameError):
            await s.create_partitioned_topic("bogus://a/b/c", 2)
        assert await s.get_partitions("persistent://public/default/plain") == 0
        assert await s.get_partitions("persistent://nope/nope/nope") == 0

    run(db, body)


def test_deleting_partitioned_topic_removes_its_partitions_only(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_partitioned_topic(T, 3)
        for i in (0, 2):
            await s.create_topic(f"{T}-partition-{i}")
        await s.create_topic("persistent://public/default/t-partition-x")  # not a partition of t
        await s.create_topic("persistent://public/default/T-partition-0")  # another topic (case)
        await s.create_topic("persistent://public/default/tt-partition-0")
        await s.delete_partitioned_topic(T)
        assert await s.list_topics("public/default") == [
            "persistent://public/default/T-partition-0",
            "persistent://public/default/t-partition-x",
            "persistent://public/default/tt-partition-0",
        ]

    run(db, body)


def test_same_local_name_in_both_domains_is_two_topics(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_partitioned_topic("persistent://public/default/x", 2)
        await s.create_partitioned_topic("non-persistent://public/default/x", 3)
        assert await s.get_partitions("non-persistent://public/default/x") == 3
        assert await s.list_partitioned_topics("public/default") == [
            "non-persistent://public/default/x",
            "persistent://public/default/x",
        ]

    run(db, body)


# ----------------------------------------------------------------------------- topics


def test_topic_lifecycle(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        assert not await s.topic_exists(T)
        await s.create_topic("t")
        assert await s.topic_exists(T)
        with pytest.raises(AlreadyExistsError):
            await s.create_topic(T)
        await s.create_topic(T, exist_ok=True)
        assert await s.list_topics("public/default") == [T]
        await s.delete_topic(T)
        assert not await s.topic_exists(T)
        with pytest.raises(NotFoundError):
            await s.delete_topic(T)

    run(db, body)


def test_topic_errors(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        with pytest.raises(NotFoundError):
            await s.create_topic("persistent://public/ghost/t")
        with pytest.raises(NotFoundError):
            await s.list_topics("public/ghost")
        with pytest.raises(NotFoundError):
            await s.list_partitioned_topics("public/ghost")
        await s.create_partitioned_topic(T, 2)
        for exist_ok in (False, True):
            with pytest.raises(AlreadyExistsError):
                await s.create_topic(T, exist_ok=exist_ok)
        await s.create_topic(f"{T}-partition-1")
        assert await s.list_topics("public/default") == [f"{T}-partition-1"]
        with pytest.raises(InvalidTopicNameError):
            await s.create_topic("persistent://a/b")
        with pytest.raises(InvalidTopicNameError):
            await s.topic_exists("")

    run(db, body)


# ----------------------------------------------------------------------------- caches


def test_partition_cache_follows_writes(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        assert await s.get_partitions(T) == 0  # a cached "not partitioned"
        await s.create_partitioned_topic(T, 2)
        assert await s.get_partitions(T) == 2
        await s.update_partitions(T, 5)
        assert await s.get_partitions(T) == 5
        await s.delete_partitioned_topic(T)
        assert await s.get_partitions(T) == 0

    run(db, body)


def test_namespace_cache_follows_writes(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        assert not await s.namespace_exists("public/n")
        await s.create_namespace("public/n")
        assert await s.namespace_exists("public/n")
        await s.delete_namespace("public/n")
        assert not await s.namespace_exists("public/n")

    run(db, body)


def test_a_read_racing_a_write_does_not_cache_a_stale_answer(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        for n in range(1, 30):
            reads = [asyncio.ensure_future(s.get_partitions(T)) for _ in range(3)]
            if n == 1:
                await s.create_partitioned_topic(T, 1)
            else:
                await s.update_partitions(T, n)
            await asyncio.gather(*reads)
            assert await s.get_partitions(T) == n

    run(db, body)


def test_cache_is_bounded(db: Path) -> None:
    async def main() -> None:
        store = MetadataStore(db, cache_entries_max=10)
        await store.start()
        try:
            for i in range(50):
                await store.create_namespace(f"public/n{i}")
                assert await store.get_partitions(f"public/n{i}/t") == 0
            assert len(store._partitions) <= 10
            await store.create_partitioned_topic("public/n3/t", 2)
            assert await store.get_partitions("public/n3/t") == 2
        finally:
            await store.close()

    asyncio.run(main())


def test_a_million_topics_cost_one_cache_entry_per_namespace(db: Path) -> None:
    """Partition counts and topic policies are cached per namespace, not per topic; a namespace
    with more rows than the cache takes is asked per topic, with the same answers."""
    async def main() -> None:
        store = MetadataStore(db, namespace_rows_max=3)
        await store.start()
        try:
            for i in range(5):
                await store.create_partitioned_topic(f"p{i}", i + 1)
            await store.create_topic("plain")
            await store.set_topic_policy("plain", "messageTTLInSeconds", 7)
            for _ in range(2):  # the first round fills the caches, the second reads them
                assert [await store.get_partitions(f"p{i}") for i in range(5)] == [1, 2, 3, 4, 5]
                assert await store.get_partitions("plain") == 0
                assert await store.get_topic_policies("plain") == {"messageTTLInSeconds": 7}
                assert await store.get_topic_policies("p1") == {}
            assert len(store._partitions) == 1 and store._partitions.lookup("public/default") == (True, None)
            assert store._topic_policies.lookup("public/default") == (True, frozenset({T_PLAIN}))
            await store.set_topic_policy("p1", "messageTTLInSeconds", 9)
            assert await store.get_topic_policies("p1-partition-0") == {"messageTTLInSeconds": 9}
            await store.delete_partitioned_topic("p1")
            assert await store.get_topic_policies("p1") == {}
            assert await store.get_partitions("p1") == 0
        finally:
            await store.close()

    asyncio.run(main())


def test_policy_reads_are_fresh_copies_and_follow_writes(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        first = await s.get_policies("public/default")
        first["messageTTLInSeconds"] = 1  # changing a copy changes nothing stored
        assert await s.get_policies("public/default") == BUNDLES
        await s.set_policy("public/default", "messageTTLInSeconds", 5)
        assert await s.get_policies("public/default") == {**BUNDLES, "messageTTLInSeconds": 5}

    run(db, body)


def test_open_topic_checks_and_creates_in_one_operation(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        assert await s.open_topic("a", create=False) is TopicOpen.NOT_FOUND
        assert not await s.topic_exists("a")
        assert await s.open_topic("a", create=True) is TopicOpen.CREATED
        assert await s.open_topic("a", create=False) is TopicOpen.EXISTS
        assert await s.open_topic("public/nope/a", create=True) is TopicOpen.NO_NAMESPACE
        await s.create_partitioned_topic("p", 2)
        assert await s.open_topic("p", create=True) is TopicOpen.IS_PARTITIONED
        assert await s.open_topic("p-partition-1", create=False) is TopicOpen.CREATED
        assert await s.list_topics("public/default") == ["persistent://public/default/a", f"{T_P}-partition-1"]

    run(db, body)


def test_topic_listings_come_in_pages_of_one_domain(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        await s.create_namespace("public/other")
        names = [f"persistent://public/default/t{i:03d}" for i in range(25)]
        await asyncio.gather(*(s.create_topic(n) for n in names))
        await s.create_topic("non-persistent://public/default/np")
        await s.create_topic("persistent://public/other/x")
        await s.create_namespace("public/default-2")  # a namespace whose name extends the other's
        await s.create_topic("persistent://public/default-2/x")
        pages: list[list[str]] = []
        after = ""
        while page := await s.list_topics_page("public/default", after, 10):
            pages.append(page)
            after = page[-1]
        assert [len(p) for p in pages] == [10, 10, 5] and [n for p in pages for n in p] == names
        assert await s.list_topics_page("public/default", domain="non-persistent") == [
            "non-persistent://public/default/np"]
        assert await s.count_topics("public/default") == 26
        await s.create_partitioned_topic("persistent://public/default/t005x", 2)
        listed = await s.namespace_topic_names("public/default", ("persistent",))
        assert listed == sorted([*names, "persistent://public/default/t005x-partition-0",
                                 "persistent://public/default/t005x-partition-1"])

    run(db, body)


# ----------------------------------------------------------------------------- concurrency


def test_many_coroutines_at_once(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        names = [f"persistent://public/default/c{i}" for i in range(300)]
        await asyncio.gather(*(s.create_topic(n) for n in names))
        # Duplicate creations race: exactly one wins each name.
        results = await asyncio.gather(
            *(s.create_topic(n) for n in names[:50] for _ in range(3)), return_exceptions=True
        )
        assert all(isinstance(r, AlreadyExistsError) for r in results)
        results = await asyncio.gather(
            *(s.create_partitioned_topic(f"p{i % 20}", 2) for i in range(100)), return_exceptions=True
        )
        assert sum(r is None for r in results) == 20
        assert all(r is None or isinstance(r, AlreadyExistsError) for r in results)
        reads = await asyncio.gather(
            *(s.topic_exists(n) for n in names), *(s.get_partitions(f"p{i}") for i in range(20))
        )
        assert reads == [True] * 300 + [2] * 20
        assert len(await s.list_topics("public/default")) == 300

    run(db, body)


def test_in_flight_bound_applies_backpressure_not_errors(db: Path) -> None:
    async def main() -> None:
        store = MetadataStore(db, ops_in_flight_max=4)
        await store.start()
        try:
            await asyncio.gather(*(store.create_topic(f"b{i}") for i in range(200)))
            assert len(await store.list_topics("public/default")) == 200
        finally:
            await store.close()

    asyncio.run(main())


def test_one_failing_operation_does_not_undo_its_batch_mates(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        ops = [s.create_topic("ok1"), s.create_topic("persistent://public/ghost/x"), s.create_topic("ok2")]
        results = await asyncio.gather(*ops, return_exceptions=True)
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], NotFoundError)
        assert await s.topic_exists("ok1") and await s.topic_exists("ok2")

    run(db, body)


def test_close_finishes_queued_operations(db: Path) -> None:
    async def main() -> None:
        store = MetadataStore(db)
        await store.start()
        pending = [asyncio.ensure_future(store.create_topic(f"q{i}")) for i in range(100)]
        await asyncio.sleep(0)  # let them enqueue
        await store.close()
        await asyncio.gather(*pending)

    asyncio.run(main())
    assert len(run(db, lambda s: s.list_topics("public/default"))) == 100


def test_event_loop_is_not_blocked_by_store_work(db: Path) -> None:
    async def body(s: MetadataStore) -> None:
        ticks = 0
        stop = False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await asyncio.gather(*(s.create_topic(f"l{i}") for i in range(200)))
        stop = True
        await task
        assert ticks > 1  # the loop kept running while SQLite worked in its thread

    run(db, body)
