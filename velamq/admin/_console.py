"""The web console at GET /: topics, subscriptions, backlog and rates on one page (OP-3).

Plain HTML that reloads itself every few seconds; no scripts, no external assets. Rates are the
difference between this snapshot and the one kept from an earlier view, over the time between them.
Every string that comes from a client (topic and subscription names) is HTML-escaped.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Final

from velamq.broker import BrokerMetrics, TopicMetrics

refresh_interval_s: Final = 5
# Rates need a baseline at least this old; faster reloads reuse the older baseline.
rate_window_min_s: Final = 1.0


@dataclass(frozen=True, slots=True)
class _Baseline:
    at_s: float
    totals: dict[str, tuple[int, int, int, int]]  # topic -> msg in, bytes in, msg out, bytes out


def _totals(topic: TopicMetrics) -> tuple[int, int, int, int]:
    return (topic.msg_in_total, topic.bytes_in_total, topic.msg_out_total, topic.bytes_out_total)


class RateTracker:
    """Per-topic rates between the current snapshot and an earlier one, over the broker clock's
    time between them (the snapshots' taken_at_s)."""

    def __init__(self) -> None:
        self._baseline: _Baseline | None = None

    def rates(self, metrics: BrokerMetrics, now_s: float | None = None) -> dict[str, tuple[float, ...]]:
        now = metrics.taken_at_s if now_s is None else now_s
        current = {t.topic: _totals(t) for t in metrics.topics}
        result: dict[str, tuple[float, ...]] = {}
        baseline = self._baseline
        if baseline is not None and now > baseline.at_s:
            elapsed = now - baseline.at_s
            for name, totals in current.items():
                before = baseline.totals.get(name)
                if before is not None:
                    result[name] = tuple(max(0, a - b) / elapsed for a, b in zip(totals, before, strict=True))
        if baseline is None or now - baseline.at_s >= rate_window_min_s:
            self._baseline = _Baseline(now, current)
        return result


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


_STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td.name { text-align: left; font-family: monospace; }
tr.sub td { background: #fafafa; font-size: 0.9em; }
"""


def render(
    metrics: BrokerMetrics,
    rates: dict[str, tuple[float, ...]],
    namespaces: list[tuple[str, int, int]],
    service_url: str,
    web_service_url: str,
) -> str:
    """The page. `namespaces` holds (namespace, topics, partitioned topics) from the metadata store."""
    e = html.escape
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<meta http-equiv='refresh' content='{refresh_interval_s}'>",
        f"<title>velamq</title><style>{_STYLE}</style></head><body>",
        "<h1>velamq</h1>",
        f"<p>Service URL <code>{e(service_url)}</code> &middot; admin <code>{e(web_service_url)}</code>"
        f" &middot; {metrics.connections_active} connections &middot;"
        f" <a href='/metrics'>metrics</a></p>",
        "<h2>Namespaces</h2><table><tr><th>namespace</th><th>topics</th><th>partitioned topics</th></tr>",
    ]
    for ns, topics, partitioned in namespaces:
        out.append(f"<tr><td class='name'>{e(ns)}</td><td>{topics}</td><td>{partitioned}</td></tr>")
    out.append("</table>")
    out.append(
        "<h2>Loaded topics</h2><table><tr><th>topic / subscription</th><th>producers</th><th>consumers</th>"
        "<th>in msg/s</th><th>in bytes/s</th><th>out msg/s</th><th>out bytes/s</th>"
        "<th>storage</th><th>backlog</th><th>unacked</th></tr>"
    )
    if not metrics.topics:
        out.append("<tr><td class='name' colspan='10'>no topic loaded</td></tr>")
    for topic in sorted(metrics.topics, key=lambda t: t.topic):
        r = rates.get(topic.topic)
        rate_cells = (
            f"<td>{r[0]:.1f}</td><td>{_fmt_bytes(r[1])}/s</td><td>{r[2]:.1f}</td><td>{_fmt_bytes(r[3])}/s</td>"
            if r else "<td>-</td>" * 4
        )
        out.append(
            f"<tr><td class='name'>{e(topic.topic)}</td><td>{topic.producers}</td><td>{topic.consumers}</td>"
            f"{rate_cells}<td>{_fmt_bytes(topic.storage_size_bytes)}</td><td>{topic.backlog_entries}</td>"
            "<td></td></tr>"
        )
        for sub in sorted(topic.subscriptions, key=lambda s: s.name):
            out.append(
                f"<tr class='sub'><td class='name'>&nbsp;&nbsp;&#8627; {e(sub.name)} ({e(sub.type)})</td>"
                f"<td></td><td>{sub.consumers}</td><td colspan='4'></td><td></td>"
                f"<td>{sub.backlog_entries}</td><td>{sub.unacked_messages}</td></tr>"
            )
    out.append("</table></body></html>")
    return "\n".join(out)
