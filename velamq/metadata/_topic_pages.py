"""One page of a namespace's topics, searched and counted in SQLite: the console's topic list (OP-3).

A namespace may hold 100 000 topics and more, so the page is cut in the query and never built from
the whole list. Both tables keep full names ("persistent://t/ns/x") as their primary key, so every
topic of a namespace in one domain lies in one key range:

    "persistent://t/ns/" <= name < "persistent://t/ns0"        ("0" is the character after "/")

The page merges four such ranges (topics and partitioned topics, each in both domains), each read
in key order from the primary-key index, so SQLite merges them without sorting and stops at
offset + limit rows. A search matches a case-insensitive substring of the local name. The range
also holds the topics of a V1 namespace "t/ns/x" ("persistent://t/ns/x/topic"): a local name has
no "/", which tells them apart.

The count of a search scans the namespace's names once; without a search the namespace index
counts. Whole console pages over HTTP on 100 000 topics (benchmarks/console_pages.py): page 1
5 ms, page 1000 26 ms, the last page 52 ms, a search 55-120 ms.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from velamq._errors import NotFoundError
from velamq._topic_name import DOMAINS

# Rows of one page at most: a page is for people, and each row costs the console a stats lookup.
page_rows_max: Final = 500

_MATCH: Final = "instr(substr(name, ?), '/') = 0 AND instr(lower(substr(name, ?)), ?) > 0"


@dataclass(frozen=True, slots=True)
class TopicListing:
    """A page of a namespace's topics, sorted by full name: (name, partitions) with partitions 0
    for a non-partitioned topic or a partition, N for a partitioned topic. `total` counts every
    match, not just this page."""

    namespace: str
    search: str
    offset: int
    total: int
    topics: tuple[tuple[str, int], ...]


def _ranges(ns: str, search: str) -> list[Any]:
    """Bind values for the four ranges: (low, high, local-name start twice, search)."""
    args: list[Any] = []
    for _table in ("topics", "partitioned_topics"):
        for domain in DOMAINS:
            prefix = f"{domain}://{ns}/"
            local_start = len(prefix) + 1  # SQLite's substr counts from 1
            args += [prefix, prefix[:-1] + "0", local_start, local_start, search.lower()]
    return args


def _select(columns: str, table: str) -> str:
    return f"SELECT {columns} FROM {table} WHERE name >= ? AND name < ? AND {_MATCH}"


_PAGE_SQL: Final = " UNION ALL ".join(
    _select(columns, table)
    for table, columns in (("topics", "name, 0"), ("partitioned_topics", "name, partitions"))
    for _ in DOMAINS
) + " ORDER BY name LIMIT ? OFFSET ?"

_COUNT_SQL: Final = "SELECT " + " + ".join(
    f"({_select('count(*)', table)})" for table in ("topics", "partitioned_topics") for _ in DOMAINS
)
# Without a search, the namespace column's index counts exactly and without reading names.
_COUNT_ALL_SQL: Final = (
    "SELECT (SELECT count(*) FROM topics WHERE namespace = ?) "
    "+ (SELECT count(*) FROM partitioned_topics WHERE namespace = ?)"
)


def topics_page(conn: sqlite3.Connection, ns: str, search: str, offset: int, limit: int) -> TopicListing:
    """Runs in the store's SQLite thread. The caller checked the namespace name and the bounds."""
    if conn.execute("SELECT 1 FROM namespaces WHERE name = ?", (ns,)).fetchone() is None:
        raise NotFoundError("Namespace does not exist")
    args = _ranges(ns, search)
    count = conn.execute(_COUNT_SQL, args) if search else conn.execute(_COUNT_ALL_SQL, (ns, ns))
    total = int(count.fetchone()[0])
    rows = conn.execute(_PAGE_SQL, [*args, limit, offset]).fetchall()
    return TopicListing(ns, search, offset, total, tuple((str(name), int(n)) for name, n in rows))
