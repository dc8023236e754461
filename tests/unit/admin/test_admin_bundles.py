"""Namespace bundles through the admin API and the CLI: set at creation (Pulsar's createNamespace body
or `namespaces create --bundles N`), read back with GET .../bundles."""

from __future__ import annotations

import json

import pytest
from admin_harness import Admin

from velamq._bundles import NamespaceBundles
from velamq.cli._main import main


def bundles(admin: Admin, ns: str) -> object:
    reply = admin.request("GET", f"/admin/v2/namespaces/{ns}/bundles")
    assert reply.status == 200, reply.body
    return reply.json()


def test_bundles_are_set_at_creation_and_read_back(admin: Admin) -> None:
    assert bundles(admin, "public/default") == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"], "numBundles": 4,
    }
    assert admin.request("PUT", "/admin/v2/namespaces/public/plain", "{}").status == 204
    assert bundles(admin, "public/plain") == NamespaceBundles.even(4).to_policy()
    body = {"bundles": {"numBundles": 16}}
    assert admin.request("PUT", "/admin/v2/namespaces/public/sixteen", json.dumps(body)).status == 204
    assert bundles(admin, "public/sixteen") == NamespaceBundles.even(16).to_policy()
    cut = {"bundles": {"boundaries": ["0x00000000", "0x20000000", "0xffffffff"], "numBundles": 2}}
    assert admin.request("PUT", "/admin/v2/namespaces/public/cut", json.dumps(cut)).status == 204
    assert bundles(admin, "public/cut") == cut["bundles"]
    # The whole policies show them too, as Pulsar's GET namespace does.
    assert admin.request("GET", "/admin/v2/namespaces/public/cut").json()["bundles"] == cut["bundles"]


@pytest.mark.parametrize("bad", [{"numBundles": -2}, {"numBundles": 100_000}, {"boundaries": ["0x00000010"]},
                                 {"boundaries": "0x0"}])
def test_malformed_bundles_are_refused(admin: Admin, bad: object) -> None:
    reply = admin.request("PUT", "/admin/v2/namespaces/public/bad", json.dumps({"bundles": bad}))
    assert reply.status == 412, reply.body
    assert admin.request("GET", "/admin/v2/namespaces/public/bad/bundles").status == 404


def test_cli_creates_a_namespace_with_bundles(admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{admin.port}"
    assert main(["admin", "--admin-url", url, "namespaces", "create", "public/eight", "--bundles", "8"]) == 0
    assert main(["admin", "--admin-url", url, "namespaces", "create", "public/dflt"]) == 0
    capsys.readouterr()
    assert bundles(admin, "public/eight") == NamespaceBundles.even(8).to_policy()
    assert bundles(admin, "public/dflt") == NamespaceBundles.even(4).to_policy()
