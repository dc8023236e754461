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
/metrics needs credentials only with authenticateMetricsEndpoint=true.

Snapshots are taken on the loop (they are the broker's state); turning them into text runs in a
worker thread when it can be big (/metrics with many topics). The snapshot records are frozen, so
reading them from another thread is safe.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Final

from velamq._errors import InvalidTopicNameError, NotFoundError
from velamq._topic_name import TopicName
from velamq.admin import _console, _metrics
from velamq.admin._console_html import CONTENT_TYPE, SECURITY_HEADERS, namespace_href, topic_href
from velamq.admin._console_replication import namespace_section
from velamq.admin._http import HttpError, Response
from velamq.admin._metrics_gather import all_workers_metrics
from velamq.admin._non_persistent_stats import any_stats_json
from velamq.admin._params import bool_param, namespace_of
from velamq.admin._router import Call, Router
from velamq.admin._routes_replication import add_replication, replication_metrics
from velamq.admin._routing import by_owner

# Namespaces listed on the overview at most (each costs a count in the metadata store).
overview_namespaces_max: Final = 200
overview_busiest_max: Final = 10
page_size_max: Final = 500
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


async def console_access(call: Call) -> None:
    """The gate in front of every console page, after the server's own: by then the caller is
    authenticated (a browser without credentials got 401 with a WWW-Authenticate challenge). A page
    about a tenant's namespace or topic is for that tenant's adminRoles and superusers (403 for
    anyone else); the overview shows each caller the tenants it administers."""
    tenant = call.params.get("tenant")
    if tenant is not None and not call.caller.is_tenant_admin(tenant):
        raise HttpError(403, "Don't have permission to administrate resources on this tenant")


def _html(text: str, status: int = 200) -> Response:
    return Response(status, text.encode(), CONTENT_TYPE, SECURITY_HEADERS)


def _int_query(call: Call, name: str, default: int, low: int, high: int) -> int:
    """A whole number from the query, clamped to [low, high]; the default if absent or not a number."""
    value = call.request.query_param(name)
    if value is None or not value.strip().isdigit():
        return default
    return max(low, min(high, int(value)))


def _frame(call: Call) -> _console.Frame:
    refresh = _int_query(call, "refresh", 0, 0, 3600)
    return _console.Frame(
        call.backend.service_url, call.web_service_url, max(refresh, refresh_s_min) if refresh else None
    )


ConsoleHandler = Callable[[Call, _console.Frame], Awaitable[Response]]


def _console_page(handler: ConsoleHandler) -> Callable[[Call], Awaitable[Response]]:
    """A console route: access checked first; an unknown name answers an HTML 404, not JSON."""

    async def serve(call: Call) -> Response:
        await console_access(call)
        frame = _frame(call)
        try:
            return await handler(call, frame)
        except (NotFoundError, InvalidTopicNameError) as exc:
            return _html(_console.not_found_page(frame, str(exc), call.request.path), 404)

    return serve


async def overview(call: Call, frame: _console.Frame) -> Response:
    metadata = call.backend.metadata
    overview = call.backend.broker_overview(overview_busiest_max)
    caller = call.caller
    if not caller.is_superuser():  # a tenant admin sees the busiest topics of its tenants only
        busiest = tuple(t for t in overview.busiest_topics if caller.is_tenant_admin(TopicName.parse(t[0]).tenant))
        overview = dataclasses.replace(overview, busiest_topics=busiest)
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
    return _html(_console.overview_page(frame, overview, rows, total))


async def namespace_topics(call: Call, frame: _console.Frame) -> Response:
    ns = namespace_of(call)
    search = (call.request.query_param("q") or "").strip()
    size = _int_query(call, "size", _console.page_size_default, 1, page_size_max)
    number = _int_query(call, "page", 1, 1, 10**9)
    listing = await call.backend.metadata.topics_page(ns, search, (number - 1) * size, size)
    if not listing.topics and listing.total and number > 1:  # past the end: show the last page
        number = (listing.total - 1) // size + 1
        listing = await call.backend.metadata.topics_page(ns, search, (number - 1) * size, size)
    loaded = call.backend.loaded_topic_metrics(name for name, _ in listing.topics)
    href = namespace_href(ns, search, number)
    return _html(_console.namespace_page(frame, listing, loaded, size, href, [await _replication_section(call, ns)]))


async def _replication_section(call: Call, ns: str) -> str:
    clusters = (await call.backend.metadata.get_policies(ns)).get("replication_clusters")
    figures = [] if call.replication is None else [
        row for row in call.replication.all_stats() if TopicName.parse(row[0]).namespace == ns
    ]
    return namespace_section(clusters if isinstance(clusters, list) else [], call.backend.cluster_name, figures)


async def topic(call: Call, frame: _console.Frame) -> Response:
    p = call.params
    name = TopicName.parse(f"{p['domain']}://{p['tenant']}/{p['namespace']}/{p['topic']}")
    full = str(name)
    href = topic_href(full)
    partitions = await call.backend.metadata.get_partitions(full) if name.partition_index < 0 else 0
    if partitions > 0:
        metrics_ = call.backend.loaded_topic_metrics(str(name.partition(i)) for i in range(partitions))
        return _html(_console.partitioned_page(frame, full, partitions, metrics_, href))
    stats = add_replication(call, full, any_stats_json(await call.backend.topic_stats(full)))  # as GET .../stats
    history = call.backend.topic_rate_history(full)
    interval_s = call.backend.broker_overview(0).rate_history.interval_s
    return _html(_console.topic_page(frame, full, stats, history, interval_s, href))


def register(router: Router) -> None:
    router.add("GET", "/admin/v2/brokers/health", health)
    router.add("GET", "/admin/v2/brokers/ready", health)
    router.add("GET", "/metrics", metrics)
    router.add("GET", "/", _console_page(overview))
    router.add("GET", "/console/namespaces/{tenant}/{namespace}", _console_page(namespace_topics))
    # A topic's page is the owner worker's (its live figures are there).
    router.add("GET", "/console/topics/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}",
               by_owner(_console_page(topic)))
