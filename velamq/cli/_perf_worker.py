"""One `velamq perf` worker: a client, its share of producers and consumers, its reports.

A worker runs in the CLI's own process (`--processes 1`) or in a child process. Either way it
talks to its coordinator through a Link: it reports "ready" once every producer and consumer
exists, waits for the common start, then sends a report every interval and a final one. The
interval boundaries are start + k x interval on the monotonic clock, which every process on the
machine shares, so the coordinator can merge interval k of every process.

When a run ends:
- produce: the worker's share of messages is sent (or the duration is over) and every message
  has its receipt or its error;
- consume: the duration is over, or the coordinator says `-m` messages were received in all;
- end-to-end: the producers are done and the consumers received every message sent times the
  number of subscriptions (or `drain_timeout_s` passed since the producers finished);
- any command: the user pressed Ctrl-C (the coordinator then asks every worker to stop).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from velamq.cli._perf_consume import ConsumeSide
from velamq.cli._perf_lean import LeanProduceSide
from velamq.cli._perf_produce import Payloads, ProduceSide
from velamq.cli._perf_stats import LatencyHistogram
from velamq.client import AsyncClient

# How often a worker looks at its stop conditions and publishes its progress.
watch_interval_s: Final = 0.02
# Once a run is stopped (Ctrl-C, the coordinator), how long to wait for the receipts of what was sent.
receipt_wait_after_stop_s: Final = 10.0


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """Everything one worker needs; picklable, so it crosses into a child process."""

    index: int
    command: str  # produce | consume | end-to-end
    service_url: str
    client_options: dict[str, Any] = field(default_factory=dict)
    producer_topics: tuple[str, ...] = ()
    producer_options: dict[str, Any] = field(default_factory=dict)
    payloads: Payloads = field(default_factory=Payloads)
    rate: float = 0.0
    messages: int = 0  # this worker's share of -m (0: no limit)
    subscriptions: tuple[tuple[str, str], ...] = ()  # (topic, subscription) per consumer
    consumer_options: dict[str, Any] = field(default_factory=dict)
    consume_rate: float = 0.0
    consume_messages: int = 0  # stop after this many received (only when this is the only worker)
    duration_s: float = 0.0
    interval_s: float = 10.0
    stamped: bool = False
    drain_timeout_s: float = 10.0
    lean: bool = False  # produce with pre-built SEND frames (_perf_lean.py), not the client
    lean_batch: int = 1  # messages per entry with lean
    lean_window: int = 0  # entries in flight per lean producer


@dataclass(frozen=True, slots=True)
class StopRule:
    """When the whole run is complete, from the totals over every worker (the coordinator's view)."""

    command: str
    consume_messages: int = 0
    subscriptions_per_topic: int = 1

    def complete(self, sent: int, received: int, producers_done: bool) -> bool:
        if self.command == "consume":
            return self.consume_messages > 0 and received >= self.consume_messages
        if self.command == "end-to-end":
            return producers_done and received >= sent * self.subscriptions_per_topic
        return False


class Link(Protocol):
    """A worker's line to its coordinator."""

    def send(self, report: dict[str, Any]) -> None: ...

    async def wait_go(self) -> float:
        """Block until every worker is ready; the common start on the monotonic clock."""
        ...

    def progress(self, sent: int, received: int, producers_done: bool) -> None: ...

    def stop_requested(self) -> bool: ...


class Ticker:
    """Turns the sides' figures into interval reports and the final report."""

    def __init__(self, plan: WorkerPlan, produce: ProduceSide | LeanProduceSide, consume: ConsumeSide, link: Link,
                 start: float) -> None:
        self._plan = plan
        self._produce = produce
        self._consume = consume
        self._link = link
        self._start = start
        self._previous = dict.fromkeys(("sent", "sent_bytes", "failed", "received", "received_bytes"), 0)
        self._previous_s = 0.0
        self._latency = LatencyHistogram()  # the whole run's, to which each interval is added
        self._e2e = LatencyHistogram()

    def _counts(self) -> dict[str, int]:
        p, c = self._produce, self._consume
        return {"sent": p.sent, "sent_bytes": p.sent_bytes, "failed": p.failed, "received": c.received,
                "received_bytes": c.received_bytes}

    def _take_histograms(self) -> tuple[LatencyHistogram, LatencyHistogram]:
        latency, self._produce.latency = self._produce.latency, LatencyHistogram()
        e2e, self._consume.latency = self._consume.latency, LatencyHistogram()
        self._latency.add(latency)
        self._e2e.add(e2e)
        return latency, e2e

    async def run(self) -> None:
        interval = self._plan.interval_s
        if interval <= 0:
            return
        k = 0
        while True:
            k = max(k + 1, int((time.monotonic() - self._start) / interval))
            await asyncio.sleep(max(0.0, self._start + k * interval - time.monotonic()))
            now_s = time.monotonic() - self._start
            counts = self._counts()
            latency, e2e = self._take_histograms()
            self._link.send({
                "kind": "interval", "worker": self._plan.index, "index": k,
                "start_s": self._previous_s, "end_s": now_s,
                "counts": {key: counts[key] - self._previous[key] for key in counts},
                "pending": self._produce.pending, "latency": latency.encode(), "e2e": e2e.encode(),
            })
            self._previous, self._previous_s = counts, now_s

    def final(self, end: float) -> dict[str, Any]:
        self._take_histograms()
        return {
            "kind": "final", "worker": self._plan.index, "elapsed_s": end - self._start,
            "counts": self._counts(), "latency": self._latency.encode(), "e2e": self._e2e.encode(),
            "clamped": self._latency.clamped + self._e2e.clamped,
        }


async def run_worker(plan: WorkerPlan, link: Link) -> None:
    """Set up, wait for the common start, run until the run ends, report, clean up."""
    client = AsyncClient(plan.service_url, **plan.client_options)
    produce: ProduceSide | LeanProduceSide
    if plan.lean:
        produce = LeanProduceSide(plan.service_url, plan.producer_topics, plan.payloads.size, plan.lean_batch,
                                  plan.rate, plan.messages, plan.lean_window)
    else:
        produce = ProduceSide(client, plan.producer_topics, plan.producer_options, plan.payloads, plan.rate,
                              plan.messages, plan.stamped)
    consume = ConsumeSide(client, plan.subscriptions, plan.consumer_options, plan.consume_rate,
                          plan.consume_messages)
    try:
        for what, side in (("consumers", consume), ("producers", produce)):
            try:
                await side.start()  # consumers first: they must not miss the first messages
            except Exception as exc:
                link.send({"kind": "error", "worker": plan.index, "message": f"cannot create the {what} "
                           f"on {plan.service_url}: {type(exc).__name__}: {exc}"})
                return
        link.send({"kind": "ready", "worker": plan.index})
        start = await link.wait_go()
        deadline = start + plan.duration_s if plan.duration_s > 0 else None
        ticker = Ticker(plan, produce, consume, link, start)
        ticking = asyncio.get_running_loop().create_task(ticker.run())
        consume.run()
        producing = asyncio.get_running_loop().create_task(produce.run(deadline))
        await _until_finished(plan, link, produce, consume, producing, deadline)
        produce.stop()
        try:
            await asyncio.wait_for(asyncio.shield(producing), receipt_wait_after_stop_s)
        except TimeoutError:
            link.send({"kind": "error", "worker": plan.index, "message": f"{produce.pending} messages still had "
                       f"no receipt {receipt_wait_after_stop_s:.0f} s after the run was stopped"})
            produce.abandon()
            await producing
        await consume.stop()
        # A produce run ends with its last receipt, not when the watcher next looks.
        end = produce.finished_at if plan.command == "produce" and produce.finished_at else time.monotonic()
        ticking.cancel()
        errors = [e for e in (produce.last_error, consume.last_error) if e]
        if errors and produce.sent + consume.received == 0:
            link.send({"kind": "error", "worker": plan.index, "message": errors[0]})
        link.send(ticker.final(end))
    finally:
        await produce.close()
        await consume.close()
        await client.close()


async def _until_finished(plan: WorkerPlan, link: Link, produce: ProduceSide | LeanProduceSide, consume: ConsumeSide,
                          producing: asyncio.Task[None], deadline: float | None) -> None:
    producers_done_at: float | None = None
    while True:
        producers_done = producing.done()
        link.progress(produce.sent, consume.received, producers_done)
        if link.stop_requested():
            return
        now = time.monotonic()
        if plan.command == "produce" and producers_done:
            return
        if plan.command == "consume" and (consume.reached_target.is_set()
                                          or (deadline is not None and now >= deadline)):
            return
        if plan.command == "end-to-end" and producers_done:
            producers_done_at = producers_done_at or now
            if now - producers_done_at >= plan.drain_timeout_s:
                return
        await asyncio.sleep(watch_interval_s)
