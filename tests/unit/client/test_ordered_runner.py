"""One partition of the ordered consumer under random completion orders (OC-1..OC-3).

The partition's consumer is replaced by an in-memory source of messages at the runner's boundary
(PartitionSource: receive / acknowledge / acknowledge_cumulative), so that hypothesis can try
hundreds of interleavings in milliseconds; tests/integration/test_ordered_consumer.py runs the
same rules against a real broker."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wait_helpers import until

from velamq._clock import system_clock
from velamq.client import AlreadyClosedError, Message, MessageId
from velamq.client.ordered._partition import PartitionRunner, PartitionSettings, RetryPolicy
from velamq.client.ordered._progress import worker_of

T = "persistent://public/default/t-partition-0"


class MemorySource:
    """Messages in partition order; records acks and checks the in-flight bound at every receive."""

    def __init__(self, messages: list[Message], max_in_flight: int) -> None:
        self.order = [m.message_id for m in messages]
        self._pending: deque[Message] = deque(messages)
        self.max_in_flight = max_in_flight
        self.taken = 0
        self.acked_upto = -1  # index of the cumulative ack position in self.order
        self.individually_acked: set[MessageId] = set()
        self.completed: set[MessageId] = set()  # filled by the handler
        self.violations: list[str] = []
        self._closed = asyncio.Event()
        self.runner: PartitionRunner  # set by runner_for

    async def receive(self, timeout_ms: int | None = None) -> Message:
        if not self._pending:
            await self._closed.wait()
            raise AlreadyClosedError("closed")
        # The runner hands acks over every few ms; what it holds is what it took minus its prefix.
        held = self.taken - self.runner.acknowledged
        if held >= self.max_in_flight:
            self.violations.append(f"receive with {held} in flight")
        self.taken += 1
        return self._pending.popleft()

    def _check_prefix(self, upto: int) -> None:
        missing = [mid for mid in self.order[: upto + 1] if mid not in self.completed]
        if missing:
            self.violations.append(f"ack up to {self.order[upto]} before {missing[0]} completed")

    async def acknowledge(self, target: Message | MessageId) -> None:
        mid = target.message_id if isinstance(target, Message) else target
        index = self.order.index(mid)
        self._check_prefix(index)
        self.individually_acked.add(mid)

    async def acknowledge_cumulative(self, target: Message | MessageId) -> None:
        mid = target.message_id if isinstance(target, Message) else target
        index = self.order.index(mid)
        self._check_prefix(index)
        if index < self.acked_upto:
            self.violations.append("cumulative ack went backwards")
        self.acked_upto = index

    async def close(self) -> None:
        self._closed.set()


def make_messages(keys: list[str | None]) -> list[Message]:
    return [Message(value=b"%d" % i, message_id=MessageId(3, i // 4, 0, i % 4, 4, topic=T), topic=T, key=k)
            for i, k in enumerate(keys)]


def runner_for(source: MemorySource, call: Callable[[Message], Awaitable[object]], parallelism: int,
               max_in_flight: int, ack_mode: str = "cumulative", unkeyed: str = "ordered") -> PartitionRunner:
    settings_ = PartitionSettings(parallelism, max_in_flight, ack_mode, unkeyed,
                                  RetryPolicy(initial_backoff_ms=0, max_backoff_ms=1), key_window_messages=100)
    source.runner = PartitionRunner(T, 0, source, call, settings_, system_clock, None)
    return source.runner


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(st.sampled_from(["a", "b", "c", "d", "e", None]), min_size=1, max_size=40),
       st.integers(1, 5), st.integers(1, 6), st.sampled_from(["cumulative", "individual"]),
       st.sampled_from(["ordered", "round_robin"]))
def test_order_per_key_and_prefix_acks_under_random_completion(data: st.DataObject, keys: list[str | None],
                                                               parallelism: int, max_in_flight: int, ack_mode: str,
                                                               unkeyed: str) -> None:
    messages = make_messages(keys)
    # How many times each handler call yields, and which calls fail: random completion order.
    yields = data.draw(st.lists(st.integers(0, 6), min_size=len(keys), max_size=len(keys)))
    failing = data.draw(st.sets(st.integers(0, len(keys) - 1), max_size=3))

    async def main() -> None:
        source = MemorySource(messages, max_in_flight)
        running: set[str | None] = set()
        done_per_key: dict[str | None, list[int]] = defaultdict(list)
        failed_once: set[int] = set()
        concurrency = [0, 0]

        async def handle(message: Message) -> None:
            i = int(message.value)
            if message.key is not None or unkeyed == "ordered":
                assert message.key not in running, "two messages of one key at once"
            running.add(message.key)
            concurrency[0] += 1
            concurrency[1] = max(concurrency[1], concurrency[0])
            try:
                for _ in range(yields[i]):
                    await asyncio.sleep(0)
                if i in failing and i not in failed_once:
                    failed_once.add(i)
                    raise RuntimeError("first attempt fails")
            finally:
                running.discard(message.key)
                concurrency[0] -= 1
            done_per_key[message.key].append(i)
            source.completed.add(message.message_id)

        runner = runner_for(source, handle, parallelism, max_in_flight, ack_mode, unkeyed)
        runner.start()
        await until(lambda: runner.acknowledged == len(messages))
        await runner.stop(drain=False, timeout_s=5)
        assert source.violations == []
        for key, done in done_per_key.items():
            if key is not None or unkeyed == "ordered":
                assert done == sorted(done), f"key {key} out of order: {done}"
        assert sorted(i for done in done_per_key.values() for i in done) == list(range(len(messages)))
        m = runner.metrics()
        assert (m.received, m.completed, m.acknowledged, m.in_flight) == (len(messages),) * 3 + (0,)
        assert m.in_flight_max <= max_in_flight and m.max_busy_workers <= parallelism
        # A worker waiting to retry counts as busy: its keys cannot move either.
        assert m.max_busy_workers == concurrency[1] or (failing and m.max_busy_workers >= concurrency[1])
        assert m.handler_failures == m.retries == len(failing)
        if ack_mode == "cumulative":
            assert source.order[source.acked_upto] == messages[-1].message_id
        else:
            assert source.individually_acked == set(source.order)

    asyncio.run(main())


def test_fetching_pauses_when_the_window_is_full_and_resumes_as_workers_drain() -> None:
    async def main() -> None:
        # Keys on four different workers, so that only the head blocks anything.
        distinct = {worker_of(f"k{i}", 4): f"k{i}" for i in range(100)}
        messages = make_messages([distinct[i % 4] for i in range(20)])
        source = MemorySource(messages, max_in_flight=3)
        gate = asyncio.Event()

        async def handle(message: Message) -> None:
            if message.message_id == messages[0].message_id:
                await gate.wait()  # the head of the partition is slow
            source.completed.add(message.message_id)

        runner = runner_for(source, handle, parallelism=4, max_in_flight=3)
        runner.start()
        await until(lambda: runner.metrics().paused)
        m = runner.metrics()
        # The head blocks the prefix: the window is full, nothing more is fetched or acknowledged.
        assert source.taken == 3 and m.in_flight == 3 and m.acknowledged == 0 and m.pauses >= 1
        assert m.completed_behind_head == 2
        for _ in range(50):
            await asyncio.sleep(0)
        assert source.taken == 3
        gate.set()
        await until(lambda: runner.acknowledged == 20)
        await runner.stop(drain=False, timeout_s=5)
        assert source.violations == [] and runner.metrics().in_flight_max == 3

    asyncio.run(main())


def test_stop_without_drain_leaves_unfinished_messages_unacknowledged() -> None:
    async def main() -> None:
        a, b = next((f"a{i}", f"b{i}") for i in range(100) if worker_of(f"a{i}", 2) != worker_of(f"b{i}", 2))
        messages = make_messages([a, a, b])
        source = MemorySource(messages, max_in_flight=10)
        started = asyncio.Event()

        async def handle(message: Message) -> None:
            if message.key == a:
                started.set()
                await asyncio.sleep(3600)
            source.completed.add(message.message_id)

        runner = runner_for(source, handle, parallelism=2, max_in_flight=10, ack_mode="individual")
        runner.start()
        await started.wait()
        await until(lambda: messages[2].message_id in source.completed)
        await runner.stop(drain=False, timeout_s=0.05)
        # b completed but sits behind the unfinished a: nothing was acknowledged.
        assert source.individually_acked == set() and source.violations == []

    asyncio.run(main())


def test_retry_policy_needs_a_dead_letter_topic_to_give_up() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=3)
    policy = RetryPolicy(max_attempts=3, dead_letter_topic="dlq", initial_backoff_ms=100, max_backoff_ms=1000)
    assert [policy.backoff_s(n) for n in (1, 2, 3, 4, 5)] == [0.1, 0.2, 0.4, 0.8, 1.0]
