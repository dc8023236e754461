"""The Spark connector's planning calls against a topic whose shape changes between two calls of
one trigger: listed as not existing (a plain name), then created partitioned before the next call.
The trigger must see "not there yet" and the next plan the partitions, not an error that ends the
streaming query (a CI run once lost a query this way)."""

from __future__ import annotations

from velamq.spark._admin import ConnectorAdmin, parse_topic
from velamq.spark._options import parse_source
from velamq.spark._planner import PartitionRef, Planner
from velamq.testing import BrokerProcess


def test_a_plain_name_created_partitioned_meanwhile_reads_as_not_there_yet(broker: BrokerProcess,
                                                                            topic: str) -> None:
    name = f"persistent://public/default/{topic}"
    options = parse_source({"service.url": broker.service_url, "admin.url": broker.admin_url, "topics": name},
                           streaming=True)
    planner = Planner(options)
    stale = planner.partitions()  # the topic does not exist yet: one plain ref
    assert stale == [PartitionRef(name, name, -1)]
    assert planner.latest(stale) == {name: None}

    admin = ConnectorAdmin(broker.admin_url)
    admin.client.request("PUT", admin.client.topic_path(parse_topic(name), "partitions"), 2)
    # The same trigger goes on with its stale plan: the plain name is not there as a plain topic.
    assert planner.latest(stale) == {name: None}
    assert admin.ledgers(parse_topic(name)) is None
    # The next plan lists the partitions, and each has a position.
    fresh = planner.partitions()
    assert [r.name for r in fresh] == [f"{name}-partition-0", f"{name}-partition-1"]
    assert all(pos is not None for pos in planner.latest(fresh).values())
