"""What `velamq perf` prints: reports from the workers merged into live lines and a summary.

Every worker (a process, or the one in-process worker) sends plain-dict reports:

    {"kind": "ready", "worker": i}
    {"kind": "interval", "worker": i, "index": k, "start_s": .., "end_s": .., "counts": {..},
     "pending": n, "latency": <encoded histogram>, "e2e": <encoded histogram>}
    {"kind": "final", "worker": i, "elapsed_s": .., "counts": {.. cumulative}, "latency": .., "e2e": ..}
    {"kind": "error", "worker": i, "message": ".."}

Times are seconds since the common start (every worker measures from the same monotonic instant),
so interval k covers the same span of time in every process. The Aggregator prints interval k once
every worker still running has reported it (or a later one), merging the counts and adding the
histograms; a rate is the sum of each worker's count over its own interval length. The summary
merges the final reports the same way, its rates over the whole run's time (the slowest worker's).
With --json each interval and the summary are one JSON object per line on stdout; otherwise human
lines.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from velamq.cli._perf_stats import PERCENTILES, merged

COUNT_KEYS = ("sent", "sent_bytes", "failed", "received", "received_bytes")


@dataclass(frozen=True, slots=True)
class RunShape:
    """What the run drives, for the header and the summary."""

    command: str
    topics: int
    producers: int
    consumers: int
    processes: int
    interval_s: float


def _rates(reports: list[dict[str, Any]], count: str, size: str) -> tuple[int, int, float, float]:
    """(messages, bytes, msg/s, MB/s): sums, and each worker's figure over its own span, summed."""
    messages = sum(r["counts"][count] for r in reports)
    size_bytes = sum(r["counts"][size] for r in reports)
    msg_s = mb_s = 0.0
    for r in reports:
        seconds = r["end_s"] - r["start_s"]
        if seconds > 0:
            msg_s += r["counts"][count] / seconds
            mb_s += r["counts"][size] / seconds / 1e6
    return messages, size_bytes, msg_s, mb_s


def merge_reports(shape: RunShape, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One JSON-able figure set out of the same interval's (or the finals') reports of every worker."""
    out: dict[str, Any] = {}
    if shape.producers:
        messages, size, msg_s, mb_s = _rates(reports, "sent", "sent_bytes")
        out["produced"] = {"messages": messages, "bytes": size, "msg_per_s": round(msg_s, 1),
                           "mb_per_s": round(mb_s, 3), "failed": sum(r["counts"]["failed"] for r in reports)}
        out["pending"] = sum(r.get("pending", 0) for r in reports)
        out["publish_latency_ms"] = merged([r["latency"] for r in reports]).summary_ms()
    if shape.consumers:
        messages, size, msg_s, mb_s = _rates(reports, "received", "received_bytes")
        out["consumed"] = {"messages": messages, "bytes": size, "msg_per_s": round(msg_s, 1),
                           "mb_per_s": round(mb_s, 3)}
        out["end_to_end_latency_ms"] = merged([r["e2e"] for r in reports]).summary_ms()
    return out


def _latency_text(latency: dict[str, Any]) -> str:
    if not latency["count"]:
        return "-"
    parts = [f"{name} {latency[name]:.3f}" for name, _ in PERCENTILES]
    return " ".join([*parts, f"max {latency['max']:.3f}"])


def interval_line(shape: RunShape, figures: dict[str, Any], elapsed_s: float) -> str:
    """One live line: rates, pending and the latency percentiles of the interval, in ms."""
    head = f"[{elapsed_s:7.1f} s]"
    if shape.command == "produce":
        p = figures["produced"]
        return (f"{head} produce {p['msg_per_s']:>10,.1f} msg/s {p['mb_per_s']:>8.2f} MB/s  "
                f"pending {figures['pending']:>6,}  failed {p['failed']:,} | latency ms "
                f"{_latency_text(figures['publish_latency_ms'])}")
    c = figures["consumed"]
    if shape.command == "consume":
        return (f"{head} consume {c['msg_per_s']:>10,.1f} msg/s {c['mb_per_s']:>8.2f} MB/s | end-to-end ms "
                f"{_latency_text(figures['end_to_end_latency_ms'])}")
    p = figures["produced"]
    return (f"{head} produce {p['msg_per_s']:>10,.1f} msg/s  consume {c['msg_per_s']:>10,.1f} msg/s "
            f"{c['mb_per_s']:>8.2f} MB/s  pending {figures['pending']:>6,} | end-to-end ms "
            f"{_latency_text(figures['end_to_end_latency_ms'])}")


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def summary_text(shape: RunShape, summary: dict[str, Any]) -> str:
    parts = [_plural(shape.topics, "topic")]
    if shape.producers:
        parts.append(_plural(shape.producers, "producer"))
    if shape.consumers:
        parts.append(_plural(shape.consumers, "consumer"))
    parts.append(_plural(shape.processes, "process").replace("processs", "processes"))
    lines = [f"velamq perf {shape.command} summary: {summary['elapsed_s']:.2f} s, {', '.join(parts)}"]
    if "produced" in summary:
        p = summary["produced"]
        lines.append(f"  produced   {p['messages']:>12,} msg  {p['msg_per_s']:>10,.1f} msg/s  "
                     f"{p['mb_per_s']:>8.2f} MB/s  failed {p['failed']:,}")
        latency = summary["publish_latency_ms"]
        lines.append(f"  publish latency ms     (n={latency['count']:,}) mean {latency['mean']:.3f} "
                     f"{_latency_text(latency)}")
    if "consumed" in summary:
        c = summary["consumed"]
        lines.append(f"  consumed   {c['messages']:>12,} msg  {c['msg_per_s']:>10,.1f} msg/s  "
                     f"{c['mb_per_s']:>8.2f} MB/s")
        latency = summary["end_to_end_latency_ms"]
        lines.append(f"  end-to-end latency ms  (n={latency['count']:,}) mean {latency['mean']:.3f} "
                     f"{_latency_text(latency)}")
    lines.extend(f"  error: {e}" for e in summary.get("errors", []))
    return "\n".join(lines)


class Aggregator:
    """Collects the workers' reports and prints each interval once every running worker has it."""

    def __init__(self, shape: RunShape, out: TextIO, as_json: bool) -> None:
        self.shape = shape
        self._out = out
        self._json = as_json
        self._intervals: dict[int, list[dict[str, Any]]] = {}
        self._latest: dict[int, int] = {}  # worker -> highest interval index it reported
        self._finals: dict[int, dict[str, Any]] = {}
        self._printed = 0
        self.ready: set[int] = set()
        self.errors: list[str] = []
        self._failed: set[int] = set()  # workers that reported an error

    @property
    def finished(self) -> bool:
        return len(self._finals) == self.shape.processes

    def accept(self, report: dict[str, Any]) -> None:
        kind, worker = report["kind"], report["worker"]
        if kind == "ready":
            self.ready.add(worker)
        elif kind == "error":
            self._failed.add(worker)
            self.errors.append(f"process {worker}: {report['message']}" if self.shape.processes > 1
                               else str(report["message"]))
        elif kind == "interval":
            self._intervals.setdefault(report["index"], []).append(report)
            self._latest[worker] = report["index"]
        elif kind == "final":
            self._finals[worker] = report
        self._print_ready_intervals()

    def worker_gone(self, worker: int, why: str) -> None:
        """A worker process that ended without its final report."""
        if worker not in self._finals:
            if worker not in self._failed:  # else its own error already says why
                self.errors.append(f"process {worker}: {why}")
            self._finals[worker] = {"kind": "final", "worker": worker, "missing": True}
            self._print_ready_intervals()

    def _print_ready_intervals(self) -> None:
        running = [w for w in range(self.shape.processes) if w not in self._finals]
        while self._intervals:
            k = self._printed + 1
            if any(self._latest.get(w, 0) < k for w in running):
                return
            reports = self._intervals.pop(k, [])
            self._printed = k
            if not reports:
                continue  # every worker skipped k (a loop stalled past a whole interval)
            figures = merge_reports(self.shape, reports)
            elapsed = max(r["end_s"] for r in reports)
            if self._json:
                self._write(json.dumps({"type": "interval", "command": self.shape.command, "interval": k,
                                        "elapsed_s": round(elapsed, 3), **figures}))
            else:
                self._write(interval_line(self.shape, figures, elapsed))

    def summary(self) -> dict[str, Any]:
        finals = [f for f in self._finals.values() if not f.get("missing")]
        elapsed = max((f["elapsed_s"] for f in finals), default=0.0)
        for f in finals:
            # The run's rate is everything over the whole run's time: a process that finished its
            # share early does not count as faster.
            f["start_s"], f["end_s"] = 0.0, elapsed
        out: dict[str, Any] = {
            "type": "summary", "command": self.shape.command, "elapsed_s": round(elapsed, 3),
            "processes": self.shape.processes, "topics": self.shape.topics,
        }
        if self.shape.producers:
            out["producers"] = self.shape.producers
        if self.shape.consumers:
            out["consumers"] = self.shape.consumers
        if finals:
            out.update(merge_reports(self.shape, finals))
            out.pop("pending", None)
            # How evenly the processes shared the work.
            out["per_process"] = [{"process": f["worker"], "elapsed_s": round(f["elapsed_s"], 3),
                                   "sent": f["counts"]["sent"], "received": f["counts"]["received"]}
                                  for f in sorted(finals, key=lambda f: int(f["worker"]))]
        if self.errors:
            out["errors"] = list(self.errors)
        return out

    def print_summary(self) -> dict[str, Any]:
        summary = self.summary()
        if self._json:
            self._write(json.dumps(summary))
        elif not any(not f.get("missing") for f in self._finals.values()):
            for error in self.errors:  # nothing ran: the errors are the whole story
                print(f"velamq perf: {error}", file=sys.stderr, flush=True)
        else:
            self._write(summary_text(self.shape, summary))
        return summary

    def _write(self, line: str) -> None:
        print(line, file=self._out, flush=True)
