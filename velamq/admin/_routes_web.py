"""Health, Prometheus metrics and the web console (OP-3).

    GET /admin/v2/brokers/health    "ok" (text/plain), as Pulsar's health check answers
    GET /admin/v2/brokers/ready     "ok"
    GET /metrics, /metrics/         Prometheus text format 0.0.4; with several workers, every
                                    worker's figures labelled worker="<id>" (?local=true: this
                                    worker's own, unlabelled: what the others gather)
    GET /                                                 console: overview
    GET /console/namespaces/{tenant}/{namespace}          console: a namespace's topics (?q=, ?page=, ?size=)
    GET /console/topics/{domain}/{tenant}/{namespace}/{topic}   console: one topic (or its partitions)

Every console page takes ?refresh=N (seconds, 0 = off) to reload itself. With authentication on,
the server asks a browser for credentials (401 with WWW-Authenticate: Basic when basic users exist)
and console pages pass through `console_access`: tenant admins see their tenants, superusers all.
The figures each page shows come from _console_views.py, which also answers them as JSON
(/console/data/...): with several workers, any worker serves every page with every worker's
figures, and draws a topic's page from its owner's (the browser is never sent to another port).
/metrics needs credentials only with authenticateMetricsEndpoint=true.

Snapshots are taken on the loop (they are the broker's state); turning them into text runs in a
worker thread when it can be big (/metrics with many topics). The snapshot records are frozen, so
reading them from another thread is safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from velamq._errors import InvalidTopicNameError, NotFoundError
from velamq.admin import _console, _console_views, _metrics
from velamq.admin._console_html import CONTENT_TYPE, SECURITY_HEADERS, namespace_href, topic_href
from velamq.admin._console_replication import namespace_section
from velamq.admin._console_views import (
    PartitionedView,
    console_access,
    int_query,
    namespace_view,
    overview_view,
    owner_note,
    topic_view,
)
from velamq.admin._http import HttpError, Response
from velamq.admin._metrics_gather import all_workers_metrics
from velamq.admin._params import bool_param, topic_of
from velamq.admin._router import Call, Router
from velamq.admin._routes_replication import replication_metrics

# Namespaces listed on the overview at most (each costs a count in the metadata store).
overview_namespaces_max: Final = 200
refresh_s_min: Final = 2


async def health(call: Call) -> Response:
    return Response.text("ok")


async def metrics(call: Call) -> Response:
    snapshot = await call.backend.scrape_metrics()
    text = await asyncio.to_thread(_metrics.render, snapshot, call.backend.cluster_name)
    text += replication_metrics(call)
    if call.routing is not None and not bool_param(call, "local"):
        text = await all_workers_metrics(call, text)
    return Response(200, text.encode(), _metrics.CONTENT_TYPE)


# ---- the console ------------------------------------------------------------------------------


def _html(text: str, status: int = 200) -> Response:
    return Response(status, text.encode(), CONTENT_TYPE, SECURITY_HEADERS)


def _frame(call: Call) -> _console.Frame:
    refresh = int_query(call, "refresh", 0, 0, 3600)
    return _console.Frame(
        call.backend.service_url, call.web_service_url, max(refresh, refresh_s_min) if refresh else None
    )


ConsoleHandler = Callable[[Call, _console.Frame], Awaitable[Response]]


def _console_page(handler: ConsoleHandler) -> Callable[[Call], Awaitable[Response]]:
    """A console route: access checked first; an unknown name answers an HTML 404, a topic whose
    owner worker does not answer an HTML 503, not JSON."""

    async def serve(call: Call) -> Response:
        await console_access(call)
        frame = _frame(call)
        try:
            return await handler(call, frame)
        except (NotFoundError, InvalidTopicNameError) as exc:
            return _html(_console.not_found_page(frame, str(exc), call.request.path), 404)
        except HttpError as exc:
            if exc.status != 503:
                raise
            return _html(_console.message_page(frame, "Not available", exc.reason, call.request.path), 503)

    return serve


async def overview(call: Call, frame: _console.Frame) -> Response:
    """The whole broker's figures (every worker's, gathered by _console_views) and its namespaces."""
    metadata = call.backend.metadata
    overview, gathered = await overview_view(call)
    caller = call.caller
    rows: list[tuple[str, int, int]] = []
    total = 0
    for tenant in await metadata.list_tenants():
        if not caller.is_tenant_admin(tenant):
            continue
        for ns in await metadata.list_namespaces(tenant):
            total += 1
            if len(rows) < overview_namespaces_max:
                listing = await metadata.topics_page(ns, limit=1)
                rows.append((ns, listing.total, overview.topics_loaded_by_namespace.get(ns, 0)))
    workers = gathered.workers if call.routing is not None else ()
    return _html(_console.overview_page(frame, overview, rows, total, workers, gathered.missing_note()))


async def namespace_topics(call: Call, frame: _console.Frame) -> Response:
    view = await namespace_view(call)
    listing = view.listing
    href = namespace_href(listing.namespace, listing.search, view.page)
    clusters = (await call.backend.metadata.get_policies(listing.namespace)).get("replication_clusters")
    replication = namespace_section(clusters if isinstance(clusters, list) else [], call.backend.cluster_name,
                                    [(r.topic, r.remote, r) for r in view.replicators])
    return _html(_console.namespace_page(frame, listing, view.metrics, view.size, href, [replication],
                                         note=view.gathered.missing_note()))


async def topic(call: Call, frame: _console.Frame) -> Response:
    """One topic's page, drawn here from its owner's figures (any worker serves it: no redirect
    to another worker's port), or a partitioned topic's partitions from every worker."""
    full = str(topic_of(call))
    href = topic_href(full)
    view = await topic_view(call)
    if isinstance(view, PartitionedView):
        return _html(_console.partitioned_page(frame, full, view.partitions, view.metrics, href,
                                               note=view.gathered.missing_note()))
    return _html(_console.topic_page(frame, full, view.stats, view.history, view.interval_s, href,
                                     owner_note(call, view)))


def register(router: Router) -> None:
    router.add("GET", "/admin/v2/brokers/health", health)
    router.add("GET", "/admin/v2/brokers/ready", health)
    router.add("GET", "/metrics", metrics)
    router.add("GET", "/", _console_page(overview))
    router.add("GET", "/console/namespaces/{tenant}/{namespace}", _console_page(namespace_topics))
    router.add("GET", "/console/topics/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}",
               _console_page(topic))
    _console_views.register(router)
