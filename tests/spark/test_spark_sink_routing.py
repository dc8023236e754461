"""The sink's bulk routing (velamq/spark/_sink.py) against its per-row definition, with hypothesis:
a keyed row goes to signSafeMod(BoostHash(key), partitions), an unkeyed one to
(row index in the task + task partition) % partitions, rows keep their order within a partition.
No Spark session: the routing is plain code."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from velamq.client import boost_hash, sign_safe_mod
from velamq.spark._options import SinkOptions
from velamq.spark._schema import SinkColumns
from velamq.spark._sink import _Writer


def expected(keys: list[str | None], rows_before: int, task: int, n: int) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for j, key in enumerate(keys):
        index = sign_safe_mod(boost_hash(key), n) if key else (rows_before + j + task) % n
        out.setdefault(index, []).append(j)
    return out


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(st.none() | st.sampled_from(["", "a", "b", "k1", "k22", "user-7"]), max_size=40),
       keyed=st.booleans(), partitions=st.integers(min_value=1, max_value=6),
       rows_before=st.integers(min_value=0, max_value=10_000), task=st.integers(min_value=0, max_value=7))
def test_route_matches_the_per_row_rule(keys: list[str | None], keyed: bool, partitions: int, rows_before: int,
                                        task: int) -> None:
    if not keys:
        return
    writer = _Writer(SinkOptions("pulsar://localhost:1", "http://localhost:1", "t"), "p", task, 0)
    columns = SinkColumns([b""] * len(keys), keys if keyed else None, None, None, None)
    routed = writer._route(partitions, {}, columns, range(len(keys)), rows_before)
    got = {index: list(rows) for index, rows in routed.items() if len(rows)}
    if partitions == 1:
        assert got == {0: list(range(len(keys)))}
        return
    assert got == expected(keys if keyed else [None] * len(keys), rows_before, task, partitions)
