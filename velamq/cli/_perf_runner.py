"""Runs the workers of a `velamq perf` run: in this process, or one child process each.

One process: the worker runs on this process's event loop and hands its reports straight to the
Aggregator; Ctrl-C asks it to stop, and it still prints its summary.

Several processes (`--processes N`, to use more than one core: one Python process drives about
one core): each worker is a spawned child with its own client and event loop. The children put
their reports on one queue; the coordinator (this process, no event loop) reads it, starts every
child at the same instant once all are ready, watches the shared progress counters for the end of
a consume or end-to-end run, and on Ctrl-C sets the stop flag the children poll. Children ignore
SIGINT themselves, so a Ctrl-C in the terminal (which reaches the whole process group) ends the
run through the coordinator, with every child's final report and the merged summary.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import queue
import signal
import sys
import time
from collections.abc import Sequence
from multiprocessing.context import SpawnProcess
from typing import Any, Final

from velamq.cli._perf_report import Aggregator
from velamq.cli._perf_worker import StopRule, WorkerPlan, run_worker

# How often the coordinator looks at the queue, the progress counters and its children.
coordinator_poll_s: Final = 0.02
# How long a child may take to exit after its final report before it is terminated.
child_exit_timeout_s: Final = 10.0


class InProcessLink:
    """The Link of the lone worker: reports go straight to the Aggregator."""

    def __init__(self, aggregator: Aggregator, rule: StopRule) -> None:
        self._aggregator = aggregator
        self._rule = rule
        self._complete = False
        self.interrupted = False

    def send(self, report: dict[str, Any]) -> None:
        self._aggregator.accept(report)

    async def wait_go(self) -> float:
        return time.monotonic()

    def progress(self, sent: int, received: int, producers_done: bool) -> None:
        self._complete = self._rule.complete(sent, received, producers_done)

    def stop_requested(self) -> bool:
        return self.interrupted or self._complete


def run_in_process(plan: WorkerPlan, rule: StopRule, aggregator: Aggregator) -> None:
    link = InProcessLink(aggregator, rule)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, lambda: setattr(link, "interrupted", True))
        try:
            await run_worker(plan, link)
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    try:
        asyncio.run(main())
    except Exception as exc:
        aggregator.accept({"kind": "error", "worker": plan.index, "message": f"{type(exc).__name__}: {exc}"})


class ProcessLink:
    """The Link of a child worker: a queue up, shared flags and counters down."""

    def __init__(self, index: int, reports: Any, go: Any, start: Any, stop: Any, progress: Any) -> None:
        self._index = index
        self._reports = reports
        self._go = go
        self._start = start
        self._stop = stop
        self._progress = progress

    def send(self, report: dict[str, Any]) -> None:
        self._reports.put(report)

    async def wait_go(self) -> float:
        await asyncio.get_running_loop().run_in_executor(None, self._go.wait)
        return float(self._start.value)

    def progress(self, sent: int, received: int, producers_done: bool) -> None:
        # Three slots per worker, written only by that worker: no lock needed.
        base = 3 * self._index
        self._progress[base] = sent
        self._progress[base + 1] = received
        self._progress[base + 2] = 1 if producers_done else 0

    def stop_requested(self) -> bool:
        # A parent that is gone (killed) cannot set stop: the worker then stops by itself rather
        # than run on as an orphan.
        parent = multiprocessing.parent_process()
        return bool(self._stop.is_set()) or (parent is not None and not parent.is_alive())


def child_main(plan: WorkerPlan, reports: Any, go: Any, start: Any, stop: Any, progress: Any) -> None:
    """Entry point of a spawned worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    link = ProcessLink(plan.index, reports, go, start, stop, progress)
    try:
        asyncio.run(run_worker(plan, link))
    except BaseException as exc:
        reports.put({"kind": "error", "worker": plan.index, "message": f"{type(exc).__name__}: {exc}"})


def run_in_processes(plans: Sequence[WorkerPlan], rule: StopRule, aggregator: Aggregator) -> None:
    ctx = multiprocessing.get_context("spawn")
    reports = ctx.Queue()
    go, stop = ctx.Event(), ctx.Event()
    start = ctx.Value("d", 0.0, lock=False)
    progress = ctx.Array("q", 3 * len(plans), lock=False)
    children: list[SpawnProcess] = [
        ctx.Process(target=child_main, args=(plan, reports, go, start, stop, progress), daemon=True,
                    name=f"velamq-perf-{plan.index}")
        for plan in plans
    ]
    for child in children:
        child.start()
    # Ctrl-C only sets a flag that the coordinating loop reads: a KeyboardInterrupt raised at any
    # point could land inside a queue operation and leave its lock held (a run that never ends).
    interrupted: list[bool] = []
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    try:
        _coordinate(children, reports, go, start, stop, progress, rule, aggregator, interrupted)
    finally:
        signal.signal(signal.SIGINT, previous)
        stop.set()
        for child in children:
            child.join(child_exit_timeout_s)
            if child.is_alive():
                child.terminate()
                child.join()


def _coordinate(children: list[SpawnProcess], reports: Any, go: Any, start: Any, stop: Any, progress: Any,
                rule: StopRule, aggregator: Aggregator, interrupted: list[bool]) -> None:
    n = len(children)
    while not aggregator.finished:
        try:
            if interrupted and not stop.is_set():
                stop.set()
                _go(go, start)
            try:
                aggregator.accept(reports.get(timeout=coordinator_poll_s))
                continue
            except queue.Empty:
                pass
            if aggregator.errors and not stop.is_set():
                stop.set()  # one worker cannot run: stop the others, report what they did
                _go(go, start)
            if not go.is_set() and len(aggregator.ready) == n:
                _go(go, start)
            sent = sum(progress[3 * i] for i in range(n))
            received = sum(progress[3 * i + 1] for i in range(n))
            producers_done = all(progress[3 * i + 2] for i in range(n))
            if go.is_set() and rule.complete(sent, received, producers_done):
                stop.set()
            for i, child in enumerate(children):
                if not child.is_alive():
                    _drain(reports, aggregator)
                    aggregator.worker_gone(i, f"exited with code {child.exitcode} before its final report")
        except KeyboardInterrupt:
            stop.set()
            _go(go, start)


def _go(go: Any, start: Any) -> None:
    if not go.is_set():
        start.value = time.monotonic()
        go.set()


def _drain(reports: Any, aggregator: Aggregator) -> None:
    """Whatever a finished child left on the queue."""
    while True:
        try:
            aggregator.accept(reports.get(timeout=coordinator_poll_s))
        except queue.Empty:
            return
