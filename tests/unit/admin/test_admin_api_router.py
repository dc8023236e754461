"""The route table: parameters, constrained segments, specificity, 404 and 405."""

from __future__ import annotations

import pytest

from velamq.admin._http import HttpError, Response
from velamq.admin._router import Call, Router
from velamq.admin._server import build_router


def _handler(tag: str):  # type: ignore[no-untyped-def]
    async def handle(call: Call) -> Response:
        return Response.text(tag)

    handle.tag = tag  # type: ignore[attr-defined]
    return handle


def _tag(router: Router, method: str, path: str) -> tuple[str, dict[str, str]]:
    handler, params = router.resolve(method, tuple(path.split("/")[1:]))
    return handler.tag, params  # type: ignore[attr-defined]


@pytest.fixture
def router() -> Router:
    r = Router()
    r.add("GET", "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}", _handler("topic"))
    r.add("GET", "/admin/v2/namespaces/{tenant}/{namespace}/topics", _handler("ns-topics"))
    r.add("GET", "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/partitioned", _handler("parted"))
    r.add("PUT", "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}", _handler("create"))
    r.add("GET", "/a/{x}/{y}", _handler("free"))
    r.add("GET", "/a/{x}/lit", _handler("lit"))
    return r


def test_parameters_are_extracted(router: Router) -> None:
    assert _tag(router, "GET", "/admin/v2/persistent/t/ns/x") == (
        "topic", {"domain": "persistent", "tenant": "t", "namespace": "ns", "topic": "x"},
    )


def test_literal_beats_parameter(router: Router) -> None:
    assert _tag(router, "GET", "/admin/v2/namespaces/t/ns/topics")[0] == "ns-topics"
    assert _tag(router, "GET", "/admin/v2/persistent/t/ns/partitioned")[0] == "parted"
    assert _tag(router, "GET", "/a/1/lit")[0] == "lit"
    assert _tag(router, "GET", "/a/1/other") == ("free", {"x": "1", "y": "other"})


def test_method_picks_among_matches(router: Router) -> None:
    # PUT on ".../partitioned" is not the GET-only literal route: it creates a topic named so.
    assert _tag(router, "PUT", "/admin/v2/persistent/t/ns/partitioned")[0] == "create"
    assert _tag(router, "HEAD", "/admin/v2/persistent/t/ns/x")[0] == "topic"


def test_constrained_segment_refuses_other_values(router: Router) -> None:
    with pytest.raises(HttpError) as err:
        router.resolve("GET", ("admin", "v2", "durable", "t", "ns", "x"))
    assert err.value.status == 404


def test_405_lists_allowed_methods(router: Router) -> None:
    with pytest.raises(HttpError) as err:
        router.resolve("DELETE", ("admin", "v2", "persistent", "t", "ns", "x"))
    assert err.value.status == 405
    assert err.value.headers == (("Allow", "GET, HEAD, PUT"),)


def test_empty_segment_never_matches_a_parameter(router: Router) -> None:
    with pytest.raises(HttpError):
        router.resolve("GET", ("a", "", "y"))


def test_bad_and_duplicate_patterns_are_refused() -> None:
    r = Router()
    r.add("GET", "/x/{a}", _handler("1"))
    with pytest.raises(ValueError, match="duplicate"):
        r.add("GET", "/x/{b}", _handler("2"))
    with pytest.raises(ValueError):
        r.add("GET", "x", _handler("3"))
    with pytest.raises(ValueError):
        r.add("GET", "/x/{1bad}", _handler("4"))


def test_the_server_route_table_has_every_endpoint() -> None:
    table = {(r.method, r.pattern) for r in build_router().routes}
    topic = "/admin/v2/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    for method, pattern in [
        ("GET", "/admin/v2/clusters"), ("GET", "/admin/v2/clusters/{cluster}"), ("PUT", "/admin/v2/clusters/{cluster}"),
        ("GET", "/admin/v2/tenants"), ("PUT", "/admin/v2/tenants/{tenant}"), ("GET", "/admin/v2/tenants/{tenant}"),
        ("POST", "/admin/v2/tenants/{tenant}"), ("DELETE", "/admin/v2/tenants/{tenant}"),
        ("GET", "/admin/v2/namespaces/{tenant}"), ("PUT", ns), ("GET", ns), ("DELETE", ns),
        ("POST", ns + "/deduplication"), ("GET", ns + "/deduplication"),
        ("PUT", ns + "/schemaCompatibilityStrategy"), ("GET", ns + "/topics"),
        ("PUT", topic + "/partitions"), ("GET", topic + "/partitions"), ("POST", topic + "/partitions"),
        ("DELETE", topic + "/partitions"), ("PUT", topic), ("DELETE", topic),
        ("GET", "/lookup/v2/topic/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"),
        ("GET", "/metrics"), ("GET", "/admin/v2/brokers/health"), ("GET", "/"),
    ]:
        assert (method, pattern) in table, (method, pattern)


def _full_scan(router: Router, method: str, segments: tuple[str, ...]) -> tuple[str, object]:
    """What resolve_route must answer: the first matching route of the whole table, else 405/404."""
    wanted = "GET" if method == "HEAD" else method
    allowed = set()
    for route in router.routes:
        params = route.match(segments)
        if params is not None:
            if route.method == wanted:
                return route.pattern, params
            allowed.add(route.method)
    return ("405", None) if allowed else ("404", None)


def test_the_index_answers_as_a_scan_of_every_route_would() -> None:
    # For every route of the real table: paths built from it (its literals, a value of each
    # constrained segment, free values), with the indexed segment also replaced by another value.
    router = build_router()
    values = ["persistent", "non-persistent", "namespaces", "tenants", "public", "default", "x", "stats"]
    checked = 0
    for route in router.routes:
        for shift in range(3):
            segments = tuple(
                s.literal if s.literal is not None else sorted(s.choices)[shift % len(s.choices)] if s.choices
                else values[(i + shift) % len(values)]
                for i, s in enumerate(route.segments)
            )
            paths = [segments] + ([(*segments[:2], "other", *segments[3:])] if len(segments) > 3 else [])
            for path in paths:
                for method in ("GET", "HEAD", "PUT", "POST", "DELETE"):
                    expected = _full_scan(router, method, path)
                    try:
                        found, params = router.resolve_route(method, path)
                        got: tuple[str, object] = (found.pattern, params)
                    except HttpError as exc:
                        got = (str(exc.status), None)
                    assert got == expected, (method, path)
                    checked += 1
    assert checked > 1000


def test_routes_added_after_a_lookup_are_found() -> None:
    r = Router()
    r.add("GET", "/admin/v2/a/{x}", _handler("a"))
    assert _tag(r, "GET", "/admin/v2/a/1")[0] == "a"
    r.add("GET", "/admin/v2/{y}/{x}", _handler("free"))
    r.add("GET", "/admin/v2/b/{x}", _handler("b"))
    assert [_tag(r, "GET", f"/admin/v2/{k}/1")[0] for k in ("a", "b", "c")] == ["a", "b", "free"]
