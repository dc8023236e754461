"""The web console of a broker made of several workers covers every worker (_console_views.py,
_console_gather.py), on two real in-process brokers with admin servers over a shared table of
owners (test_admin_worker_routing.py's harness):

- the overview (page and /console/data/overview) sums both workers' figures and lists the workers;
- the namespace page and a partitioned topic's page show figures of topics loaded on the other worker;
- a topic's page is drawn by the worker asked, from the owner's figures: no redirect;
- a worker that does not answer is left out and the page says so;
- with authentication on, the caller's credentials travel to the peer (else it would refuse);
- and, with no I/O, how rate histories and topic figures of several workers add up.
"""

from __future__ import annotations

import base64
import html
import http.client
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from security_harness import SUPERUSERS, security_properties
from test_admin_worker_routing import PARTITIONED, TOPIC, Cluster, TableRouting, Workers, running_workers
from wait_helpers import wait_until

from velamq.admin import AdminServer
from velamq.admin._console_data import (
    ReplicatorRow,
    merge_metrics,
    merge_series,
    metrics_from_json,
    metrics_json,
    replicator_from_json,
    replicator_json,
)
from velamq.admin._console_replication import namespace_section
from velamq.broker import BrokerAdmin, RateSeries, SubscriptionMetrics, TopicMetrics
from velamq.client import AdminClient
from velamq.replication import ReplicatorStats
from velamq.security import (
    AuthorizationModel,
    SecuritySettings,
    build_authentication_service,
    create_secret_key,
    create_token,
)
from velamq.testing import BrokerThread, free_port
from velamq.testing._certs import make_test_pki

pytestmark = pytest.mark.timeout(120)

HERE = "persistent://public/default/on-worker-0"


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workers]:
    with running_workers(tmp_path) as workers:
        yield workers


def _get(ws: Workers, worker: int, path: str) -> tuple[int, dict[str, str], str]:
    status, headers, body = ws.raw(worker, "GET", path)
    return status, headers, body.decode()


def _json(ws: Workers, worker: int, path: str) -> Any:
    status, _, body = _get(ws, worker, path)
    assert status == 200, body[:300]
    return json.loads(body)


def _producer(ws: Workers, worker: int, topic: str, count: int) -> None:
    """A producer left open on `worker` (the topic stays loaded there) after `count` messages."""
    producer = ws.client(worker).create_producer(topic)
    for i in range(count):
        producer.send(f"m{i}".encode())


def _topic_url(topic: str) -> str:
    local = topic.split("/")[-1]
    return f"/console/topics/persistent/public/default/{quote(local, safe='')}"


def _data_url(topic: str) -> str:
    return _topic_url(topic).replace("/console/topics/", "/console/data/topics/")


def test_the_overview_sums_every_worker_and_lists_them(ws: Workers) -> None:
    ws.cluster.topic_owners[TOPIC] = 1
    _producer(ws, 0, HERE, 1)
    _producer(ws, 1, TOPIC, 2)
    for asked in (0, 1):
        data = _json(ws, asked, "/console/data/overview")
        assert data["topicsLoaded"] == 2
        assert data["topicsLoadedByNamespace"] == {"public/default": 2}
        assert data["connectionsActive"] >= 2  # one client on each worker
        assert [(w["id"], w["webServiceUrl"], w["up"], w["pid"], w["topicsLoaded"]) for w in data["workers"]] == [
            (0, ws.cluster.web_urls[0], True, os.getpid(), 1), (1, ws.cluster.web_urls[1], True,
                                                                     os.getpid(), 1)]
        assert data["worker"]["id"] == asked
    local = _json(ws, 1, "/console/data/overview?local=true")  # what a peer hands over: its own
    assert local["topicsLoaded"] == 1 and [w["id"] for w in local["workers"]] == [1]

    status, _, page = _get(ws, 0, "/")
    assert status == 200
    assert "<td data-stat='loaded'>2</td>" in page  # public/default: one topic on each worker
    assert "<div class='card' data-stat='topicsLoaded'><div class='label'>topics loaded</div>" \
           "<div class='value'>2</div>" in page
    assert "Workers (2 of 2 answered)" in page and "missing-workers" not in page
    rows = re.findall(r"<tr data-worker='(\d)'>", page)
    assert rows == ["0", "1"]


def test_a_worker_that_does_not_answer_is_left_out_and_the_page_says_so(ws: Workers) -> None:
    ws.cluster.topic_owners[TOPIC] = 1
    _producer(ws, 1, TOPIC, 1)
    ws.cluster.web_urls[2] = f"http://127.0.0.1:{free_port()}"
    data = _json(ws, 0, "/console/data/overview")
    assert [(w["id"], w["up"]) for w in data["workers"]] == [(0, True), (1, True), (2, False)]
    assert data["topicsLoaded"] == 1
    _, _, page = _get(ws, 0, "/")
    assert "2 of 3 workers answered" in html.unescape(page)
    assert "data-stat='up' data-value='false'" in page
    _, _, listing = _get(ws, 0, "/console/namespaces/public/default")
    assert "2 of 3 workers answered" in html.unescape(listing)


def test_the_namespace_page_shows_topics_loaded_on_either_worker(ws: Workers) -> None:
    ws.cluster.topic_owners[TOPIC] = 1
    for worker in (0, 1):  # the shared metadata of a real broker: both stores list both topics
        for topic in (HERE, TOPIC):
            ws.admin(worker).request("PUT", AdminClient.topic_path(topic))
    _producer(ws, 0, HERE, 1)
    _producer(ws, 1, TOPIC, 3)
    _, _, page = _get(ws, 0, "/console/namespaces/public/default")
    for topic in (HERE, TOPIC):
        row = re.search(rf"<tr data-topic='{re.escape(html.escape(topic, quote=True))}'>(.*?)</tr>", page)
        assert row is not None, f"{topic} shown as not loaded"
        assert "data-stat='producers' data-value='1'" in row.group(1)
    data = _json(ws, 0, "/console/data/namespaces/public/default?size=10")
    assert set(data["metrics"]) == {HERE, TOPIC} and data["metrics"][TOPIC]["producers"] == 1
    assert data["replicators"] == []  # no replication here: the shape only (see the test below)
    assert [w["up"] for w in data["workers"]] == [True, True]


def test_a_topic_page_is_drawn_by_the_worker_asked_from_its_owners_figures(ws: Workers) -> None:
    ws.cluster.topic_owners[TOPIC] = 1
    _producer(ws, 1, TOPIC, 3)
    status, headers, page = _get(ws, 0, _topic_url(TOPIC))
    assert status == 200 and "location" not in headers  # no redirect to the owner's port
    wait_until(lambda: "data-stat='msgInCounter' data-value='3'" in _get(ws, 0, _topic_url(TOPIC))[2])
    data = _json(ws, 0, _data_url(TOPIC))
    assert data["stats"]["msgInCounter"] == 3 and data["owner"]["id"] == 1 and data["worker"]["id"] == 0
    assert f"Served by worker 1 ({ws.cluster.web_urls[1]})." in page

    # A partitioned topic's page: figures of the partitions loaded on both ws.
    p0, p1 = f"{PARTITIONED}-partition-0", f"{PARTITIONED}-partition-1"
    ws.cluster.topic_owners[p1] = 1
    _producer(ws, 0, p0, 1)
    _producer(ws, 1, p1, 2)
    _, _, page = _get(ws, 0, _topic_url(PARTITIONED))
    for partition in (p0, p1):
        assert re.search(rf"<tr data-topic='{re.escape(partition)}'><td class='name'>", page), partition
    data = _json(ws, 0, _data_url(PARTITIONED))
    assert {name: m["msgInTotal"] for name, m in data["metrics"].items()} == {p0: 1, p1: 2}

    # The owner silent: the page says so (an HTML 503), it sends nobody elsewhere.
    ws.cluster.web_urls[1] = f"http://127.0.0.1:{free_port()}"
    status, headers, page = _get(ws, 0, _topic_url(TOPIC))
    assert status == 503 and headers["content-type"].startswith("text/html") and "did not answer" in page


def test_the_callers_credentials_travel_to_the_peer(tmp_path: Path) -> None:
    pki = make_test_pki(tmp_path / "pki", client_names=SUPERUSERS)
    secret = create_secret_key()
    settings = SecuritySettings.from_properties(security_properties(tmp_path, pki, secret))
    cluster = Cluster()
    brokers = [BrokerThread(tmp_path / f"w{i}") for i in range(2)]
    admins: list[AdminServer] = []
    try:
        for i, broker in enumerate(brokers):
            broker.start()
            admin = AdminServer(
                BrokerAdmin(broker.server.broker), "127.0.0.1", 0, advertised_address="127.0.0.1",
                authentication=build_authentication_service(settings, environ={}),
                authorization=AuthorizationModel(settings.super_user_roles), security=settings,
                routing=TableRouting(cluster, i),
            )
            broker.run(admin.start())
            admins.append(admin)
            cluster.web_urls[i] = admin.web_service_url

        def get(path: str, headers: dict[str, str]) -> tuple[int, str]:
            conn = http.client.HTTPConnection("127.0.0.1", admins[0].port, timeout=10)
            try:
                conn.request("GET", path, headers=headers)
                reply = conn.getresponse()
                return reply.status, reply.read().decode()
            finally:
                conn.close()

        superuser = {"Authorization": f"Bearer {create_token(secret, 'superUser')}"}
        status, body = get("/console/data/overview", superuser)
        assert status == 200 and [w["up"] for w in json.loads(body)["workers"]] == [True, True]
        alice = {"Authorization": "Basic " + base64.b64encode(b"alice:wonderland").decode()}
        status, page = get("/", alice)
        assert status == 200 and "Workers (2 of 2 answered)" in page
        assert get("/console/data/overview", {})[0] == 401
    finally:
        for broker, admin in zip(brokers, admins, strict=False):
            broker.run(admin.close())
        for broker in brokers:
            broker.stop()


# ---- adding up, without I/O ------------------------------------------------------------------------


def _series(last_ms: int, values: list[float], points_max: int = 6) -> RateSeries:
    return RateSeries(5.0, points_max, last_ms, tuple(values), tuple(v / 2 for v in values))


def test_rate_histories_add_up_point_by_point_lined_up_by_time() -> None:
    a = _series(100_000, [1, 2, 3])
    b = _series(98_000, [10, 20])  # sampled 2 s before a: the same points
    c = _series(90_000, [100])  # two intervals older: its point lines up with a's first
    merged = merge_series([a, b, c])
    assert merged.msg_in == (101.0, 12.0, 23.0)
    assert merged.msg_out == (50.5, 6.0, 11.5)
    assert (merged.last_sample_ms, merged.points_max, merged.interval_s) == (100_000, 6, 5.0)
    longer = merge_series([_series(100_000, [1]), _series(100_000, [5, 6, 7, 8])])
    assert longer.msg_in == (5.0, 6.0, 7.0, 9.0)  # as long as the longest
    empty = _series(0, [])
    assert merge_series([empty, a]) == a and merge_series([empty]) == empty
    capped = merge_series([_series(100_000, [1, 1, 1], points_max=3), _series(80_000, [1, 1, 1], points_max=3)])
    assert capped.msg_in == (1.0, 1.0, 1.0)  # never longer than the ring


def test_topic_figures_travel_as_json_whole() -> None:
    sub = SubscriptionMetrics("s", "Shared", 2, 5, 1, 7, 70, "3:4", msg_rate_out=1.5)
    m = TopicMetrics("persistent://public/default/x", 1, 2, 10, 100, 7, 70, 1000, 10, 5, (sub,), msg_rate_in=2.5,
                     backlog_size_bytes=50)
    data = json.loads(json.dumps(metrics_json(m)))
    assert data["msgRateIn"] == 2.5 and data["subscriptions"][0]["markDeletePosition"] == "3:4"
    assert metrics_from_json(data) == m
    other = TopicMetrics("persistent://public/default/x", 0, 0, 0, 0, 0, 0, 0, 0, 0)
    assert merge_metrics([{m.topic: m}, {m.topic: other}]) == {m.topic: m}  # this worker's first


def test_a_peers_replicators_draw_as_its_own_would() -> None:
    stats = ReplicatorStats(True, 12, 3.5, 350.0, 2.4, 40, 4000, "velamq-repl", "pulsar://west:6650")
    row = ReplicatorRow.of(TOPIC, "west", stats)
    back = replicator_from_json(json.loads(json.dumps(replicator_json(row))))
    assert back == row
    assert namespace_section(["standalone", "west"], "standalone", [(TOPIC, "west", back)]) == namespace_section(
        ["standalone", "west"], "standalone", [(TOPIC, "west", stats)])
