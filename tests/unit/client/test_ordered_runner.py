"""One partition of the ordered consumer under random completion orders (OC-1..OC-3).

The partition's consumer is replaced by an in-memory source of messages at the runner's boundary
(PartitionSource: receive / acknowledge / acknowledge_cumulative), so that hypothesis can try
hundreds of interleavings in milliseconds; tests/integration/test_consumer.py runs the
same rules against a real broker."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wait_helpers import until

from velamq._clock import system_clock
from velamq.client import AlreadyClosedError, Message, MessageId
from velamq.client._message import ReceivedBatch, message_at
from velamq.client._message_batch import Messages
from velamq.client.ordered._failures import Failures, RetryPolicy
from velamq.client.ordered._key_workers import AsyncKeyWorkers, ThreadKeyWorkers
from velamq.client.ordered._lanes import AsyncLanes, ThreadLanes
from velamq.client.ordered._partition import LanesFactory, PartitionRunner, PartitionSettings
from velamq.client.ordered._progress import KeyHashes, worker_of
from velamq.protocol import MessageColumns

T = "persistent://public/default/t-partition-0"


class MemorySource:
    """Messages in partition order, in entries of four; hands out ranges of them as the Consumer's
    batch_receive does (at most `chunk` at a time, split inside entries), records acks and checks
    the in-flight bound at every receive."""

    def __init__(self, messages: list[Message], max_in_flight: int, chunk: int = 3) -> None:
        self.order = [m.message_id for m in messages]
        self._pending: deque[tuple[ReceivedBatch, int]] = deque((m._batch, m._j) for m in messages)
        self.max_in_flight = max_in_flight
        self.chunk = chunk
        self.taken = 0
        self.acked_upto = -1  # index of the cumulative ack position in self.order
        self.individually_acked: set[MessageId] = set()
        self.completed: set[MessageId] = set()  # filled by the handler
        self.violations: list[str] = []
        self._closed = asyncio.Event()
        self.runner: PartitionRunner  # set by runner_for

    def _take(self, limit: int) -> list[tuple[ReceivedBatch, int, int]]:
        # What the runner holds is what it took minus its completed prefix.
        held = self.taken - self.runner.acknowledged
        if held + min(limit, len(self._pending)) > self.max_in_flight:
            self.violations.append(f"took {min(limit, len(self._pending))} with {held} in flight")
        ranges: list[tuple[ReceivedBatch, int, int]] = []
        while self._pending and limit > 0:
            batch, j = self._pending.popleft()
            if ranges and ranges[-1][0] is batch and ranges[-1][2] == j:
                ranges[-1] = (batch, ranges[-1][1], j + 1)
            else:
                ranges.append((batch, j, j + 1))
            limit -= 1
            self.taken += 1
        return ranges

    async def batch_receive(self, max_messages: int | None = None, timeout_ms: int | None = None) -> Messages:
        return Messages(self._take(min(max_messages or self.chunk, self.chunk)))

    async def receive(self, timeout_ms: int | None = None) -> Message:
        if not self._pending:
            await self._closed.wait()
            raise AlreadyClosedError("closed")
        batch, j, _ = self._take(1)[0]
        return message_at(batch, j)

    def _check_prefix(self, upto: int) -> None:
        missing = [mid for mid in self.order[: upto + 1] if mid not in self.completed]
        if missing:
            self.violations.append(f"ack up to {self.order[upto]} before {missing[0]} completed")

    async def acknowledge(self, target: Message | MessageId | Messages) -> None:
        targets = list(target) if isinstance(target, Messages) else [target]
        for one in targets:
            mid = one.message_id if isinstance(one, Message) else one
            self._check_prefix(self.order.index(mid))
            if mid in self.individually_acked:
                self.violations.append(f"{mid} acknowledged twice")
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


def make_batches(keys: list[str | None]) -> list[ReceivedBatch]:
    """Entries of four messages; message i's value is i."""
    batches = []
    for e in range(0, len(keys), 4):
        part = keys[e:e + 4]
        payload = b"".join(b"%04d" % i for i in range(e, e + len(part)))
        starts = [4 * k for k in range(len(part))]
        columns = MessageColumns(payload, starts, [s + 4 for s in starts], 4,
                                 None if len(part) == 4 else list(range(len(part))), list(part))
        batches.append(ReceivedBatch(columns, T, 0, 3, e // 4, None, 0, None, 0))
    return batches


def make_messages(keys: list[str | None]) -> list[Message]:
    return [message_at(b, j) for b in make_batches(keys) for j in range(len(b))]


def runner_for(source: MemorySource, call: Callable[[Message], Awaitable[object]], parallelism: int,
               max_in_flight: int, ack_mode: str = "cumulative", unkeyed: str = "ordered",
               assignment: str = "hash") -> PartitionRunner:
    policy = RetryPolicy(initial_backoff_ms=0, max_backoff_ms=1)
    settings_ = PartitionSettings(parallelism, max_in_flight, ack_mode, unkeyed, policy, key_window_messages=100,
                                  key_assignment=assignment)
    failures = Failures(T, policy, None, asyncio.Event())
    lanes: LanesFactory = (lambda runner: AsyncKeyWorkers(runner, call, parallelism, T)) \
        if settings_.free_workers else (lambda runner: AsyncLanes(runner, call, T))
    source.runner = PartitionRunner(T, 0, source, lanes, settings_, system_clock, failures, KeyHashes())
    return source.runner


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(st.sampled_from(["a", "b", "c", "d", "e", None]), min_size=1, max_size=40),
       st.integers(1, 5), st.integers(1, 6), st.sampled_from(["cumulative", "individual"]),
       st.sampled_from(["ordered", "round_robin"]), st.sampled_from(["hash", "free_worker"]))
def test_order_per_key_and_prefix_acks_under_random_completion(data: st.DataObject, keys: list[str | None],
                                                               parallelism: int, max_in_flight: int, ack_mode: str,
                                                               unkeyed: str, assignment: str) -> None:
    messages = make_messages(keys)
    # How many times each handler call yields, and which calls fail: random completion order.
    yields = data.draw(st.lists(st.integers(0, 6), min_size=len(keys), max_size=len(keys)))
    failing = data.draw(st.sets(st.integers(0, len(keys) - 1), max_size=3))
    chunk = data.draw(st.integers(1, 7))  # how much one batch_receive hands over at most

    async def main() -> None:
        source = MemorySource(messages, max_in_flight, chunk)
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

        runner = runner_for(source, handle, parallelism, max_in_flight, ack_mode, unkeyed, assignment)
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
        # A worker counts as busy from when it gets a message until its queue is empty (waiting to
        # retry included: its keys cannot move either), so at least as many as ran at once.
        assert concurrency[1] <= m.max_busy_workers
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


@pytest.mark.parametrize("assignment", ["hash", "free_worker"])
@pytest.mark.parametrize("ack_mode", ["cumulative", "individual"])
def test_thread_lanes_keep_order_per_key_and_retry_in_their_thread(ack_mode: str, assignment: str) -> None:
    keys: list[str | None] = [f"k{i % 7}" for i in range(120)]
    messages = make_messages(keys)
    lock = threading.Lock()
    done_per_key: dict[str | None, list[int]] = defaultdict(list)
    threads: set[int] = set()
    failed: set[int] = set()

    def handle(message: Message) -> None:  # runs in the executor's threads
        i = int(message.value)
        with lock:
            threads.add(threading.get_ident())
            if i % 25 == 3 and i not in failed:
                failed.add(i)
                raise RuntimeError("first attempt fails")
            done_per_key[message.key].append(i)
        source.completed.add(message.message_id)

    source = MemorySource(messages, max_in_flight=16, chunk=5)

    async def main() -> None:
        policy = RetryPolicy(initial_backoff_ms=0, max_backoff_ms=1)
        settings_ = PartitionSettings(4, 16, ack_mode, "ordered", policy, key_window_messages=100,
                                      key_assignment=assignment)
        with concurrent.futures.ThreadPoolExecutor(4) as executor:
            lanes: LanesFactory = (lambda r: ThreadLanes(r, handle, executor)) if assignment == "hash" else \
                (lambda r: ThreadKeyWorkers(r, handle, 4, executor))
            runner = PartitionRunner(T, 0, source, lanes, settings_,
                                     system_clock, Failures(T, policy, None, asyncio.Event()), KeyHashes())
            source.runner = runner
            runner.start()
            await until(lambda: runner.acknowledged == len(messages))
            await runner.stop(drain=False, timeout_s=5)
        m = runner.metrics()
        assert source.violations == []
        assert (m.received, m.completed, m.in_flight, m.handler_failures, m.retries) == (120, 120, 0, 5, 5)
        assert m.max_busy_workers <= 4

    asyncio.run(main())
    for key, done in done_per_key.items():
        assert done == sorted(done), f"key {key} out of order: {done}"
    assert sorted(i for done in done_per_key.values() for i in done) == list(range(120))
    if ack_mode == "cumulative":
        assert source.order[source.acked_upto] == messages[-1].message_id
    else:
        assert source.individually_acked == set(source.order)


@pytest.mark.parametrize("assignment", ["hash", "free_worker"])
@pytest.mark.parametrize("parallelism", [1, 4, 16, 64])
def test_a_hot_key_keeps_the_window_bounded_at_every_parallelism(parallelism: int, assignment: str) -> None:
    # Nine messages in ten have one key: its worker's queue grows, the others' empty, and the
    # window (what the partition holds) stays within max_in_flight all the same (OC-3).
    keys: list[str | None] = ["hot" if i % 10 else f"k{i}" for i in range(400)]
    messages = make_messages(keys)
    source = MemorySource(messages, max_in_flight=12, chunk=7)
    done: list[int] = []

    async def handle(message: Message) -> None:
        await asyncio.sleep(0)
        done.append(int(message.value))
        source.completed.add(message.message_id)

    async def main() -> None:
        runner = runner_for(source, handle, parallelism, max_in_flight=12, assignment=assignment)
        runner.start()
        await until(lambda: runner.acknowledged == len(messages))
        await runner.stop(drain=False, timeout_s=5)
        m = runner.metrics()
        assert source.violations == [] and m.in_flight_max <= 12 and m.pauses >= 1
        assert m.hottest_key == "hot" and m.hottest_key_share == pytest.approx(0.9, abs=0.01)

    asyncio.run(main())
    hot = [i for i in done if i % 10]
    assert hot == sorted(hot) and sorted(done) == list(range(400))


@pytest.mark.parametrize("mode", ["async", "thread"])
def test_free_workers_run_other_keys_while_a_key_that_shares_its_hash_worker_is_stuck(mode: str) -> None:
    # Keys a and b hash to the same worker: with key_assignment "hash", b's messages would wait
    # behind a's stuck one. With "free_worker" another worker runs them; a's later message still
    # waits for a's first (order per key), and the prefix stays behind a's first.
    a, b = next((f"a{i}", f"b{i}") for i in range(1000) if worker_of(f"a{i}", 4) == worker_of(f"b{i}", 4))
    messages = make_messages([a, b, b, a, b, b, b, b])
    source = MemorySource(messages, max_in_flight=8, chunk=8)
    gate = threading.Event()  # the thread handler's
    async_gate = asyncio.Event()  # the coroutine handler's, set with it
    started: list[int] = []

    def record(message: Message) -> None:
        started.append(int(message.value))

    async def handle_async(message: Message) -> None:
        record(message)
        if int(message.value) == 0:
            await async_gate.wait()
        source.completed.add(message.message_id)

    def handle_thread(message: Message) -> None:
        record(message)
        if int(message.value) == 0:
            gate.wait(30)
        source.completed.add(message.message_id)

    async def main() -> None:
        policy = RetryPolicy(initial_backoff_ms=0, max_backoff_ms=1)
        settings_ = PartitionSettings(4, 8, "cumulative", "ordered", policy, key_window_messages=100,
                                      key_assignment="free_worker")
        with concurrent.futures.ThreadPoolExecutor(4) as executor:
            lanes: LanesFactory = (lambda r: AsyncKeyWorkers(r, handle_async, 4, T)) if mode == "async" else \
                (lambda r: ThreadKeyWorkers(r, handle_thread, 4, executor))
            runner = PartitionRunner(T, 0, source, lanes, settings_, system_clock,
                                     Failures(T, policy, None, asyncio.Event()), KeyHashes())
            source.runner = runner
            runner.start()
            b_messages = {messages[i].message_id for i in (1, 2, 4, 5, 6, 7)}
            await until(lambda: b_messages <= source.completed)
            assert 3 not in started  # a's second message waits for a's first
            assert runner.acknowledged == 0 and source.acked_upto == -1
            gate.set()
            async_gate.set()
            await until(lambda: runner.acknowledged == len(messages))
            await runner.stop(drain=False, timeout_s=5)
        assert source.violations == [] and source.order[source.acked_upto] == messages[-1].message_id
        assert started.index(3) > started.index(0)

    asyncio.run(main())
