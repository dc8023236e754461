"""The web console in a real headless Chromium against a real broker process (OP-3).

The page renders, its figures are those of GET /admin/v2/.../stats for the same topic, names that
look like markup stay text, the rate charts draw, and paging and search work on 250 topics by
clicking through them. Waits are conditions with deadlines (the broker's figures settle, the rate
history takes its samples), never fixed sleeps.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from chromium import Chromium
from wait_helpers import wait_until

from velamq.testing import BrokerProcess, run_broker

NS = "public/console"
# Names a client may give (no "/" in a topic's local name) that would be markup if not escaped.
WEIRD_TOPIC = "persistent://public/console/<b>bold&\"quoted'<i>"
WEIRD_SUB = "sub-<i>x"
WEIRD_CONSUMER = 'cons"<b>1'
WEIRD_PRODUCER = "prod<script>alert(1)"
PAGED_TOPICS = 250


def http(method: str, url: str, body: bytes | None = None) -> Any:
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        data = reply.read()
    return json.loads(data) if data else None


def topic_path(topic: str) -> str:
    domain, rest = topic.split("://")
    tenant, ns, local = rest.split("/", 2)
    return f"{domain}/{tenant}/{ns}/{quote(local, safe='')}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose rate history samples every 0.5 s, so charts fill while the test waits."""
    config = tmp_path_factory.mktemp("console") / "broker.conf"
    config.write_text("rate_history_interval_s=0.5\n")
    with run_broker(extra_args=["--config", str(config)]) as b:
        http("PUT", f"{b.admin_url}/admin/v2/namespaces/{NS}", b"{}")
        yield b


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    with Chromium() as b:
        yield b


def test_topic_page_shows_what_stats_answers_and_draws_its_chart(
    broker: BrokerProcess, browser: Chromium, make_client: Callable[..., Any], tmp_path: Path
) -> None:
    import pulsar

    client = make_client(broker.service_url)
    consumer = client.subscribe(WEIRD_TOPIC, WEIRD_SUB, consumer_name=WEIRD_CONSUMER,
                                initial_position=pulsar.InitialPosition.Earliest)
    client.subscribe(WEIRD_TOPIC, "idle", consumer_type=pulsar.ConsumerType.Shared,
                     initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=5)
    producer = client.create_producer(WEIRD_TOPIC, producer_name=WEIRD_PRODUCER, batching_enabled=False)
    for i in range(40):
        producer.send(f"m{i}".encode())
    for _ in range(25):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))

    base = broker.admin_url
    page_url = f"{base}/console/topics/{topic_path(WEIRD_TOPIC)}"
    stats_url = f"{base}/admin/v2/{topic_path(WEIRD_TOPIC)}/stats"

    def page_figures() -> dict[str, Any]:
        browser.open(page_url)
        subs: dict[str, Any] = browser.evaluate("""
            Object.fromEntries(Array.from(document.querySelectorAll('table.subscriptions tbody tr'), tr => [
              tr.dataset.subscription,
              Object.fromEntries(Array.from(tr.querySelectorAll('[data-stat]'),
                                            td => [td.dataset.stat, td.textContent]))
            ]))""")
        return {
            "msgInCounter": browser.text("table.summary [data-stat=msgInCounter]"),
            "msgOutCounter": browser.text("table.summary [data-stat=msgOutCounter]"),
            "storageSize": browser.attribute("table.summary [data-stat=storageSize]", "data-value"),
            "subscriptions": {
                name: (s["type"], s["msgBacklog"], s["unackedMessages"], s["msgOutCounter"])
                for name, s in subs.items()
            },
            "consumers": sorted(browser.all_attributes("table.consumers tbody tr", "data-consumer")),
            "producers": browser.all_attributes("table.producers tbody tr", "data-producer"),
        }

    def stats_figures() -> dict[str, Any]:
        stats = http("GET", stats_url)
        return {
            "msgInCounter": str(stats["msgInCounter"]),
            "msgOutCounter": str(stats["msgOutCounter"]),
            "storageSize": str(stats["storageSize"]),
            "subscriptions": {
                name: (s["type"], str(s["msgBacklog"]), str(s["unackedMessages"]), str(s["msgOutCounter"]))
                for name, s in stats["subscriptions"].items()
            },
            "consumers": sorted(c["consumerName"] for s in stats["subscriptions"].values() for c in s["consumers"]),
            "producers": [p["producerName"] for p in stats["publishers"]],
        }

    # The acknowledgements reach the broker (the client sends them in the background) and the figures
    # settle; then the page and the REST API agree on every figure.
    wait_until(lambda: stats_figures()["subscriptions"].get(WEIRD_SUB, ("", ""))[1] == "15", "the acks to land")

    def agree() -> dict[str, Any] | None:
        before = stats_figures()
        shown = page_figures()
        return shown if shown == before == stats_figures() else None

    shown = wait_until(agree, "the console to show what /stats answers")
    assert shown["msgInCounter"] == "40"
    assert shown["subscriptions"][WEIRD_SUB] == ("Exclusive", "15", "15", "40")
    assert shown["subscriptions"]["idle"][0] == "Shared"
    assert shown["producers"] == [WEIRD_PRODUCER] and WEIRD_CONSUMER in shown["consumers"]

    # Names that look like markup are text: the title is the name itself, and no element came of them.
    assert browser.text("h1") == WEIRD_TOPIC
    assert browser.evaluate("document.querySelectorAll('main b, main i, script').length") == 0

    # The chart: an SVG polyline per direction, with the samples taken since the traffic.
    def chart_points() -> int:
        browser.open(page_url)
        count = browser.evaluate(
            "(p => p === null ? 0 : p.points.numberOfItems)(document.querySelector('svg.rate-chart polyline.rate-in'))"
        )
        return int(count) if count >= 3 else 0

    points = wait_until(chart_points, "three samples in the topic's rate chart")
    assert browser.attribute("svg.rate-chart polyline.rate-out", "data-points") == str(points)
    assert browser.evaluate("document.querySelector('svg.rate-chart polyline.rate-in').points.numberOfItems") == points
    browser.screenshot(tmp_path / "topic.png")

    # The overview draws the broker's chart and links the namespace.
    browser.open(f"{base}/")
    assert int(browser.attribute("svg.rate-chart", "data-samples") or 0) >= 2
    browser.click(f"table.namespaces tr[data-namespace='{NS}'] a")
    assert browser.url == f"{base}/console/namespaces/public/console"


def test_paging_and_search_over_250_topics(broker: BrokerProcess, browser: Chromium, tmp_path: Path) -> None:
    base = broker.admin_url
    http("PUT", f"{base}/admin/v2/namespaces/public/paging", b"{}")
    names = [f"page-topic-{i:03d}" for i in range(PAGED_TOPICS)]
    for name in names:
        http("PUT", f"{base}/admin/v2/persistent/public/paging/{name}")

    def shown() -> list[str]:
        return [t.rsplit("/", 1)[1] for t in browser.all_attributes("table.topics tbody tr", "data-topic")]

    browser.open(f"{base}/console/namespaces/public/paging")
    assert browser.attribute("p.summary", "data-total") == str(PAGED_TOPICS)
    assert shown() == names[:50]

    browser.click("div.pager a[rel=next]")
    assert browser.url.endswith("/console/namespaces/public/paging?page=2")
    assert shown() == names[50:100]
    assert browser.text("div.pager span.current") == "2"

    browser.click("div.pager a[rel=last]")
    assert shown() == names[200:250]
    browser.click("div.pager a[rel=prev]")
    assert shown() == names[150:200]
    browser.screenshot(tmp_path / "paging.png")

    # Search narrows, and paging stays within the matches.
    browser.type_into("form.search input[name=q]", "-1")
    browser.click("form.search button[type=submit]")
    matching = [n for n in names if "-1" in n]  # page-topic-1xx
    assert browser.attribute("p.summary", "data-total") == str(len(matching)) == "100"
    assert shown() == matching[:50]
    browser.click("div.pager a[rel=next]")
    assert shown() == matching[50:100]
    assert browser.count("div.pager a[rel=next]") == 0  # the last page of the matches

    browser.type_into("form.search input[name=q]", "TOPIC-24")  # any case
    browser.click("form.search button[type=submit]")
    assert shown() == names[240:250]
