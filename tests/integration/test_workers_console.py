"""The web console of a broker of two workers (`velamq standalone --workers 2`) through the one
shared admin port, whichever worker accepts the connection:

- the overview's figures (/console/data/overview and the page) count the topics loaded on both
  workers and list both workers, each with its own process id;
- the namespace page has the figures of topics loaded on either worker;
- a topic's page is served on the shared port whoever owns the topic: no redirect to a worker's
  own port (the browser stays on the origin it came to).
"""

from __future__ import annotations

import html
import http.client
import json
import uuid
from typing import Any
from urllib.parse import quote, urlsplit

import pulsar
import pytest

from velamq._bundles import NamespaceBundles, default_owner
from velamq.testing import BrokerProcess

pytestmark = pytest.mark.timeout(300)

NS = "public/default"



def _owner(full_topic: str) -> int:
    return default_owner(NS, NamespaceBundles.even(4).index_of(full_topic), 2)


def _topics_on_both_workers() -> dict[int, str]:
    """One new topic name owned by each worker."""
    found: dict[int, str] = {}
    while len(found) < 2:
        name = f"persistent://{NS}/console-{uuid.uuid4().hex[:8]}"
        found.setdefault(_owner(name), name)
    return found


def _get(broker: BrokerProcess, path: str) -> tuple[int, dict[str, str], str]:
    """One GET on the shared admin port, following nothing."""
    split = urlsplit(broker.admin_url)
    conn = http.client.HTTPConnection(split.hostname or "127.0.0.1", split.port, timeout=30)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read().decode()
    finally:
        conn.close()


def _json(broker: BrokerProcess, path: str) -> Any:
    status, _, body = _get(broker, path)
    assert status == 200, body[:300]
    return json.loads(body)


def test_the_console_covers_both_workers(workers2: BrokerProcess) -> None:
    topics = _topics_on_both_workers()
    client = pulsar.Client(workers2.service_url)
    try:
        producers = [client.create_producer(topic) for topic in topics.values()]  # open: the topics stay loaded
        for producer in producers:
            producer.send(b"x")
        for _ in range(4):  # each request is answered by whichever worker accepts it
            data = _json(workers2, "/console/data/overview")
            assert [(w["id"], w["up"]) for w in data["workers"]] == [(0, True), (1, True)]
            assert len({w["pid"] for w in data["workers"]}) == 2  # two processes
            assert all(w["topicsLoaded"] >= 1 for w in data["workers"])
            assert data["topicsLoaded"] == sum(w["topicsLoaded"] for w in data["workers"])
            assert data["topicsLoadedByNamespace"][NS] >= 2

            listing = _json(workers2, f"/console/data/namespaces/{NS}?size=500")
            assert set(topics.values()) <= set(listing["metrics"])
            assert all(listing["metrics"][t]["producers"] == 1 for t in topics.values())

            status, _, page = _get(workers2, "/")
            assert status == 200 and "Workers (2 of 2 answered)" in page
            for topic in topics.values():
                status, headers, page = _get(workers2, "/console/topics/persistent/" + NS + "/"
                                             + quote(topic.rsplit("/", 1)[1], safe=""))
                assert status == 200 and "location" not in headers
                assert f"Served by worker {_owner(topic)} " in html.unescape(page)
    finally:
        client.close()
