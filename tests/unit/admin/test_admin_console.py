"""The web console's pages over HTTP from a real in-process broker: what they show, that every
client-given string is escaped, the security headers, paging edges, HTML 404s; and the SVG chart
drawn from fixed rate series. The page in a real browser is tests/browser's."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from admin_harness import Admin, Reply
from wait_helpers import wait_until

from velamq.admin._console_charts import _round_max, rate_chart
from velamq.broker import RateSeries

NS_URL = "/console/namespaces/public/default"


def _page(reply: Reply) -> str:
    assert reply.status == 200, reply.body[:300]
    assert reply.headers["content-type"] == "text/html; charset=utf-8"
    csp = reply.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp  # no script may run at all
    assert reply.headers["x-content-type-options"] == "nosniff"
    return reply.body.decode()


def _create(admin: Admin, local: str) -> None:
    assert admin.request("PUT", f"/admin/v2/persistent/public/default/{quote(local, safe='')}").status == 204


def _rows(page: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<tr[^>]* data-topic='([^']*)'", page)]


def test_overview_shows_namespaces_connections_and_the_broker_chart(admin: Admin) -> None:
    for i in range(3):
        _create(admin, f"o-{i}")
    assert admin.request("PUT", "/admin/v2/tenants/acme", '{"allowedClusters": ["standalone"]}').status == 204
    assert admin.request("PUT", "/admin/v2/namespaces/acme/<ns>").status in (412, 400)  # refused name
    assert admin.request("PUT", "/admin/v2/namespaces/acme/orders").status == 204
    page = _page(admin.request("GET", "/"))
    assert "data-namespace='public/default'" in page and "<td data-stat='topics'>3</td>" in page
    assert f"href='{NS_URL}'" in page and "href='/console/namespaces/acme/orders'" in page
    assert f"pulsar://127.0.0.1:{admin.broker.server.broker_port}" in page
    assert "msg/s in and out, whole broker" in page  # the broker chart (or its "no samples yet" note)
    assert "<meta http-equiv='refresh'" not in page  # no self-reload unless asked
    assert "<meta http-equiv='refresh' content='10'>" in _page(admin.request("GET", "/?refresh=10"))
    assert "<meta http-equiv='refresh' content='2'>" in _page(admin.request("GET", "/?refresh=1"))  # floor


def test_namespace_page_pages_and_searches_in_the_store(admin: Admin) -> None:
    names = [f"t-{i:03d}" for i in range(120)]
    for name in names:
        _create(admin, name)
    assert admin.request("PUT", "/admin/v2/persistent/public/default/parts/partitions", "2").status == 204

    page = _page(admin.request("GET", NS_URL))
    assert "data-total='121'" in page
    expected = ["persistent://public/default/parts", *(f"persistent://public/default/{n}" for n in names[:49])]
    assert _rows(page) == expected
    assert "partitioned (2)" in page and "not loaded" in page
    assert f"href='{NS_URL}?page=2'" in page and f"href='{NS_URL}?page=3'" in page

    page3 = _page(admin.request("GET", f"{NS_URL}?page=3"))
    assert _rows(page3)[-1] == "persistent://public/default/t-119" and len(_rows(page3)) == 21
    assert "rel='next'" not in page3
    # Past the end: the last page. Not a number: the first. A custom size.
    assert _rows(_page(admin.request("GET", f"{NS_URL}?page=99"))) == _rows(page3)
    assert _rows(_page(admin.request("GET", f"{NS_URL}?page=x"))) == _rows(page)
    assert len(_rows(_page(admin.request("GET", f"{NS_URL}?size=10&page=2")))) == 10

    found = _page(admin.request("GET", f"{NS_URL}?q=T-11"))
    assert _rows(found) == [f"persistent://public/default/t-11{i}" for i in range(10)]
    # The search string is echoed escaped in the form, and percent-encoded in the page links.
    search = "a'&\"<b>"
    weird = _page(admin.request("GET", f"{NS_URL}?q={quote(search)}"))
    assert f"value='{html.escape(search, quote=True)}'" in weird and "<b>" not in weird
    assert "data-total='0'" in weird and "no topic matches" in weird


def test_topic_page_escapes_every_client_given_name(admin: Admin) -> None:
    topic = "persistent://public/default/<b>t&'\"x"
    client = admin.client()
    consumer = client.subscribe(topic, "<i>sub'", consumer_name="<script>c", initial_position="earliest")
    producer = client.create_producer(topic, producer_name="p<img src=x onerror=alert(1)>")
    for i in range(5):
        producer.send(b"m%d" % i)
    for _ in range(5):
        consumer.acknowledge(consumer.receive(timeout_ms=10_000))

    url = "/console/topics/persistent/public/default/" + quote("<b>t&'\"x", safe="")
    wait_until(lambda: "data-stat='msgInCounter' data-value='5'" in _page(admin.request("GET", url)))
    page = _page(admin.request("GET", url))
    for raw in ("<b>", "<i>", "<script>", "<img"):
        assert raw not in page
    assert html.escape(topic, quote=True) in page
    for name in ("<i>sub'", "<script>c", "p<img src=x onerror=alert(1)>"):
        assert html.escape(name, quote=True) in page
    assert "data-stat='type' data-value='Exclusive'" in page

    # The topic appears in its namespace's list, loaded, with its figures.
    listing = _page(admin.request("GET", f"{NS_URL}?q={quote('<b>t')}"))
    assert _rows(listing) == [topic] and "data-stat='producers' data-value='1'" in listing


def test_partitioned_topic_page_lists_its_partitions(admin: Admin) -> None:
    assert admin.request("PUT", "/admin/v2/persistent/public/default/pt/partitions", "3").status == 204
    admin.client().create_producer("persistent://public/default/pt-partition-1")
    page = _page(admin.request("GET", "/console/topics/persistent/public/default/pt"))
    assert _rows(page) == [f"persistent://public/default/pt-partition-{i}" for i in range(3)]
    assert page.count("not loaded") == 2  # partition 1 is loaded (its producer)


def test_unknown_names_answer_an_html_404(admin: Admin) -> None:
    for path in ("/console/topics/persistent/public/default/nope", "/console/namespaces/public/nope",
                 "/console/topics/persistent/public/nope/x"):
        reply = admin.request("GET", path)
        assert reply.status == 404 and reply.headers["content-type"].startswith("text/html")
        assert "content-security-policy" in reply.headers and "Not found" in reply.body.decode()
    # An encoded "/" in a namespace part is refused, as the REST API refuses it.
    assert admin.request("GET", "/console/namespaces/public/a%2Fb").status == 404


# ---- charts -------------------------------------------------------------------------------------


def _points(svg: str, cls: str) -> list[tuple[float, float]]:
    match = re.search(rf"<polyline class='{cls}' data-points='(\d+)' points='([^']*)'", svg)
    assert match is not None
    points = [tuple(float(v) for v in p.split(",")) for p in match.group(2).split()]
    assert len(points) == int(match.group(1))
    return points  # type: ignore[return-value]


def test_chart_draws_one_point_per_sample_newest_at_the_right() -> None:
    series = RateSeries(5.0, 120, 1_700_000_000_000, (0.0, 40.0, 80.0), (10.0, 10.0, 0.0))
    svg = rate_chart(series, "t")
    rate_in, rate_out = _points(svg, "rate-in"), _points(svg, "rate-out")
    assert len(rate_in) == len(rate_out) == 3
    assert [x for x, _ in rate_in] == [x for x, _ in rate_out] and rate_in[-1][0] > rate_in[0][0]
    ys = [y for _, y in rate_in]
    assert ys[0] > ys[1] > ys[2]  # rising rate: the line goes up (SVG y grows downwards)
    assert "in 80.0 msg/s" in svg and "out 0.0 msg/s" in svg and "-10 min" in svg
    assert "no samples yet" in rate_chart(RateSeries(5.0, 120, 0, (), ()), "t")


def test_chart_axis_tops_are_round() -> None:
    assert [_round_max(v) for v in (0, 0.4, 1, 1.2, 7, 12, 99, 100, 101, 4500)] == [
        1, 1, 1, 2, 10, 20, 100, 100, 200, 5000
    ]
