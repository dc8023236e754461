"""The broker and bundle routes of pulsar-admin, answered for one broker (admin/_routes_brokers.py),
in Pulsar's shapes:

- `brokers list <cluster>`: the broker ids ("host:port" of the web service);
- `brokers leader-broker`: {"serviceUrl", "brokerId"};
- `brokers namespaces <cluster> --url <broker>`: {"<ns>/<bundle>": {"broker_assignment", "is_controlled",
  "is_active"}};
- `brokers version`: the version as text; `brokers list-dynamic-config`: the names that can change at
  run time (none);
- `namespaces bundles`: {"boundaries", "numBundles"}; `topics bundle-range`: the bundle's range;
- `namespaces unload --bundle`: the bundle's loaded topics are unloaded, no other (clients reconnect).
"""

from __future__ import annotations

from admin_harness import Admin
from wait_helpers import wait_until

from velamq import __version__
from velamq._bundles import NamespaceBundles
from velamq.broker import BrokerService

BUNDLES = NamespaceBundles.even(4)  # defaultNumberOfNamespaceBundles
RANGES = [r.name for r in BUNDLES.ranges]


def test_the_one_broker_is_listed_leads_and_owns_every_namespace(admin: Admin) -> None:
    me = f"127.0.0.1:{admin.port}"
    assert admin.request("GET", "/admin/v2/brokers/standalone").json() == [me]
    assert admin.request("GET", "/admin/v2/brokers/ghost").status == 404
    assert admin.request("GET", "/admin/v2/brokers/leaderBroker").json() == {
        "serviceUrl": f"http://{me}", "brokerId": me}
    assert admin.request("PUT", "/admin/v2/namespaces/public/other", "{}").status == 204
    owned = admin.request("GET", f"/admin/v2/brokers/standalone/{me}/ownedNamespaces").json()
    assert set(owned) == {f"public/{ns}/{r}" for ns in ("default", "other") for r in RANGES}
    assert owned[f"public/other/{RANGES[0]}"] == {
        "broker_assignment": "shared", "is_controlled": False, "is_active": True}
    assert admin.request("GET", "/admin/v2/brokers/standalone/elsewhere:8080/ownedNamespaces").status == 404


def test_version_and_dynamic_configuration(admin: Admin) -> None:
    reply = admin.request("GET", "/admin/v2/brokers/version")
    assert (reply.status, reply.body.decode()) == (200, __version__)
    assert admin.request("GET", "/admin/v2/brokers/configuration").json() == []
    assert admin.request("GET", "/admin/v2/brokers/configuration/values").json() == {}


def test_namespace_bundles_and_the_bundle_of_a_topic(admin: Admin) -> None:
    assert admin.request("GET", "/admin/v2/namespaces/public/default/bundles").json() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"], "numBundles": 4}
    assert admin.request("GET", "/admin/v2/namespaces/public/ghost/bundles").status == 404
    for name in ("t", "orders", "x-partition-3"):
        reply = admin.request("GET", f"/admin/v2/non-persistent/public/default/{name}/bundle")
        assert (reply.status, reply.body.decode()) == (200, BUNDLES.bundle_of(f"non-persistent://public/default/{name}").name)
    assert admin.request("GET", "/admin/v2/persistent/public/ghost/t/bundle").status == 404
    # A namespace cut differently answers with its own boundaries.
    admin.run(admin.metadata.set_policy("public/default", "bundles", NamespaceBundles.even(2).to_policy()))
    assert admin.request("GET", "/admin/v2/namespaces/public/default/bundles").json()["numBundles"] == 2


def _loaded(admin: Admin) -> dict[str, object]:
    broker: BrokerService = admin.broker.server.broker

    async def snapshot() -> dict[str, object]:
        return dict(broker.topics)

    return admin.run(snapshot())


def test_bundle_unload_unloads_exactly_that_bundles_topics(admin: Admin) -> None:
    names = [f"persistent://public/default/bu-{i}" for i in range(16)]
    client = admin.client()
    for name in names:  # loaded, then left without clients: only an unload takes them away
        producer = client.create_producer(name)
        producer.send(b"x")
        producer.close()
    bundle = BUNDLES.bundle_of(names[0])
    inside = {n for n in names if BUNDLES.bundle_of(n) == bundle}
    assert 0 < len(inside) < len(names)
    live_topic = sorted(inside)[0]
    consumer = client.subscribe(live_topic, "s", initial_position="earliest")
    producer = client.create_producer(live_topic)
    before = _loaded(admin)
    assert set(names) <= set(before)

    reply = admin.request("PUT", f"/admin/v2/namespaces/public/default/{bundle.name}/unload")
    assert reply.status == 204, reply.body
    after = _loaded(admin)
    assert not (inside - {live_topic}) & set(after)  # the bundle's idle topics are gone
    assert all(after.get(n) is before[n] for n in names if n not in inside)  # no other topic was touched
    # The clients of the bundle's live topic reconnect (loading it again) and go on.
    wait_until(lambda: _loaded(admin).get(live_topic) not in (None, before[live_topic]))
    producer.send(b"after unload")
    assert [consumer.receive(10_000).data() for _ in range(2)] == [b"x", b"after unload"]


def test_bundle_unload_refusals(admin: Admin) -> None:
    base = "/admin/v2/namespaces/public"
    me = f"127.0.0.1:{admin.port}"
    assert admin.request("PUT", f"{base}/ghost/{RANGES[0]}/unload").status == 404
    assert admin.request("PUT", f"{base}/default/0x00000000_0x20000000/unload").status == 412  # not one of them
    assert admin.request("PUT", f"{base}/default/not-a-bundle/unload").status == 412
    assert admin.request("PUT", f"{base}/default/{RANGES[1]}/unload?destinationBroker=elsewhere:1").status == 412
    assert admin.request("PUT", f"{base}/default/{RANGES[1]}/unload?destinationBroker={me}").status == 204
