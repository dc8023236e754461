"""Health, Prometheus metrics and the web console (OP-3).

    GET /admin/v2/brokers/health    "ok" (text/plain), as Pulsar's health check answers
    GET /admin/v2/brokers/ready     "ok"
    GET /metrics, /metrics/         Prometheus text format 0.0.4
    GET /                           the console (HTML)

The snapshot is taken on the loop (it is the broker's state); turning it into text runs in a worker
thread, since a broker with many topics makes a page big enough to stall the loop otherwise. The
snapshot is frozen dataclasses, so reading it from another thread is safe.
"""

from __future__ import annotations

import asyncio

from velamq.admin import _console, _metrics
from velamq.admin._http import Response
from velamq.admin._router import Call, Router
from velamq.metadata import DEFAULT_CLUSTER


async def health(call: Call) -> Response:
    return Response.text("ok")


async def metrics(call: Call) -> Response:
    snapshot = await call.backend.scrape_metrics()
    text = await asyncio.to_thread(_metrics.render, snapshot, DEFAULT_CLUSTER)
    return Response(200, text.encode(), _metrics.CONTENT_TYPE)


async def _namespace_rows(call: Call) -> list[tuple[str, int, int]]:
    metadata = call.backend.metadata
    rows: list[tuple[str, int, int]] = []
    for tenant in await metadata.list_tenants():
        for ns in await metadata.list_namespaces(tenant):
            topics = await metadata.list_topics(ns)
            partitioned = await metadata.list_partitioned_topics(ns)
            rows.append((ns, len(topics), len(partitioned)))
    return rows


def register(router: Router) -> None:
    tracker = _console.RateTracker()  # one per server: rates between this server's page views

    async def console(call: Call) -> Response:
        snapshot = call.backend.metrics_snapshot()
        rates = tracker.rates(snapshot)
        rows = await _namespace_rows(call)
        page = await asyncio.to_thread(
            _console.render, snapshot, rates, rows, call.backend.service_url, call.web_service_url
        )
        return Response.text(page, content_type="text/html; charset=utf-8")

    router.add("GET", "/admin/v2/brokers/health", health)
    router.add("GET", "/admin/v2/brokers/ready", health)
    router.add("GET", "/metrics", metrics)
    router.add("GET", "/", console)
