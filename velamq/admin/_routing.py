"""Serving the admin API of a broker made of several worker processes: who owns what, redirects,
and calls to the owner of a partition (docs/workers.md, "Admin").

    server = AdminServer(backend, host, port, routing=routing)   # routing: a WorkerRouting

Without routing (one process) nothing here changes a reply. With it, every worker's admin server
answers for the whole broker, as the brokers of a Pulsar cluster do for each other:

- A route that acts on a live topic (stats, subscriptions, unload, messages, offload, terminate,
  compaction, delete...) is registered through `by_owner`: for a topic another worker owns the reply
  is `307 Temporary Redirect` with `Location: <owner's web URL><same path and query>`; the client
  repeats the request there with the same method and body (pulsar-admin, velamq's AdminClient and
  CLI do). A partitioned topic's own name is served where it arrives: its operations fan out to
  the partitions (`on_partition`).
- `on_partition` runs a per-partition action here when this worker owns the partition, else asks
  the owner over HTTP (`_peer_http.py`) with the partition's own path, the caller's credentials
  and the same method, query and body, and turns its reply back into the action's result. Pulsar's
  admin does the same with its internal admin client when it fans a partitioned topic out.
- The namespace operations on loaded topics (unload, clear-backlog, unsubscribe) act on this
  worker's topics and ask every peer to do the same on theirs (`on_every_peer`, `?local=true`).
- Metadata routes (tenants, namespaces, policies, permissions, schemas, partitioned-topic metadata)
  are served by any worker: the metadata is shared.

WorkerRouting (_worker_routing.py) is the boundary: the worker supervisor implements it over the
shared metadata's `workers` and `bundle_owners` tables.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar
from urllib.parse import quote

from velamq._errors import AlreadyExistsError, InvalidTopicNameError, NotFoundError, PreconditionFailedError
from velamq._topic_name import TopicName
from velamq.admin._access import topic_name
from velamq.admin._http import HttpError, Request, Response
from velamq.admin._peer_http import PeerError, peer_request
from velamq.admin._router import Call, Handler
from velamq.security import SecuritySettings

T = TypeVar("T")

# How long a call to the owner of a partition may take (the whole request is bounded as well).
peer_call_timeout_s: Final = 20.0
# Where the topic's segment is in /admin/v2/{domain}/{tenant}/{namespace}/{topic}/...
_TOPIC_SEGMENT: Final = 5


def peer_ssl_context(settings: SecuritySettings | None) -> ssl.SSLContext | None:
    """The TLS context for calls to a peer's https port: the broker's trust file (else the system's
    CAs) and, when the broker has a certificate, that one as the client certificate (peers that
    require trusted client certificates accept their sibling). None without TLS settings."""
    tls = settings.tls if settings is not None else None
    if tls is None:
        return None
    context = ssl.create_default_context(cafile=str(tls.trust_certs_file) if tls.trust_certs_file else None)
    if tls.allow_insecure_connection:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    return context


def path_and_query(request: Request) -> str:
    """The request's path and query as it was sent (what a redirect repeats)."""
    target = request.target
    if not target.startswith("/"):  # absolute-form: keep what follows the authority
        rest = target.split("://", 1)[-1]
        target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    return target.partition("#")[0]


def redirect(owner_web_url: str, request: Request) -> Response:
    return Response(307, b"", None, (("Location", owner_web_url.rstrip("/") + path_and_query(request)),))


async def _is_partitioned(call: Call, topic: TopicName) -> bool:
    return topic.partition_index < 0 and await call.backend.metadata.get_partitions(str(topic)) > 0


def by_owner(handler: Handler) -> Handler:
    """A route about a live topic: 307 to the worker that owns the topic, served here otherwise
    (or when the name is a partitioned topic's, whose handler fans out to the partitions)."""

    async def serve(call: Call) -> Response:
        routing = call.routing
        if routing is None:
            return await handler(call)
        try:
            topic = topic_name(call.params)
        except InvalidTopicNameError:
            return await handler(call)  # the handler answers the bad name (412)
        if not await _is_partitioned(call, topic):
            owner = await routing.topic_owner_web_url(str(topic), call.tls)
            if owner is not None:
                return redirect(owner, call.request)
        return await handler(call)

    return serve


# ---- per-partition calls --------------------------------------------------------------------------


def partition_path(call: Call, partition: TopicName, suffix: tuple[str, ...] | None) -> str:
    """The request's path with the partition's name in the topic's place; `suffix` replaces what
    follows the topic (None keeps the request's)."""
    segments = list(call.request.segments)
    tail = segments[_TOPIC_SEGMENT + 1:] if suffix is None else list(suffix)
    parts = [*segments[:_TOPIC_SEGMENT], partition.local_name, *tail]
    return "/" + "/".join(quote(part, safe="") for part in parts)


async def on_partition(
    call: Call,
    partition: TopicName,
    action: Callable[[str], Awaitable[T]],
    from_json: Callable[[Any], T],
    *,
    suffix: tuple[str, ...] | None = None,
    keep_query: bool = True,
) -> T:
    """`action(partition)` here, or the same request made to the partition's owner; its JSON reply
    becomes the result through `from_json`. The owner's refusal is raised as velamq's error of its
    status (NotFoundError for 404...), so callers treat both paths alike."""
    routing = call.routing
    owner = None if routing is None else await routing.topic_owner_web_url(str(partition), call.tls)
    if owner is None:
        return await action(str(partition))
    request = call.request
    url = owner.rstrip("/") + partition_path(call, partition, suffix)
    query = path_and_query(request).partition("?")[2]
    if keep_query and query:
        url += "?" + query
    headers = {"Accept": "application/json"}
    authorization = request.header("authorization")
    if authorization is not None:
        headers["Authorization"] = authorization
    body = request.body if suffix is None else b""
    if body:
        headers["Content-Type"] = request.header("content-type") or "application/json"
    try:
        reply = await peer_request(request.method, url, body=body, headers=headers, timeout_s=peer_call_timeout_s,
                                   ssl_context=call.peer_ssl)
    except PeerError as exc:
        raise HttpError(503, f"the worker that owns {partition} did not answer: {exc}") from None
    if reply.status >= 400:
        raise peer_refusal(reply.status, reply.body)
    return from_json(json.loads(reply.body) if reply.body.strip() else None)


def peer_refusal(status: int, body: bytes) -> Exception:
    try:
        reason = str(json.loads(body).get("reason", ""))
    except (ValueError, AttributeError):
        reason = body.decode("utf-8", "replace")[:500]
    if status == 404:
        return NotFoundError(reason)
    if status == 409:
        return AlreadyExistsError(reason)
    if status == 412:
        return PreconditionFailedError(reason)
    return HttpError(status, reason)


async def on_every_peer(call: Call) -> None:
    """The same request made to every other worker with `local=true` (each acts on what it holds),
    for the namespace operations on loaded topics (unload, clear-backlog, unsubscribe), as a Pulsar
    broker asks the owner of each bundle. Nothing when this request is itself a peer's
    (`local=true`) or there is one process. The first refusal is raised after every peer was asked."""
    routing = call.routing
    if routing is None or call.request.query_param("local") == "true":
        return
    request = call.request
    target = path_and_query(request)
    target += ("&" if "?" in target else "?") + "local=true"
    headers = {"Accept": "application/json"}
    authorization = request.header("authorization")
    if authorization is not None:
        headers["Authorization"] = authorization
    failure: Exception | None = None
    for worker, url in await routing.peer_web_urls():
        try:
            reply = await peer_request(request.method, url.rstrip("/") + target, body=request.body, headers=headers,
                                       timeout_s=peer_call_timeout_s, ssl_context=call.peer_ssl)
        except PeerError as exc:
            failure = failure or HttpError(503, f"worker {worker} did not answer: {exc}")
            continue
        if reply.status >= 400:
            failure = failure or peer_refusal(reply.status, reply.body)
    if failure is not None:
        raise failure


def no_result(_: Any) -> None:
    """from_json for actions whose reply is empty (204)."""
    return None
