"""What each console page shows, gathered from the whole broker, and the same figures as JSON.

    GET /console/data/overview                                 the overview's figures
    GET /console/data/namespaces/{tenant}/{namespace}          a page of a namespace's topics
                                                               (?q=, ?page=, ?size=) with the
                                                               figures of the loaded ones
    GET /console/data/topics/{domain}/{tenant}/{namespace}/{topic}
                                                               one topic's /stats and rate history;
                                                               a partitioned topic's partitions'
                                                               figures

The HTML routes (_routes_web.py) draw what the views here return; the JSON routes answer the same
views (_console_data.py has the shapes). With several workers, every route is served by any
worker: it gathers the peers' figures (`?local=true` asks a worker for its own only, and never
makes it ask anyone else), and a topic's figures come from its owner through the worker that was
asked (_console_gather.py), so neither a browser nor a script ever has to follow a redirect to
another worker's port. Access is the console's: any authenticated role, a tenant's pages for its
admins; the overview shows each caller the busiest topics and namespaces of its own tenants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from velamq._topic_name import TopicName
from velamq.admin._console import page_size_default
from velamq.admin._console_data import (
    Gathered,
    ReplicatorRow,
    WorkerStatus,
    metrics_json,
    overview_json,
    replicator_json,
    series_from_json,
    series_json,
    worker_from_json,
    worker_json,
)
from velamq.admin._console_gather import (
    gathers,
    own_status,
    owner_topic_data,
    whole_loaded_figures,
    whole_overview,
)
from velamq.admin._console_html import namespace_href, query, seg
from velamq.admin._http import HttpError, Response
from velamq.admin._non_persistent_stats import any_stats_json
from velamq.admin._params import bool_param, namespace_of, topic_of
from velamq.admin._router import Call, Router
from velamq.admin._routes_replication import add_replication
from velamq.broker import BrokerOverview, RateSeries, TopicMetrics
from velamq.metadata import TopicListing

overview_busiest_max: Final = 10
page_size_max: Final = 500


async def console_access(call: Call) -> None:
    """The gate in front of every console page, after the server's own: by then the caller is
    authenticated (a browser without credentials got 401 with a WWW-Authenticate challenge). A page
    about a tenant's namespace or topic is for that tenant's adminRoles and superusers (403 for
    anyone else); the overview shows each caller the tenants it administers."""
    tenant = call.params.get("tenant")
    if tenant is not None and not call.caller.is_tenant_admin(tenant):
        raise HttpError(403, "Don't have permission to administrate resources on this tenant")


def int_query(call: Call, name: str, default: int, low: int, high: int) -> int:
    """A whole number from the query, clamped to [low, high]; the default if absent or not a number."""
    value = call.request.query_param(name)
    if value is None or not value.strip().isdigit():
        return default
    return max(low, min(high, int(value)))


# ---- the overview -------------------------------------------------------------------------------


async def overview_view(call: Call) -> tuple[BrokerOverview, Gathered]:
    """The whole broker's overview as this caller may see it: a tenant admin sees the busiest
    topics and the loaded-topic counts of its tenants only."""
    overview, gathered = await whole_overview(call, overview_busiest_max)
    caller = call.caller
    if not caller.is_superuser():
        overview = dataclasses.replace(
            overview,
            busiest_topics=tuple(t for t in overview.busiest_topics
                                 if caller.is_tenant_admin(TopicName.parse(t[0]).tenant)),
            topics_loaded_by_namespace={ns: n for ns, n in overview.topics_loaded_by_namespace.items()
                                        if caller.is_tenant_admin(ns.split("/", 1)[0])},
        )
    return overview, gathered


async def overview_data(call: Call) -> Response:
    await console_access(call)
    overview, gathered = await overview_view(call)
    body = overview_json(overview, gathered.workers)
    me = own_status(call).worker_id
    body["worker"] = worker_json(next(w for w in gathered.workers if w.worker_id == me))
    return Response.json(body)


# ---- a namespace's topics -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NamespaceView:
    listing: TopicListing
    metrics: Mapping[str, TopicMetrics]
    replicators: tuple[ReplicatorRow, ...]  # of the namespace's loaded topics, every worker's
    gathered: Gathered
    page: int
    size: int


async def namespace_view(call: Call) -> NamespaceView:
    ns = namespace_of(call)
    search = (call.request.query_param("q") or "").strip()
    size = int_query(call, "size", page_size_default, 1, page_size_max)
    number = int_query(call, "page", 1, 1, 10**9)
    metadata = call.backend.metadata
    listing = await metadata.topics_page(ns, search, (number - 1) * size, size)
    if not listing.topics and listing.total and number > 1:  # past the end: show the last page
        number = (listing.total - 1) // size + 1
        listing = await metadata.topics_page(ns, search, (number - 1) * size, size)
    tenant, _, local_ns = ns.partition("/")
    target = (f"/console/data/namespaces/{seg(tenant)}/{seg(local_ns)}"
              + query(q=search, page=number, size=size, local="true"))
    replicators = [] if call.replication is None else [
        ReplicatorRow.of(topic, remote, f) for topic, remote, f in call.replication.all_stats()
        if TopicName.parse(topic).namespace == ns
    ]
    figures = await whole_loaded_figures(call, [name for name, _ in listing.topics], target, replicators)
    return NamespaceView(listing, figures.metrics, figures.replicators, figures.gathered, number, size)


async def namespace_data(call: Call) -> Response:
    await console_access(call)
    view = await namespace_view(call)
    listing = view.listing
    return Response.json({
        "namespace": listing.namespace, "search": listing.search, "offset": listing.offset, "total": listing.total,
        "page": view.page, "size": view.size, "href": namespace_href(listing.namespace, listing.search, view.page),
        "topics": [{"name": name, "partitions": partitions} for name, partitions in listing.topics],
        "metrics": {name: metrics_json(m) for name, m in view.metrics.items()},
        "replicators": [replicator_json(r) for r in view.replicators],
        **_workers_json(call, view.gathered),
    })


def _workers_json(call: Call, gathered: Gathered) -> dict[str, Any]:
    return {"worker": worker_json(own_status(call)), "workers": [worker_json(w) for w in gathered.workers]}


# ---- one topic ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicView:
    """A topic's page: its /stats JSON and rate history (from its owner)."""

    stats: Mapping[str, Any]
    history: RateSeries | None
    interval_s: float
    owner: WorkerStatus  # the worker whose figures these are


@dataclass(frozen=True, slots=True)
class PartitionedView:
    """A partitioned topic's page: the figures of its loaded partitions, from every worker."""

    partitions: int
    metrics: Mapping[str, TopicMetrics]
    gathered: Gathered


def _data_path(name: TopicName) -> str:
    return f"/console/data/topics/{name.domain}/{seg(name.tenant)}/{seg(name.namespace_part)}/{seg(name.local_name)}"


async def topic_view(call: Call) -> TopicView | PartitionedView:
    name = topic_of(call)
    full = str(name)
    partitions = await call.backend.metadata.get_partitions(full) if name.partition_index < 0 else 0
    if partitions > 0:
        names = [str(name.partition(i)) for i in range(partitions)]
        figures = await whole_loaded_figures(call, names, _data_path(name) + "?local=true")
        return PartitionedView(partitions, figures.metrics, figures.gathered)
    # Another worker's topic: its owner's figures, asked by this worker (`local`: the owner answers itself).
    owners = await owner_topic_data(call, full, _data_path(name) + "?local=true") if gathers(call) else None
    return await _local_topic(call, full) if owners is None else _topic_view_from_json(owners)


def owner_note(call: Call, view: TopicView) -> str:
    """Which worker the figures of a topic's page come from (nothing in one process)."""
    owner = view.owner
    return "" if call.routing is None else f"Served by worker {owner.worker_id} ({owner.web_service_url})."


async def _local_view(call: Call) -> TopicView | PartitionedView:
    """A peer's question: this worker's own figures, never asking anyone else."""
    name = topic_of(call)
    partitions = await call.backend.metadata.get_partitions(str(name)) if name.partition_index < 0 else 0
    if partitions > 0:
        metrics = call.backend.loaded_topic_metrics(str(name.partition(i)) for i in range(partitions))
        return PartitionedView(partitions, metrics, Gathered((own_status(call),)))
    return await _local_topic(call, str(name))


async def _local_topic(call: Call, full: str) -> TopicView:
    stats = add_replication(call, full, any_stats_json(await call.backend.topic_stats(full)))  # as GET .../stats
    interval_s = call.backend.broker_overview(0).rate_history.interval_s
    return TopicView(stats, call.backend.topic_rate_history(full), interval_s, own_status(call))


def _topic_view_from_json(data: Mapping[str, Any]) -> TopicView:
    history = data.get("rateHistory")
    return TopicView(data["stats"], None if history is None else series_from_json(history), float(data["intervalS"]),
                     worker_from_json(data["owner"]))


async def topic_data(call: Call) -> Response:
    await console_access(call)
    full = str(topic_of(call))
    local = call.routing is not None and bool_param(call, "local")
    view = await (_local_view(call) if local else topic_view(call))
    if isinstance(view, PartitionedView):
        return Response.json({
            "topic": full, "partitions": view.partitions,
            "metrics": {name: metrics_json(m) for name, m in view.metrics.items()},
            **_workers_json(call, view.gathered),
        })
    return Response.json({
        "topic": full, "partitions": 0, "stats": view.stats,
        "rateHistory": None if view.history is None else series_json(view.history), "intervalS": view.interval_s,
        "owner": worker_json(view.owner), "worker": worker_json(own_status(call)),
    })


def register(router: Router) -> None:
    router.add("GET", "/console/data/overview", overview_data)
    router.add("GET", "/console/data/namespaces/{tenant}/{namespace}", namespace_data)
    router.add("GET", "/console/data/topics/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}",
               topic_data)
