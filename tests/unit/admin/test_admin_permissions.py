"""Grants through Pulsar's permission routes on a secured admin server: stored in the namespace's
auth_policies, seen by the shared AuthorizationModel at once, and opening (then closing) exactly
the routes Pulsar's rules say: stats and lookup with produce or consume, peek with consume and the
subscription's roles. Also the REST calls the official client suite's CI makes before its tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from security_harness import Secured, secured_server

from velamq.security import AuthAction

NS = "/admin/v2/namespaces/public/default"
TOPIC = "/admin/v2/persistent/public/default/granted"
FULL = "persistent://public/default/granted"
# Refused topic operations get 401 (Pulsar's validateTopicOperation), a refused namespace one 403.
DENIED = [401, 401, 401, 401, 403]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    with secured_server(tmp_path) as server:
        assert server.as_superuser("PUT", TOPIC).status == 204
        assert server.as_superuser("PUT", f"{TOPIC}/subscription/sub-1").status == 204
        yield server


def status(secured: Secured, method: str, path: str, role: str = "app") -> int:
    return secured.request(method, path, headers=secured.bearer(role)).status


def test_namespace_grant_opens_stats_and_lookup_and_revoke_closes_them(secured: Secured) -> None:
    reads = [f"{TOPIC}/stats", f"{TOPIC}/internalStats", f"{TOPIC}/partitions",
             "/lookup/v2/topic/persistent/public/default/granted", f"{NS}/topics"]
    assert [status(secured, "GET", p) for p in reads] == DENIED
    assert secured.as_superuser("GET", f"{NS}/permissions").json() == {}

    assert secured.as_superuser("POST", f"{NS}/permissions/app", ["produce"]).status == 204
    assert secured.as_superuser("GET", f"{NS}/permissions").json() == {"app": ["produce"]}
    assert secured.model.allowed("app", AuthAction.produce, FULL)
    assert [status(secured, "GET", p) for p in reads[:4]] == [200] * 4
    assert status(secured, "GET", f"{NS}/topics") == 403  # listing a namespace needs consume
    assert status(secured, "GET", f"{TOPIC}/subscription/sub-1/position/1") == 401  # peeking too
    assert status(secured, "PUT", "/admin/v2/persistent/public/default/other") == 403  # creating is admin's

    assert secured.as_superuser("POST", f"{NS}/permissions/app", ["consume"]).status == 204  # replaces
    assert secured.as_superuser("GET", f"{NS}/permissions").json() == {"app": ["consume"]}
    assert status(secured, "GET", f"{NS}/topics") == 200
    assert status(secured, "GET", f"{TOPIC}/subscription/sub-1/position/1") == 404  # allowed; nothing to peek

    assert secured.as_superuser("DELETE", f"{NS}/permissions/app").status == 204
    assert secured.as_superuser("GET", f"{NS}/permissions").json() == {}
    assert not secured.model.allowed("app", AuthAction.consume, FULL)
    assert [status(secured, "GET", p) for p in reads] == DENIED
    # stored as Pulsar stores it
    stored = secured.broker.run(secured.broker.server.metadata.get_policies("public/default"))["auth_policies"]
    assert stored == {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}}


def test_topic_grants_merge_with_the_namespace_and_revoke_only_at_topic_level(secured: Secured) -> None:
    assert secured.as_superuser("POST", f"{NS}/permissions/app", ["produce"]).status == 204
    assert secured.as_superuser("POST", f"{TOPIC}/permissions/app", ["consume"]).status == 204
    assert secured.as_superuser("POST", f"{TOPIC}/permissions/reader", ["consume"]).status == 204
    assert secured.as_superuser("GET", f"{TOPIC}/permissions").json() == {
        "app": ["consume", "produce"], "reader": ["consume"],
    }
    assert status(secured, "GET", f"{TOPIC}/subscriptions", "reader") == 200
    assert status(secured, "GET", "/admin/v2/persistent/public/default/elsewhere/stats", "reader") == 401
    assert secured.as_superuser("DELETE", f"{TOPIC}/permissions/reader").status == 204
    assert status(secured, "GET", f"{TOPIC}/subscriptions", "reader") == 401
    again = secured.as_superuser("DELETE", f"{TOPIC}/permissions/reader")
    assert again.status == 412 and again.json() == {"reason": "Permissions are not set at the topic level"}
    # deleting the topic drops its own grants (the namespace's stay)
    assert secured.as_superuser("DELETE", f"{TOPIC}?force=true").status == 204
    assert secured.as_superuser("GET", f"{TOPIC}/permissions").json() == {"app": ["produce"]}
    assert not secured.model.allowed("app", AuthAction.consume, FULL)
    # the non-persistent domain has the same routes
    assert secured.as_superuser("GET", "/admin/v2/non-persistent/public/default/np/permissions").json() == {
        "app": ["produce"],
    }


def test_subscription_roles_and_auth_mode(secured: Secured) -> None:
    assert secured.as_superuser("POST", f"{NS}/permissions/app", ["consume"]).status == 204
    assert secured.as_superuser("POST", f"{NS}/permissions/other", ["consume"]).status == 204
    peek = f"{TOPIC}/subscription/sub-1/position/1"
    assert status(secured, "GET", peek) == 404  # allowed (nothing to peek)
    assert secured.as_superuser("POST", f"{NS}/permissions/subscription/sub-1", ["other"]).status == 204
    assert secured.as_superuser("GET", f"{NS}/permissions/subscription").json() == {"sub-1": ["other"]}
    assert status(secured, "GET", peek) == 401  # sub-1 is now only for "other"
    assert status(secured, "GET", peek, "other") == 404
    assert secured.as_superuser("DELETE", f"{NS}/permissions/sub-1/other").status == 204  # pulsar-admin's path
    assert secured.as_superuser("GET", f"{NS}/permissions/subscription").json() == {"sub-1": []}
    assert status(secured, "GET", peek) == 404  # an empty list closes nothing, as in Pulsar
    missing = secured.as_superuser("DELETE", f"{NS}/permissions/subscription/no-such-sub/other")
    assert missing.status == 412

    assert secured.as_superuser("GET", f"{NS}/subscriptionAuthMode").json() == "None"
    assert secured.as_superuser("POST", f"{NS}/subscriptionAuthMode", "Prefix").status == 204
    assert secured.as_superuser("GET", f"{NS}/subscriptionAuthMode").json() == "Prefix"
    assert status(secured, "GET", peek) == 401  # "sub-1" does not start with "app"
    assert secured.as_superuser("POST", f"{NS}/subscriptionAuthMode", "Sometimes").status == 400


def test_bad_bodies_and_unknown_namespaces(secured: Secured) -> None:
    for body in (["fly"], "produce", {"produce": True}, [1]):
        reply = secured.as_superuser("POST", f"{NS}/permissions/app", body)
        assert reply.status == 400, body
        assert "reason" in reply.json()
    empty = secured.request("POST", f"{NS}/permissions/app", headers=secured.bearer("admin"), raw_body=b"")
    assert empty.status == 400
    assert secured.as_superuser("POST", f"{NS}/permissions/subscription/s", "app").status == 400
    assert secured.as_superuser("POST", "/admin/v2/namespaces/public/nope/permissions/app", ["produce"]).status == 404
    assert secured.as_superuser("GET", "/admin/v2/namespaces/public/nope/permissions").status == 404
    assert secured.as_superuser("GET", f"{NS}/permissions").json() == {}  # nothing half-written


def test_only_admins_grant(secured: Secured) -> None:
    assert secured.as_superuser("POST", f"{NS}/permissions/app", ["produce", "consume"]).status == 204
    assert status(secured, "POST", f"{NS}/permissions/app") == 403  # a granted role cannot grant
    assert status(secured, "GET", f"{NS}/permissions") == 403
    assert status(secured, "GET", f"{TOPIC}/permissions") == 403
    assert secured.as_superuser("PUT", "/admin/v2/tenants/acme", {"adminRoles": ["boss"]}).status == 204
    assert secured.as_superuser("PUT", "/admin/v2/namespaces/acme/ns").status == 204
    boss = secured.bearer("boss")
    assert secured.request("POST", "/admin/v2/namespaces/acme/ns/permissions/app", ["consume"], boss).status == 204
    assert secured.request("POST", f"{NS}/permissions/app", ["consume"], boss).status == 403


def test_the_official_suites_ci_set_up(secured: Secured) -> None:
    """build-support/start-test-service-inside-container.sh's REST calls, with its superuser token."""
    put = secured.as_superuser
    assert put("PUT", "/admin/v2/tenants/private", {"adminRoles": [], "allowedClusters": ["standalone"]}).status == 204
    body = {"auth_policies": {"namespace_auth": {"token-principal": ["produce", "consume"]}},
            "replication_clusters": ["standalone"]}
    assert put("PUT", "/admin/v2/namespaces/private/auth", body).status == 204
    assert put("PUT", "/admin/v2/namespaces/public/default-2", {
        "auth_policies": {"namespace_auth": {"anonymous": ["produce", "consume"]}},
        "replication_clusters": ["standalone"],
    }).status == 204
    assert secured.model.allowed("token-principal", AuthAction.produce, "persistent://private/auth/t")
    assert secured.model.allowed("anonymous", AuthAction.consume, "persistent://public/default-2/t", "s")
    assert not secured.model.allowed("anonymous", AuthAction.produce, "persistent://private/auth/t")
    assert put("GET", "/admin/v2/namespaces/private/auth/permissions").json() == {
        "token-principal": ["consume", "produce"],
    }
    policies = put("GET", "/admin/v2/namespaces/private/auth").json()
    assert policies["auth_policies"]["namespace_auth"] == {"token-principal": ["consume", "produce"]}
    # existing ones answer as Pulsar does (the script ignores these)
    assert put("PUT", "/admin/v2/tenants/public", {"adminRoles": ["anonymous"]}).status == 409
    # a namespace body with a grant Pulsar would refuse
    bad = {"auth_policies": {"namespace_auth": {"x": ["fly"]}}}
    assert put("PUT", "/admin/v2/namespaces/private/bad", bad).status == 400
    # deleting the namespace drops its grants from the model
    assert put("DELETE", "/admin/v2/namespaces/private/auth").status == 204
    assert not secured.model.allowed("token-principal", AuthAction.produce, "persistent://private/auth/t")
