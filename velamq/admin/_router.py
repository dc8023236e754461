"""The route table: (method, path pattern) -> handler, with path parameters.

Patterns are "/"-separated segments; each is a literal, `{name}` (any one segment) or
`{name:a|b}` (one of the listed values). Segments are matched after percent-decoding, so an
encoded "/" inside a topic name stays inside its segment.

When several patterns match a path, the most specific wins, segment by segment from the left:
literal before alternatives before a free parameter. So "/admin/v2/namespaces/{t}/{ns}/topics"
beats "/admin/v2/{domain}/{t}/{ns}/{topic}" even without the domain's alternatives. A path that
matches but not with that method is 405 (with Allow); no match at all is 404. HEAD is served by
the GET handler (the server drops the body).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from velamq.admin._auth_http import OPEN_CALLER, AdminSecurity, Caller
from velamq.admin._http import HttpError, Request, Response

if TYPE_CHECKING:
    from velamq.admin._backend import BrokerBackend
    from velamq.admin._replication_control import ReplicationControl
    from velamq.admin._worker_routing import WorkerRouting


@dataclass(frozen=True, slots=True)
class Call:
    """What a handler gets: the broker, the request, the path parameters, this server's URLs, who
    called (its role, already authenticated and authorized for the route), the server's security
    (whose authorization model routes update after they change tenants or grants) and, in a broker
    of several workers, who owns what."""

    backend: BrokerBackend
    request: Request
    params: Mapping[str, str]
    web_service_url: str  # "http://host:port" of this admin server ("https://..." if TLS only)
    web_service_url_tls: str | None = None  # "https://host:port" when the server has a TLS port
    caller: Caller = OPEN_CALLER
    security: AdminSecurity | None = None
    replication: ReplicationControl | None = None  # the server's geo-replication, if it has one
    routing: WorkerRouting | None = None  # the workers of a multi-process broker (_routing.py)
    tls: bool = False  # the request came over https (redirects then point at https URLs)
    peer_ssl: ssl.SSLContext | None = None  # for calls to another worker's https port


Handler = Callable[[Call], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class _Segment:
    literal: str | None = None  # a literal segment
    name: str | None = None  # a parameter's name
    choices: frozenset[str] | None = None  # allowed values of a constrained parameter

    @property
    def rank(self) -> int:
        return 0 if self.literal is not None else 1 if self.choices is not None else 2

    def matches(self, value: str) -> bool:
        if self.literal is not None:
            return value == self.literal
        if self.choices is not None:
            return value in self.choices
        return value != ""


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: str
    handler: Handler
    segments: tuple[_Segment, ...]

    @property
    def shape(self) -> tuple[tuple[str | None, frozenset[str] | None], ...]:
        return tuple((s.literal, s.choices) for s in self.segments)

    @property
    def specificity(self) -> tuple[int, ...]:
        return tuple(s.rank for s in self.segments)

    def match(self, segments: tuple[str, ...]) -> dict[str, str] | None:
        if len(segments) != len(self.segments):
            return None
        params: dict[str, str] = {}
        for pattern, value in zip(self.segments, segments, strict=True):
            if not pattern.matches(value):
                return None
            if pattern.name is not None:
                params[pattern.name] = value
        return params


def _parse_pattern(pattern: str) -> tuple[_Segment, ...]:
    if not pattern.startswith("/"):
        raise ValueError(f"route pattern must start with '/': {pattern!r}")
    segments: list[_Segment] = []
    for part in pattern.split("/")[1:]:
        if part.startswith("{") and part.endswith("}"):
            name, _, choices = part[1:-1].partition(":")
            if not name.isidentifier():
                raise ValueError(f"bad parameter {part!r} in {pattern!r}")
            segments.append(_Segment(name=name, choices=frozenset(choices.split("|")) if choices else None))
        else:
            segments.append(_Segment(literal=part))
    return tuple(segments)


# The segment whose literal value indexes the routes of one length ("/admin/v2/<this>/..."): a
# request is matched only against the routes with that literal there or a parameter.
_INDEX_SEGMENT = 2


class Router:
    def __init__(self) -> None:
        self._routes: list[Route] = []
        # By segment count: (routes by their literal at _INDEX_SEGMENT, routes with a parameter
        # there), each list in the table's order (most specific first). Built on first use after
        # a change: a scan of the ~200 routes cost ~100 µs per request.
        self._index: dict[int, tuple[dict[str, list[Route]], list[Route]]] | None = None

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        route = Route(method.upper(), pattern, handler, _parse_pattern(pattern))
        for existing in self._routes:
            # Same method and same shape (parameter names aside): the later one could never match.
            if existing.method == route.method and existing.shape == route.shape:
                raise ValueError(f"duplicate route {method} {pattern} (same as {existing.pattern})")
        self._routes.append(route)
        # Most specific first, so resolve() can take the first match.
        self._routes.sort(key=lambda r: r.specificity)
        self._index = None

    def _build_index(self) -> dict[int, tuple[dict[str, list[Route]], list[Route]]]:
        index: dict[int, tuple[dict[str, list[Route]], list[Route]]] = {}
        for route in self._routes:
            literals, free = index.setdefault(len(route.segments), ({}, []))
            key = route.segments[_INDEX_SEGMENT].literal if len(route.segments) > _INDEX_SEGMENT else None
            if key is None:
                free.append(route)
                for routes in literals.values():
                    routes.append(route)
            else:
                literals.setdefault(key, list(free)).append(route)
        return index

    def _candidates(self, segments: tuple[str, ...]) -> list[Route]:
        """Every route that can match `segments`, in the table's order."""
        index = self._index
        if index is None:
            index = self._index = self._build_index()
        bucket = index.get(len(segments))
        if bucket is None:
            return []
        literals, free = bucket
        if len(segments) > _INDEX_SEGMENT:
            return literals.get(segments[_INDEX_SEGMENT], free)
        return free

    @property
    def routes(self) -> tuple[Route, ...]:
        return tuple(self._routes)

    def resolve(self, method: str, segments: tuple[str, ...]) -> tuple[Handler, dict[str, str]]:
        """The handler and path parameters for a request; HttpError 404 or 405 if there is none."""
        route, params = self.resolve_route(method, segments)
        return route.handler, params

    def resolve_route(self, method: str, segments: tuple[str, ...]) -> tuple[Route, dict[str, str]]:
        """The route (its pattern names its access rule) and path parameters; 404 or 405."""
        wanted = "GET" if method == "HEAD" else method
        allowed: set[str] = set()
        for route in self._candidates(segments):
            params = route.match(segments)
            if params is None:
                continue
            if route.method == wanted:
                return route, params
            allowed.add(route.method)
        if allowed:
            if "GET" in allowed:
                allowed.add("HEAD")
            raise HttpError(405, "Method not allowed", headers=(("Allow", ", ".join(sorted(allowed))),))
        raise HttpError(404, "Not found")
