"""The console's figures as JSON, and how the figures of several workers add up to one broker's.

    GET /console/data/overview                          the overview's figures (_routes_console_data.py)
    GET /console/data/namespaces/{t}/{ns}?q=&page=&size= a page of a namespace's topics with the
                                                        figures of the loaded ones
    GET /console/data/topics/{domain}/{t}/{ns}/{topic}  one topic's /stats and rate history, or a
                                                        partitioned topic's partitions' figures

With several workers each one holds the figures of its own loaded topics; a page of the console is
one broker's, so the worker that serves it gathers every worker's figures (each answers with
`?local=true`, _console_gather.py) and adds them up here:

    connections, topics loaded (by namespace)     summed
    the broker's rate history                     summed point by point, the points lined up by the
                                                  time of each worker's newest sample
    busiest topics                                every worker's, busiest first, cut to the count
    a topic's figures                             from the worker that has it loaded (a topic is
                                                  loaded on its owner only)
    a namespace's replicators                     every worker's (each replicates its own topics)

Field names are camelCase, as in Pulsar's stats JSON; a TopicMetrics travels with every field of
the record (its subscriptions too), so a page drawn from a peer's figures is the page its owner
would draw. Data in, data out: nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from velamq.admin._replication_control import ReplicatorFigures
from velamq.broker import BrokerOverview, RateSeries, SubscriptionMetrics, TopicMetrics


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One worker as the console lists it; `up` False: it did not answer this time (pid and
    topics loaded unknown then)."""

    worker_id: int
    web_service_url: str
    up: bool
    pid: int | None = None
    topics_loaded: int | None = None


@dataclass(frozen=True, slots=True)
class Gathered:
    """A page's data and the workers it comes from (a one-process broker: one worker)."""

    workers: tuple[WorkerStatus, ...]

    @property
    def answered(self) -> int:
        return sum(1 for w in self.workers if w.up)

    def missing_note(self) -> str:
        """"1 of 2 workers answered: ..." when one did not, else ""."""
        missing = [w for w in self.workers if not w.up]
        if not missing:
            return ""
        names = ", ".join(f"worker {w.worker_id} ({w.web_service_url})" for w in missing)
        return (f"{self.answered} of {len(self.workers)} workers answered: the figures of {names} "
                "are missing from this page.")


@dataclass(frozen=True, slots=True)
class ReplicatorRow:
    """One replicator of a namespace's topic as the namespace page shows it (a ReplicatorFigures)."""

    topic: str
    remote: str
    connected: bool
    replication_backlog: int
    msg_rate_out: float
    msg_throughput_out: float
    replication_delay_s: float
    msg_out_total: int
    bytes_out_total: int
    producer_name: str
    outbound_connection: str

    @classmethod
    def of(cls, topic: str, remote: str, f: ReplicatorFigures) -> ReplicatorRow:
        return cls(topic, remote, f.connected, f.replication_backlog, f.msg_rate_out, f.msg_throughput_out,
                   f.replication_delay_s, f.msg_out_total, f.bytes_out_total, f.producer_name,
                   f.outbound_connection)


def camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


# ---- records <-> JSON ---------------------------------------------------------------------------


def worker_json(status: WorkerStatus) -> dict[str, Any]:
    return {"id": status.worker_id, "webServiceUrl": status.web_service_url, "up": status.up,
            "pid": status.pid, "topicsLoaded": status.topics_loaded}


def worker_from_json(data: Mapping[str, Any]) -> WorkerStatus:
    pid, loaded = data.get("pid"), data.get("topicsLoaded")
    return WorkerStatus(int(data["id"]), str(data["webServiceUrl"]), bool(data["up"]),
                        None if pid is None else int(pid), None if loaded is None else int(loaded))


def series_json(series: RateSeries) -> dict[str, Any]:
    return {"intervalS": series.interval_s, "pointsMax": series.points_max, "lastSampleMs": series.last_sample_ms,
            "msgIn": list(series.msg_in), "msgOut": list(series.msg_out)}


def series_from_json(data: Mapping[str, Any]) -> RateSeries:
    return RateSeries(float(data["intervalS"]), int(data["pointsMax"]), int(data["lastSampleMs"]),
                      tuple(float(v) for v in data["msgIn"]), tuple(float(v) for v in data["msgOut"]))


def metrics_json(m: TopicMetrics) -> dict[str, Any]:
    found = {camel(f.name): getattr(m, f.name) for f in fields(m) if f.name != "subscriptions"}
    found["subscriptions"] = [{camel(f.name): getattr(s, f.name) for f in fields(s)} for s in m.subscriptions]
    return found


def metrics_from_json(data: Mapping[str, Any]) -> TopicMetrics:
    """The record back; a field the JSON lacks keeps its default (a peer of another version)."""
    subscriptions = tuple(
        SubscriptionMetrics(**{f.name: s[camel(f.name)] for f in fields(SubscriptionMetrics) if camel(f.name) in s})
        for s in data.get("subscriptions", ())
    )
    kept = {f.name: data[camel(f.name)] for f in fields(TopicMetrics)
            if f.name != "subscriptions" and camel(f.name) in data}
    return TopicMetrics(**kept, subscriptions=subscriptions)


def replicator_json(row: ReplicatorRow) -> dict[str, Any]:
    return {camel(f.name): getattr(row, f.name) for f in fields(row)}


def replicator_from_json(data: Mapping[str, Any]) -> ReplicatorRow:
    return ReplicatorRow(**{f.name: data[camel(f.name)] for f in fields(ReplicatorRow)})


def overview_json(overview: BrokerOverview, workers: Iterable[WorkerStatus]) -> dict[str, Any]:
    return {
        "connectionsActive": overview.connections_active,
        "connectionsOpenedTotal": overview.connections_opened_total,
        "topicsLoaded": overview.topics_loaded,
        "topicsLoadedByNamespace": dict(overview.topics_loaded_by_namespace),
        "rateHistory": series_json(overview.rate_history),
        "busiestTopics": [{"topic": t, "msgRateIn": rate_in, "msgRateOut": rate_out}
                          for t, rate_in, rate_out in overview.busiest_topics],
        "workers": [worker_json(w) for w in workers],
    }


def overview_from_json(data: Mapping[str, Any]) -> tuple[BrokerOverview, list[WorkerStatus]]:
    overview = BrokerOverview(
        connections_active=int(data["connectionsActive"]),
        connections_opened_total=int(data["connectionsOpenedTotal"]),
        topics_loaded=int(data["topicsLoaded"]),
        topics_loaded_by_namespace={str(k): int(v) for k, v in data["topicsLoadedByNamespace"].items()},
        rate_history=series_from_json(data["rateHistory"]),
        busiest_topics=tuple((str(b["topic"]), float(b["msgRateIn"]), float(b["msgRateOut"]))
                             for b in data["busiestTopics"]),
    )
    return overview, [worker_from_json(w) for w in data["workers"]]


# ---- adding up the workers ----------------------------------------------------------------------


def merge_series(series: Sequence[RateSeries]) -> RateSeries:
    """Point-by-point sums. Workers sample on their own clocks: each series is shifted by the
    whole intervals its newest sample is older than the newest of all, so points of about the same
    time add up; the sum is as long as the longest series (a worker started later adds nothing to
    the older points)."""
    present = [s for s in series if s.msg_in]
    if not present:
        return series[0]
    interval_ms = present[0].interval_s * 1000
    points_max = max(s.points_max for s in present)
    newest = max(s.last_sample_ms for s in present)
    shifts = [max(0, round((newest - s.last_sample_ms) / interval_ms)) for s in present]
    length = min(points_max, max(len(s.msg_in) + shift for s, shift in zip(present, shifts, strict=True)))
    sums_in, sums_out = [0.0] * length, [0.0] * length
    for s, shift in zip(present, shifts, strict=True):
        for age, (rate_in, rate_out) in enumerate(zip(reversed(s.msg_in), reversed(s.msg_out), strict=True)):
            at = length - 1 - age - shift
            if at >= 0:
                sums_in[at] += rate_in
                sums_out[at] += rate_out
    return RateSeries(present[0].interval_s, points_max, newest, tuple(sums_in), tuple(sums_out))


def merge_overviews(overviews: Sequence[BrokerOverview], busiest_max: int) -> BrokerOverview:
    """The whole broker's overview from each worker's (at least one)."""
    by_namespace: dict[str, int] = {}
    for o in overviews:
        for namespace, count in o.topics_loaded_by_namespace.items():
            by_namespace[namespace] = by_namespace.get(namespace, 0) + count
    busiest = sorted((b for o in overviews for b in o.busiest_topics), key=lambda b: (-(b[1] + b[2]), b[0]))
    return BrokerOverview(
        connections_active=sum(o.connections_active for o in overviews),
        connections_opened_total=sum(o.connections_opened_total for o in overviews),
        topics_loaded=sum(o.topics_loaded for o in overviews),
        topics_loaded_by_namespace=by_namespace,
        rate_history=merge_series([o.rate_history for o in overviews]),
        busiest_topics=tuple(busiest[:busiest_max]),
    )


def merge_metrics(each: Iterable[Mapping[str, TopicMetrics]]) -> dict[str, TopicMetrics]:
    """Loaded topics' figures of every worker; a topic found twice (loaded on its old owner for
    the moment a bundle moves) keeps the first worker's figures (this worker's come first)."""
    merged: dict[str, TopicMetrics] = {}
    for metrics in each:
        for name, m in metrics.items():
            merged.setdefault(name, m)
    return merged
