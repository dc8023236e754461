"""The console's view of geo-replication (RP-9): a namespace's replication clusters with the state
of its loaded topics' replicators, and one topic's replicators. Data in, HTML out (_console.py's
rule); every string is escaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from velamq.admin._console_html import esc, stat, table
from velamq.admin._replication_control import ReplicatorFigures


def namespace_section(clusters: list[str], local: str, figures: Iterable[tuple[str, str, ReplicatorFigures]]) -> str:
    """The namespace's replication clusters, then per remote: its replicators (connected of all),
    their summed backlog and the largest delay. `figures` are (topic, remote, figures) of the
    namespace's replicators."""
    by_remote: dict[str, list[ReplicatorFigures]] = {}
    for _, remote, f in figures:
        by_remote.setdefault(remote, []).append(f)
    rows = [
        f"<tr data-remote='{esc(remote)}'><td class='name'>{esc(remote)}</td>"
        f"{stat('connected', sum(f.connected for f in found))}{stat('replicators', len(found))}"
        f"{stat('replicationBacklog', sum(f.replication_backlog for f in found))}"
        f"{stat('msgRateOut', sum(f.msg_rate_out for f in found), rate=True)}"
        f"{stat('replicationDelayInSeconds', round(max(f.replication_delay_s for f in found)))}</tr>"
        for remote, found in sorted(by_remote.items())
    ]
    listed = ", ".join(clusters) if clusters else local
    return (
        f"<h2>Replication</h2><p class='summary' data-replication-clusters='{esc(listed)}'>"
        f"Replication clusters: {esc(listed)} (this cluster: {esc(local)})</p>"
        + table(["remote cluster", "connected", "replicators", "backlog", "msg/s out", "delay s"], rows,
                cls="replication", empty="no loaded topic replicates")
    )


def topic_section(replication: Mapping[str, Any]) -> str:
    """TopicStats.replication as a table (empty string when the topic does not replicate)."""
    if not replication:
        return ""
    rows = [
        f"<tr data-remote='{esc(remote)}'><td class='name'>{esc(remote)}</td>"
        f"{stat('connected', r['connected'])}{stat('replicationBacklog', r['replicationBacklog'])}"
        f"{stat('msgRateOut', r['msgRateOut'], rate=True)}"
        f"{stat('msgThroughputOut', r['msgThroughputOut'], bytes_=True)}"
        f"{stat('replicationDelayInSeconds', r['replicationDelayInSeconds'])}"
        f"{stat('outboundConnection', r['outboundConnection'])}</tr>"
        for remote, r in sorted(replication.items())
    ]
    return f"<h2>Replication ({len(rows)})</h2>" + table(
        ["remote cluster", "connected", "backlog", "msg/s out", "bytes/s out", "delay s", "connection"], rows,
        cls="replication")
