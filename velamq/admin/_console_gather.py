"""The console's figures of the whole broker: this worker's, and with several workers every peer's.

    overview, gathered = await whole_overview(call, busiest_max)
    figures = await whole_loaded_figures(call, names, peer_target)
    data = await owner_topic_data(call, topic, target)     # None: this worker owns the topic

Each peer is asked for the console's JSON of its own figures (`GET <its own admin URL>/console/data
/...?local=true`, _routes_console_data.py), all at once, each within `peer_console_timeout_s`, with
the caller's Authorization header, as the merged /metrics does (_metrics_gather.py): the peer
checks the same credentials and rights. A peer that does not answer, or answers something else
than its figures, is left out of the page, which says so ("1 of 2 workers answered"); a warning is
logged at most once a minute per peer. A topic's page is drawn by the worker the browser asked,
from its owner's JSON: the browser never follows a redirect to another port (another origin, where
its credentials would be asked again, and an address it may not even reach).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from velamq._log_limit import RateLimitedLog
from velamq.admin._console_data import (
    Gathered,
    ReplicatorRow,
    WorkerStatus,
    merge_metrics,
    merge_overviews,
    metrics_from_json,
    overview_from_json,
    replicator_from_json,
)
from velamq.admin._http import HttpError
from velamq.admin._params import bool_param
from velamq.admin._peer_http import PeerError, peer_request
from velamq.admin._router import Call
from velamq.admin._routing import peer_refusal
from velamq.broker import BrokerOverview, TopicMetrics

log = RateLimitedLog(logging.getLogger("velamq.admin"))

peer_console_timeout_s: Final = 5.0


def _headers(call: Call) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    authorization = call.request.header("authorization")
    if authorization is not None:
        headers["Authorization"] = authorization
    return headers


async def _ask(call: Call, url: str, target: str) -> Any | None:
    """A peer's JSON, or None (logged) when it does not give it."""
    try:
        reply = await peer_request("GET", url.rstrip("/") + target, headers=_headers(call),
                                   timeout_s=peer_console_timeout_s, ssl_context=call.peer_ssl)
        if reply.status != 200:
            raise PeerError(f"HTTP {reply.status}")
        return json.loads(reply.body)
    except (PeerError, ValueError) as exc:
        log.warning(f"console peer {url}", "console figures of the worker at %s left out: %s", url, exc)
        return None


def gathers(call: Call) -> bool:
    """Whether this request gathers from the peers: several workers, and not itself a peer's."""
    return call.routing is not None and not bool_param(call, "local")


def own_status(call: Call, topics_loaded: int | None = None) -> WorkerStatus:
    """This worker as the console lists it (a one-process broker: worker 0)."""
    worker = 0 if call.routing is None else call.routing.worker_id
    return WorkerStatus(worker, call.web_service_url, True, os.getpid(), topics_loaded)


async def _from_peers(
    call: Call, target: str, parse: Callable[[Any], Any]
) -> list[tuple[WorkerStatus, Any | None]]:
    """Every peer's answer to `target` through `parse` (None where it gave none or `parse` refused
    it), with the peer's status: what it says of itself when it answered."""
    routing = call.routing
    assert routing is not None
    peers = await routing.peer_web_urls()
    answers = await asyncio.gather(*(_ask(call, url, target) for _, url in peers))
    found: list[tuple[WorkerStatus, Any | None]] = []
    for (worker, url), answer in zip(peers, answers, strict=True):
        parsed = None
        status = WorkerStatus(worker, url, False)
        if isinstance(answer, dict):
            try:
                parsed = parse(answer)
                me = answer.get("worker") or {}
                status = WorkerStatus(worker, url, True, me.get("pid"), me.get("topicsLoaded"))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning(f"console peer {url}", "console figures of the worker at %s left out: %r", url, exc)
        found.append((status, parsed))
    return found


def _sorted(statuses: Iterable[WorkerStatus]) -> Gathered:
    return Gathered(tuple(sorted(statuses, key=lambda w: w.worker_id)))


async def whole_overview(call: Call, busiest_max: int) -> tuple[BrokerOverview, Gathered]:
    """The broker's overview: this worker's, summed with every peer's that answered."""
    own = call.backend.broker_overview(busiest_max)
    me = own_status(call, own.topics_loaded)
    if not gathers(call):
        return own, Gathered((me,))
    answers = await _from_peers(call, "/console/data/overview?local=true", lambda d: overview_from_json(d)[0])
    overviews = [own, *(overview for _, overview in answers if overview is not None)]
    return merge_overviews(overviews, busiest_max), _sorted([me, *(status for status, _ in answers)])


def metrics_map_from_json(data: Mapping[str, Any]) -> dict[str, TopicMetrics]:
    return {str(name): metrics_from_json(m) for name, m in data["metrics"].items()}


@dataclass(frozen=True, slots=True)
class LoadedFigures:
    """Loaded topics' figures and replicators of every worker that answered, and the workers."""

    metrics: Mapping[str, TopicMetrics]
    replicators: tuple[ReplicatorRow, ...]
    gathered: Gathered


def _loaded_from_json(data: Mapping[str, Any]) -> tuple[dict[str, TopicMetrics], list[ReplicatorRow]]:
    return metrics_map_from_json(data), [replicator_from_json(r) for r in data.get("replicators", ())]


async def whole_loaded_figures(
    call: Call, names: list[str], peer_target: str, replicators: Iterable[ReplicatorRow] = ()
) -> LoadedFigures:
    """The figures of those of `names` loaded on any worker, and every worker's replicators (this
    one's are `replicators`); peers are asked `peer_target` (a console data path with ?local=true,
    whose answer has "metrics" and maybe "replicators")."""
    own = call.backend.loaded_topic_metrics(names)
    me = own_status(call)
    if not gathers(call):
        return LoadedFigures(own, tuple(replicators), Gathered((me,)))
    answers = await _from_peers(call, peer_target, _loaded_from_json)
    wanted = set(names)
    found = [parsed for _, parsed in answers if parsed is not None]
    metrics = merge_metrics([own, *({k: m for k, m in peer.items() if k in wanted} for peer, _ in found)])
    rows = (*replicators, *(row for _, peer_rows in found for row in peer_rows))
    return LoadedFigures(metrics, rows, _sorted([me, *(status for status, _ in answers)]))


async def owner_topic_data(call: Call, topic: str, target: str) -> dict[str, Any] | None:
    """One topic's console JSON from its owner (its answer to `target`), or None when this worker
    owns the topic. The owner's refusal is raised as velamq's error of its status, 503 if it is
    silent."""
    routing = call.routing
    owner = None if routing is None else await routing.topic_owner_web_url(topic, call.tls)
    if owner is None:
        return None
    try:
        reply = await peer_request("GET", owner.rstrip("/") + target, headers=_headers(call),
                                   timeout_s=peer_console_timeout_s, ssl_context=call.peer_ssl)
    except PeerError as exc:
        raise HttpError(503, f"the worker that owns {topic} did not answer: {exc}") from None
    if reply.status >= 400:
        raise peer_refusal(reply.status, reply.body)
    try:
        data = json.loads(reply.body)
    except ValueError:
        raise HttpError(503, f"the worker that owns {topic} answered no JSON") from None
    if not isinstance(data, dict) or "stats" not in data:
        raise HttpError(503, f"the worker that owns {topic} answered no figures")
    return data
