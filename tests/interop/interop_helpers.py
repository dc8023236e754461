"""Helpers for the interop tests: the official `pulsar-client` against a velamq broker.

Kept in a uniquely named module (not conftest) so test modules can import plain functions.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import pulsar
from wait_helpers import wait_until

# Receive timeout for a message that is expected to arrive (ms).
receive_timeout_ms = 10_000
# How long to wait for a message that must NOT arrive before concluding it did not (ms).
quiet_ms = 600


def full_name(topic: str) -> str:
    return f"persistent://public/default/{topic}"


def receive_n(consumer: Any, n: int, timeout_ms: int = receive_timeout_ms) -> list[Any]:
    """Receive exactly n messages (each within timeout_ms) or fail saying how many came."""
    out: list[Any] = []
    for _ in range(n):
        try:
            out.append(consumer.receive(timeout_ms))
        except pulsar.Timeout:
            raise AssertionError(f"received {len(out)} of {n} messages, then nothing for {timeout_ms} ms") from None
    return out


def read_n(reader: Any, n: int, timeout_ms: int = receive_timeout_ms) -> list[Any]:
    out: list[Any] = []
    for _ in range(n):
        try:
            out.append(reader.read_next(timeout_ms))
        except pulsar.Timeout:
            raise AssertionError(f"read {len(out)} of {n} messages, then nothing for {timeout_ms} ms") from None
    return out


def drain(consumer: Any, idle_ms: int = quiet_ms) -> list[Any]:
    """Receive until nothing arrives for idle_ms."""
    out: list[Any] = []
    while True:
        try:
            out.append(consumer.receive(idle_ms))
        except pulsar.Timeout:
            return out


def read_to_end(reader: Any, timeout_ms: int = receive_timeout_ms) -> list[Any]:
    """Read until the broker says nothing is left (has_message_available asks it for the topic's
    last message id): a read that times out is no proof of the end while a restarted broker
    still recovers on a loaded machine."""
    out: list[Any] = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_ms))
    return out


def assert_no_more(consumer: Any, wait_ms: int = quiet_ms) -> None:
    try:
        extra = consumer.receive(wait_ms)
    except pulsar.Timeout:
        return
    raise AssertionError(f"unexpected extra message {extra.data()[:60]!r} id={extra.message_id()}")


def ack_all(consumer: Any, msgs: Sequence[Any]) -> None:
    for m in msgs:
        consumer.acknowledge(m)


def close_after_kill(client: Any) -> None:
    """Close an official client whose broker was just killed. close() may report that a producer or
    consumer could not be closed there (NotConnected, depending on whether the client already saw
    the connection drop); the client shuts down all the same."""
    try:
        client.close()
    except pulsar.PulsarException:
        pass


def datas(msgs: Sequence[Any]) -> list[bytes]:
    return [m.data() for m in msgs]


class SendTracker:
    """Callbacks for send_async that record (result, message id) per message index."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.results: list[Any] = [None] * n
        self.ids: list[Any] = [None] * n
        self.order: list[int] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._count = 0
        self._ok = 0

    def callback(self, i: int) -> Callable[[Any, Any], None]:
        def cb(res: Any, msg_id: Any) -> None:
            with self._lock:
                self.results[i] = res
                self.ids[i] = msg_id
                self.order.append(i)
                self._count += 1
                if res == pulsar.Result.Ok:
                    self._ok += 1
                if self._count == self.n:
                    self._done.set()

        return cb

    @property
    def completed(self) -> int:
        with self._lock:
            return self._count

    @property
    def ok_count(self) -> int:
        with self._lock:
            return self._ok

    def ok_indexes(self) -> list[int]:
        with self._lock:
            return [i for i, r in enumerate(self.results) if r == pulsar.Result.Ok]

    def wait(self, timeout_s: float = 20.0) -> None:
        if not self._done.wait(timeout_s):
            raise AssertionError(f"only {self.completed} of {self.n} send callbacks fired in {timeout_s} s")


def collect_concurrently(consumers: Sequence[Any], n: int, timeout_s: float = 30.0,
                         ack: bool = True) -> list[list[Any]]:
    """Receive on every consumer in its own thread until n messages came in total (or timeout).

    Returns the messages each consumer received, in the order it received them.
    """
    got: list[list[Any]] = [[] for _ in consumers]
    errors: list[BaseException] = []
    lock = threading.Lock()
    total = [0]
    stop = threading.Event()

    def run(idx: int) -> None:
        c = consumers[idx]
        try:
            while not stop.is_set():
                try:
                    m = c.receive(100)
                except pulsar.Timeout:
                    continue
                got[idx].append(m)
                if ack:
                    c.acknowledge(m)
                with lock:
                    total[0] += 1
                    if total[0] >= n:
                        stop.set()
        except BaseException as e:
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(consumers))]
    for t in threads:
        t.start()
    stop.wait(timeout_s)
    stop.set()
    for t in threads:
        t.join(5)
    if errors:
        raise errors[0]
    return got


# --- admin REST ---------------------------------------------------------------------------------------

def http(method: str, url: str, body: str | None = None, timeout_s: float = 10.0) -> tuple[int, str]:
    """(status, body text) of an HTTP call; HTTP errors are returned, not raised."""
    data = body.encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def create_partitioned_topic(admin_url: str, topic: str, partitions: int) -> int:
    """PUT .../partitions with body "N" (as the official tests do); returns the HTTP status."""
    url = f"{admin_url}/admin/v2/persistent/public/default/{topic}/partitions"
    status, text = http("PUT", url, json.dumps(partitions))
    assert status in (200, 204, 409), f"creating partitioned topic: HTTP {status} {text[:200]}"
    return status


def subscription_stats(admin_url: str, topic: str, subscription: str) -> dict[str, Any] | None:
    """The subscription's part of the topic's stats (None: no such topic or subscription)."""
    status, text = http("GET", f"{admin_url}/admin/v2/persistent/public/default/{topic}/stats")
    if status != 200:
        return None
    found: dict[str, Any] | None = json.loads(text).get("subscriptions", {}).get(subscription)
    return found


def subscription_backlog(admin_url: str, topic: str, subscription: str) -> int | None:
    stats = subscription_stats(admin_url, topic, subscription)
    return None if stats is None else int(stats["msgBacklog"])


def wait_for_backlog(admin_url: str, topic: str, subscription: str, backlog: int, timeout_s: float = 30.0) -> None:
    """Wait until the broker has applied acknowledgements: the subscription's backlog is `backlog`."""
    seen: list[int | None] = []

    def reached() -> bool:
        seen.append(subscription_backlog(admin_url, topic, subscription))
        return seen[-1] == backlog

    wait_until(reached, lambda: f"a backlog of {backlog} on {subscription} (the last one seen: {seen[-1]})",
               timeout_s=timeout_s)
