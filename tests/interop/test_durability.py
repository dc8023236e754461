"""ME-6: a receipt means durable. Produce with the official client, SIGKILL the broker, start
it again on the same data dir: every acknowledged message is there exactly once, in order."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from interop_helpers import SendTracker, close_after_kill, read_to_end
from wait_helpers import wait_until

from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(180)

# Fixed seed: the moment of the kill (as a number of confirmed messages) is the same on every run.
kill_seed = 20240601
in_flight = 1000


def payload(i: int) -> bytes:
    return b"durable-%08d-" % i + b"x" * 80


def index_of(data: bytes) -> int:
    return int(data.split(b"-")[1])


def test_sync_sends_survive_kill_9(fresh_broker: BrokerProcess, make_client: Any, topic: str) -> None:
    n = 300
    client = make_client(fresh_broker.service_url)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(payload(i)) for i in range(n)]
    fresh_broker.kill()
    close_after_kill(client)
    fresh_broker.start()

    client2 = make_client(fresh_broker.service_url)
    reader = client2.create_reader(topic, pulsar.MessageId.earliest)
    msgs = read_to_end(reader)
    assert len(msgs) == n, f"read {len(msgs)} of {n} acknowledged messages after kill -9"
    assert [m.data() for m in msgs] == [payload(i) for i in range(n)]
    assert [m.message_id() for m in msgs] == ids

    # The log continues after recovery: new entries go after every recovered one.
    after_id = client2.create_producer(topic).send(b"after-restart")
    assert after_id > ids[-1]
    assert reader.read_next(10_000).data() == b"after-restart"


def test_batched_sync_flushes_survive_kill_9(fresh_broker: BrokerProcess, make_client: Any, topic: str) -> None:
    client = make_client(fresh_broker.service_url)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                                      compression_type=pulsar.CompressionType.LZ4)
    n = 1000
    tracker = SendTracker(n)
    for i in range(n):
        producer.send_async(payload(i), tracker.callback(i))
    producer.flush()
    tracker.wait()
    assert len(tracker.ok_indexes()) == n
    fresh_broker.kill()
    close_after_kill(client)
    fresh_broker.start()
    reader = make_client(fresh_broker.service_url).create_reader(topic, pulsar.MessageId.earliest)
    msgs = read_to_end(reader)
    assert [m.data() for m in msgs] == [payload(i) for i in range(n)]
    assert [m.message_id() for m in msgs] == tracker.ids


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_send_async_kill_9_mid_stream(fresh_broker: BrokerProcess, make_client: Any, topic: str,
                                      batching: bool) -> None:
    """SIGKILL at a random moment of an async stream: what the client saw confirmed is all there.

    The stored messages are a prefix of the stream (a torn tail is cut, never a hole), at least as
    long as the last confirmed message, with no duplicates (the client is closed at once, so nothing
    is resent after the restart).
    """
    n = 200_000
    rng = random.Random(kill_seed + batching)
    kill_after_confirmed = rng.randint(2_000, 8_000)

    client = make_client(fresh_broker.service_url)
    # The client's own queue never fills (a full queue fails the callback, which would leave a hole the
    # broker is not to blame for): in-flight messages are bounded here, by a semaphore.
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_publish_delay_ms=2, max_pending_messages=4 * in_flight,
        block_if_queue_full=False, send_timeout_millis=60_000,
    )
    tracker = SendTracker(n)
    permits = threading.Semaphore(in_flight)
    stop = threading.Event()
    sent = [0]

    def release_after(cb: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        def wrapped(res: Any, msg_id: Any) -> None:
            cb(res, msg_id)
            permits.release()

        return wrapped

    def sender() -> None:
        for i in range(n):
            while not permits.acquire(timeout=0.05):
                if stop.is_set():
                    return
            if stop.is_set():
                return
            try:
                producer.send_async(payload(i), release_after(tracker.callback(i)))
            except pulsar.PulsarException:
                return  # closed under us
            sent[0] = i + 1

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    try:
        wait_until(lambda: tracker.ok_count >= kill_after_confirmed,
                   lambda: f"{kill_after_confirmed} sends confirmed before the kill (only {tracker.ok_count})",
                   timeout_s=60, interval_s=0.002)
    finally:
        fresh_broker.kill()
        stop.set()
        t.join(10)
        client.close()  # fails what is pending; nothing is resent to the restarted broker
    confirmed = tracker.ok_indexes()
    assert confirmed, "nothing confirmed before the kill"

    fresh_broker.start()
    reader = make_client(fresh_broker.service_url).create_reader(topic, pulsar.MessageId.earliest)
    stored = [index_of(m.data()) for m in read_to_end(reader)]
    gap = next((k for k, v in enumerate(stored) if k != v), None)
    assert gap is None, (
        f"stored messages are not a gap-free prefix of the stream: position {gap} holds message "
        f"{stored[gap]}; send callback of message {gap}: {tracker.results[gap]}"
    )
    missing = sorted(set(confirmed) - set(stored))
    assert not missing, f"{len(missing)} confirmed messages lost, first {missing[:10]}"
    assert len(stored) >= max(confirmed) + 1
    assert len(stored) <= sent[0]
    print(f"sent {sent[0]}, confirmed {len(confirmed)}, stored after kill -9: {len(stored)}")
