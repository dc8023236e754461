"""The broker and bundle routes of pulsar-admin, answered for one broker with one bundle per
namespace (admin/_routes_brokers.py), in Pulsar's shapes:

- `brokers list <cluster>`: the broker ids ("host:port" of the web service);
- `brokers leader-broker`: {"serviceUrl", "brokerId"};
- `brokers namespaces <cluster> --url <broker>`: {"<ns>/<bundle>": {"broker_assignment", "is_controlled",
  "is_active"}};
- `brokers version`: the version as text; `brokers list-dynamic-config`: the names that can change at
  run time (none);
- `namespaces bundles`: {"boundaries", "numBundles"}; `topics bundle-range`: the bundle's range.
"""

from __future__ import annotations

from admin_harness import Admin

from velamq import __version__

FULL = "0x00000000_0xffffffff"


def test_the_one_broker_is_listed_leads_and_owns_every_namespace(admin: Admin) -> None:
    me = f"127.0.0.1:{admin.port}"
    assert admin.request("GET", "/admin/v2/brokers/standalone").json() == [me]
    assert admin.request("GET", "/admin/v2/brokers/ghost").status == 404
    assert admin.request("GET", "/admin/v2/brokers/leaderBroker").json() == {
        "serviceUrl": f"http://{me}", "brokerId": me}
    assert admin.request("PUT", "/admin/v2/namespaces/public/other", "{}").status == 204
    owned = admin.request("GET", f"/admin/v2/brokers/standalone/{me}/ownedNamespaces").json()
    assert set(owned) == {f"public/default/{FULL}", f"public/other/{FULL}"}
    assert owned[f"public/other/{FULL}"] == {"broker_assignment": "shared", "is_controlled": False, "is_active": True}
    assert admin.request("GET", "/admin/v2/brokers/standalone/elsewhere:8080/ownedNamespaces").status == 404


def test_version_and_dynamic_configuration(admin: Admin) -> None:
    reply = admin.request("GET", "/admin/v2/brokers/version")
    assert (reply.status, reply.body.decode()) == (200, __version__)
    assert admin.request("GET", "/admin/v2/brokers/configuration").json() == []
    assert admin.request("GET", "/admin/v2/brokers/configuration/values").json() == {}


def test_bundles_of_a_namespace(admin: Admin) -> None:
    assert admin.request("GET", "/admin/v2/namespaces/public/default/bundles").json() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"], "numBundles": 4}
    assert admin.request("GET", "/admin/v2/namespaces/public/ghost/bundles").status == 404
    reply = admin.request("GET", "/admin/v2/non-persistent/public/default/t/bundle")
    assert (reply.status, reply.body.decode()) == (200, FULL)
    assert admin.request("GET", "/admin/v2/persistent/public/ghost/t/bundle").status == 404
