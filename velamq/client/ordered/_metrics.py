"""Metrics of the ordered consumer: how parallel each partition really is (OC-3, OC-4).

ZTO's warning: key-hash parallelism degrades to one worker when one key dominates a
partition, and nothing says so. These figures say so, per partition:

    effective_parallelism   busy-worker-seconds / seconds with at least one busy worker: the
                            time-weighted average of busy workers while the partition has work.
                            N for evenly spread keys with a backlog, 1.0 when one key (or one
                            worker's keys) does all the work, whatever partition_parallelism is.
    utilisation             busy-worker-seconds / (elapsed seconds x N)
    max_busy_workers        the highest number of handlers that ran at the same time
    hottest_key_share       the share of the most frequent key among the last key_window_messages
                            messages (a key holding half the window caps the speed-up near 2)
    busiest_worker_share    the same for the busiest worker; 1 / it bounds the possible speed-up
                            (key_assignment "free_worker": the hottest key's share, the bound there)
    in_flight, in_flight_max, paused, pauses, paused_seconds
                            the window of received-but-unacknowledged messages and its pauses (OC-3)

BusyTracker and KeyWindow are sans-IO: the caller passes the time.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import asdict, dataclass
from typing import Any

from velamq.client.ordered._progress import Position, RoutingKey


class BusyTracker:
    """The number of busy workers over time, integrated (time-weighted)."""

    __slots__ = ("_last_s", "active_seconds", "busy", "busy_worker_seconds", "max_busy", "started_s")

    def __init__(self, now_s: float) -> None:
        self.started_s = now_s
        self._last_s = now_s
        self.busy = 0
        self.max_busy = 0
        self.busy_worker_seconds = 0.0
        self.active_seconds = 0.0  # seconds with at least one busy worker

    def advance(self, now_s: float) -> None:
        dt = max(0.0, now_s - self._last_s)
        self._last_s = max(self._last_s, now_s)
        if self.busy:
            self.busy_worker_seconds += self.busy * dt
            self.active_seconds += dt

    def start(self, now_s: float) -> None:
        self.advance(now_s)
        self.busy += 1
        self.max_busy = max(self.max_busy, self.busy)

    def stop(self, now_s: float) -> None:
        self.advance(now_s)
        self.busy = max(0, self.busy - 1)

    @property
    def effective_parallelism(self) -> float:
        return self.busy_worker_seconds / self.active_seconds if self.active_seconds > 0 else 0.0


class KeyWindow:
    """Keys and workers of the last `size_messages` messages. Adding is per batch and costs no
    Python work per message (two deque.extend); the counts are made when metrics ask for them."""

    __slots__ = ("_keys", "_workers", "size_messages")

    def __init__(self, size_messages: int) -> None:
        self.size_messages = max(1, size_messages)
        self._keys: deque[RoutingKey] = deque(maxlen=self.size_messages)
        self._workers: deque[int] = deque(maxlen=self.size_messages)

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: RoutingKey, worker: int) -> None:
        self._keys.append(key)
        self._workers.append(worker)

    def add_many(self, keys: list[RoutingKey], workers: list[int] | None) -> None:
        """workers None: key_assignment "free_worker", where no worker is bound to a key."""
        self._keys.extend(keys)
        if workers is not None:
            self._workers.extend(workers)

    def hottest_key(self) -> tuple[RoutingKey, float]:
        """(the most frequent key, its share of the window); (None, 0.0) when empty."""
        key, share, _ = self.key_figures()
        return key, share

    def key_figures(self) -> tuple[RoutingKey, float, int]:
        """(the most frequent key, its share, distinct keys): one count of the window."""
        if not self._keys:
            return None, 0.0, 0
        counts = Counter(self._keys)
        key, count = counts.most_common(1)[0]
        return key, count / len(self._keys), len(counts)

    def busiest_worker_share(self) -> float:
        if not self._workers:
            # Free workers: only a key's own messages wait for each other, so the hottest key is
            # what bounds the speed-up.
            return self.key_figures()[1]
        return max(Counter(self._workers).values()) / len(self._workers)

    def distinct_keys(self) -> int:
        return len(set(self._keys))


@dataclass(frozen=True, slots=True)
class OrderedPartitionMetrics:
    """One partition's figures since the ordered consumer started (a snapshot)."""

    topic: str
    partition: int
    parallelism: int
    max_in_flight: int
    received: int
    completed: int
    acknowledged: int
    redeliveries_skipped: int
    in_flight: int
    in_flight_max: int
    completed_behind_head: int
    paused: bool
    pauses: int
    paused_seconds: float
    busy_workers: int
    max_busy_workers: int
    busy_worker_seconds: float
    active_seconds: float
    elapsed_seconds: float
    handler_failures: int
    retries: int
    dead_lettered: int
    hottest_key: str | None
    hottest_key_share: float
    busiest_worker_share: float
    distinct_keys_in_window: int
    last_acknowledged: str | None
    error: str | None

    @property
    def effective_parallelism(self) -> float:
        """Average busy workers while the partition had work (1.0 = serial, N = fully parallel)."""
        return self.busy_worker_seconds / self.active_seconds if self.active_seconds > 0 else 0.0

    @property
    def utilisation(self) -> float:
        if self.elapsed_seconds <= 0:
            return 0.0
        return self.busy_worker_seconds / (self.elapsed_seconds * self.parallelism)

    @property
    def parallelism_bound(self) -> float:
        """What the key mix allows at most: min(N, 1 / busiest_worker_share)."""
        if self.busiest_worker_share <= 0:
            return float(self.parallelism)
        return min(float(self.parallelism), 1.0 / self.busiest_worker_share)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["effective_parallelism"] = self.effective_parallelism
        out["utilisation"] = self.utilisation
        out["parallelism_bound"] = self.parallelism_bound
        return out


@dataclass(frozen=True, slots=True)
class OrderedConsumerMetrics:
    """Every partition's metrics, and totals."""

    topic: str
    subscription: str
    partitions: tuple[OrderedPartitionMetrics, ...]
    elapsed_seconds: float

    @property
    def received(self) -> int:
        return sum(p.received for p in self.partitions)

    @property
    def completed(self) -> int:
        return sum(p.completed for p in self.partitions)

    @property
    def acknowledged(self) -> int:
        return sum(p.acknowledged for p in self.partitions)

    @property
    def in_flight(self) -> int:
        return sum(p.in_flight for p in self.partitions)

    @property
    def handler_failures(self) -> int:
        return sum(p.handler_failures for p in self.partitions)

    @property
    def concurrency(self) -> float:
        """Busy handlers on average over the whole run, all partitions together."""
        if self.elapsed_seconds <= 0:
            return 0.0
        return sum(p.busy_worker_seconds for p in self.partitions) / self.elapsed_seconds

    def partition(self, index: int) -> OrderedPartitionMetrics:
        for p in self.partitions:
            if p.partition == index:
                return p
        raise KeyError(index)

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "subscription": self.subscription, "elapsed_seconds": self.elapsed_seconds,
                "received": self.received, "completed": self.completed, "acknowledged": self.acknowledged,
                "concurrency": self.concurrency, "partitions": [p.as_dict() for p in self.partitions]}


def key_label(key: RoutingKey) -> str | None:
    """A key as metrics show it (ordering keys are bytes)."""
    if key is None or isinstance(key, str):
        return key
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return key.hex()


def id_label(at: Position | None, partition: int) -> str | None:
    """A position as a message id prints: (ledger,entry,partition,batch index)."""
    return None if at is None else f"({at[0]},{at[1]},{partition},{at[2]})"
