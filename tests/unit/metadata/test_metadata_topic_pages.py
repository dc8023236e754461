"""MetadataStore.topics_page: the console's topic list, cut, searched and counted in SQLite."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from velamq._errors import InvalidTopicNameError, NotFoundError, PreconditionFailedError
from velamq.metadata import MetadataStore, TopicListing
from velamq.metadata._ops import ensure_defaults
from velamq.metadata._schema import connect
from velamq.metadata._topic_pages import topics_page

NS = "public/default"


def test_pages_searches_and_counts_over_both_tables_and_domains(tmp_path: Path) -> None:
    async def main() -> None:
        store = MetadataStore(tmp_path / "metadata.db")
        await store.start()
        try:
            names = [f"persistent://{NS}/topic-{i:03d}" for i in range(250)]
            for name in names:
                await store.create_topic(name)
            await store.create_partitioned_topic(f"persistent://{NS}/orders", 3)
            await store.create_topic(f"persistent://{NS}/orders-partition-0")  # a partition in use
            await store.create_topic(f"non-persistent://{NS}/Live-Topic")
            # Same key prefix, another namespace: a V1 namespace public/default/x.
            await store.create_namespace("public/default/x")
            await store.create_topic("persistent://public/default/x/topic-999")
            await store.create_namespace("public/other")
            await store.create_topic("persistent://public/other/topic-000")

            every = sorted([*names, f"persistent://{NS}/orders", f"persistent://{NS}/orders-partition-0",
                            f"non-persistent://{NS}/Live-Topic"])
            first = await store.topics_page(NS, limit=50)
            assert first.total == 253 and first.offset == 0
            assert [name for name, _ in first.topics] == every[:50]
            assert first.topics[0] == (f"non-persistent://{NS}/Live-Topic", 0)  # the domain sorts first

            second = await store.topics_page(NS, offset=50, limit=50)
            assert [name for name, _ in second.topics] == every[50:100]
            last = await store.topics_page(NS, offset=250, limit=50)
            assert [name for name, _ in last.topics] == every[250:]
            assert (await store.topics_page(NS, offset=300)).topics == ()

            orders = await store.topics_page(NS, search="ORDERS")  # any case
            assert orders == TopicListing(NS, "ORDERS", 0, 2, (
                (f"persistent://{NS}/orders", 3), (f"persistent://{NS}/orders-partition-0", 0),
            ))
            narrowed = await store.topics_page(NS, search="topic-12")
            assert narrowed.total == 10 and narrowed.topics[0][0] == f"persistent://{NS}/topic-120"
            # The search looks at the local name only, not at the domain or the namespace.
            assert (await store.topics_page(NS, search="persistent")).total == 0
            assert (await store.topics_page(NS, search="default")).total == 0
            # LIKE's wildcards are plain characters here.
            assert (await store.topics_page(NS, search="%")).total == 0
            assert (await store.topics_page(NS, search="_")).total == 0

            assert (await store.topics_page("public/other")).total == 1
            assert (await store.topics_page("public/default/x")).topics == (
                ("persistent://public/default/x/topic-999", 0),
            )
            with pytest.raises(NotFoundError):
                await store.topics_page("public/nope")
            with pytest.raises(InvalidTopicNameError):
                await store.topics_page("not a namespace")
            for offset, limit in ((-1, 10), (0, 0), (0, 501)):
                with pytest.raises(PreconditionFailedError):
                    await store.topics_page(NS, offset=offset, limit=limit)
        finally:
            await store.close()

    asyncio.run(main())


_local = st.text(alphabet="abAB-_%.x", min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    topics=st.sets(st.tuples(st.sampled_from(["persistent", "non-persistent"]), _local), max_size=25),
    partitioned=st.sets(_local, max_size=5),
    search=st.text(alphabet="abAB-_%x", max_size=2),
    offset=st.integers(0, 30),
    limit=st.integers(1, 12),
)
def test_a_page_is_the_slice_of_the_sorted_filtered_list(
    topics: set[tuple[str, str]], partitioned: set[str], search: str, offset: int, limit: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        conn = connect(Path(tmp) / "metadata.db")
        try:
            conn.execute("BEGIN")
            ensure_defaults(conn)
            rows = {f"{d}://{NS}/{local}": 0 for d, local in topics}
            conn.executemany("INSERT INTO topics VALUES (?, ?, 0)", [(name, NS) for name in rows])
            for local in partitioned:
                name = f"persistent://{NS}/p{local}"
                if name not in rows:
                    rows[name] = 2
                    conn.execute("INSERT INTO partitioned_topics VALUES (?, ?, 2)", (name, NS))
            conn.execute("COMMIT")
            expected = sorted(
                (name, n) for name, n in rows.items() if search.lower() in name.rsplit("/", 1)[1].lower()
            )
            page = topics_page(conn, NS, search, offset, limit)
            assert page.total == len(expected)
            assert list(page.topics) == expected[offset : offset + limit]
        finally:
            conn.close()
