"""KeyQueue (key_assignment "free_worker"): one message of a key at a time, in arrival order, the
oldest ready message first, and nothing kept for a key that neither runs nor waits."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from velamq.client.ordered._progress import Item, KeyQueue, RoutingKey


def item(ticket: int) -> Item:
    return (ticket, None, ticket)  # type: ignore[arg-type]  # the queue never looks at the batch


@given(st.lists(st.sampled_from(["a", "b", "c", "d", None]), max_size=60),
       st.lists(st.tuples(st.sampled_from(["add", "take", "release"]), st.integers(0, 10)), max_size=200))
def test_one_message_per_key_at_a_time_in_order_oldest_first(keys: list[RoutingKey],
                                                            steps: list[tuple[str, int]]) -> None:
    queue = KeyQueue()
    added = 0
    running: dict[RoutingKey, int] = {}  # key -> ticket running now
    taken: dict[RoutingKey, list[int]] = defaultdict(list)
    waiting: dict[RoutingKey, list[int]] = defaultdict(list)  # the model: tickets per key, in order

    def take() -> None:
        got = queue.take()
        ready = {k: v[0] for k, v in waiting.items() if v and k not in running}
        if got is None:
            assert not ready
            return
        (ticket, _, _), key = got
        assert key not in running, "a key taken twice at once"
        assert ticket == waiting[key].pop(0), "a key's messages out of order"
        assert ticket == min(ready.values()), "not the oldest ready message"
        running[key] = ticket
        taken[key].append(ticket)

    for op, n in steps:
        if op == "add" and added < len(keys):
            queue.add(item(added), keys[added])
            waiting[keys[added]].append(added)
            added += 1
        elif op == "take":
            take()
        elif op == "release" and running:
            key = list(running)[n % len(running)]
            del running[key]
            queue.release(key)
        assert len(queue) == sum(len(v) for v in waiting.values())
        assert queue.ready == sum(1 for k, v in waiting.items() if v and k not in running)
    # Drain: everything added runs once, per key in arrival order, and the table empties.
    while added < len(keys):
        queue.add(item(added), keys[added])
        waiting[keys[added]].append(added)
        added += 1
    while running or queue.ready:
        for key in list(running):
            del running[key]
            queue.release(key)
        while queue.ready:
            take()
    assert len(queue) == 0 and queue.keys == 0 and queue.take() is None
    assert sorted(t for v in taken.values() for t in v) == list(range(len(keys)))
    for key, tickets in taken.items():
        assert tickets == sorted(tickets) and all(keys[t] == key for t in tickets)


def test_a_running_key_waits_and_the_oldest_ready_key_goes_first() -> None:
    queue = KeyQueue()
    for ticket, key in enumerate(["a", "a", "b", "c", "b"]):
        queue.add(item(ticket), key)
    first = queue.take()
    assert first is not None and first[0][0] == 0 and first[1] == "a"
    second = queue.take()  # a's next (1) waits for a's first: b's 2 goes
    assert second is not None and second[0][0] == 2
    queue.release("a")  # now a's 1 is ready and older than c's 3
    third = queue.take()
    assert third is not None and third[0][0] == 1
    assert queue.keys == 3 and queue.ready == 1
