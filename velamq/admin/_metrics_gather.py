"""/metrics of a broker made of several workers: this worker's page and every peer's, merged.

Each peer is asked for `GET <its own admin URL>/metrics?local=true` (its own figures only), all at
once, each within `peer_metrics_timeout_s`, with the scraper's Authorization header (a broker with
authenticateMetricsEndpoint asks every worker for the same credentials). The pages are merged by
_metrics_merge.py: every sample labelled `worker="<id>"`, one HELP and TYPE per family. A peer that
does not answer (restarting, stuck) is left out of this scrape: `velamq_worker_metrics_up` says 0
for it and a warning is logged (at most once a minute per peer), so one slow worker never fails
the whole page.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from velamq._log_limit import RateLimitedLog
from velamq.admin._metrics_merge import merge_pages, worker_up_page
from velamq.admin._peer_http import PeerError, peer_request
from velamq.admin._router import Call

log = RateLimitedLog(logging.getLogger("velamq.admin"))

peer_metrics_timeout_s: Final = 5.0


async def _peer_page(call: Call, url: str) -> str | None:
    headers = {"Accept": "text/plain"}
    authorization = call.request.header("authorization")
    if authorization is not None:
        headers["Authorization"] = authorization
    try:
        reply = await peer_request("GET", url.rstrip("/") + "/metrics?local=true", headers=headers,
                                   timeout_s=peer_metrics_timeout_s, ssl_context=call.peer_ssl)
    except PeerError as exc:
        log.warning(f"metrics peer {url}", "metrics of the worker at %s left out: %s", url, exc)
        return None
    if reply.status != 200:
        log.warning(f"metrics peer {url}", "metrics of the worker at %s left out: HTTP %d", url, reply.status)
        return None
    return reply.body.decode("utf-8", "replace")


async def all_workers_metrics(call: Call, own_page: str) -> str:
    """The merged page of every worker (this one first), with velamq_worker_metrics_up."""
    routing = call.routing
    assert routing is not None
    peers = await routing.peer_web_urls()
    answers = await asyncio.gather(*(_peer_page(call, url) for _, url in peers))
    pages = [(str(routing.worker_id), own_page)]
    pages += [(str(worker), page) for (worker, _), page in zip(peers, answers, strict=True) if page is not None]
    up = [(str(routing.worker_id), True)] + [
        (str(worker), page is not None) for (worker, _), page in zip(peers, answers, strict=True)
    ]
    merged = await asyncio.to_thread(merge_pages, pages)
    return merged + worker_up_page(call.backend.cluster_name, sorted(up, key=lambda w: int(w[0])))
