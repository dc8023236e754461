"""Authorization decisions (Pulsar's PulsarAuthorizationProvider) and the stored grant functions."""

from __future__ import annotations

from typing import Any

import pytest

from velamq._errors import PreconditionFailedError
from velamq.security import (
    AccessDeniedError,
    AuthAction,
    AuthorizationModel,
    InvalidGrantError,
    NamespaceOperation,
    TopicOperation,
)
from velamq.security import _auth_policies as grants

T = "persistent://private/auth/t"
OTHER_T = "persistent://private/auth/other"
PUBLIC_T = "persistent://public/default/t"


def _model(**policies: Any) -> AuthorizationModel:
    """The suite's CI set-up: superusers; public's admin is anonymous; private/auth grants token-principal."""
    model = AuthorizationModel(["superUser", "admin", "localhost"])
    model.load_tenant("public", {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]})
    model.load_tenant("private", {"adminRoles": [], "allowedClusters": ["standalone"]})
    model.load_namespace("public/default", {"auth_policies": {"namespace_auth": {"anonymous": ["produce", "consume"]}}})
    auth = grants.grant_namespace(None, "token-principal", ["produce", "consume"])
    auth = grants.grant_topic(auth, T, "reader", ["consume"])
    auth = grants.grant_topic(auth, "persistent://private/auth/parted", "writer", ["produce"])
    model.load_namespace("private/auth", {"auth_policies": auth, **policies})
    return model


# role, action, topic, subscription -> allowed
PRODUCE_CONSUME_TABLE = [
    ("superUser", AuthAction.produce, T, None, True),
    ("admin", AuthAction.consume, T, "s", True),
    ("anonymous", AuthAction.produce, PUBLIC_T, None, True),
    ("anonymous", AuthAction.produce, T, None, False),
    ("anonymous", AuthAction.consume, T, "s", False),
    ("token-principal", AuthAction.produce, T, None, True),
    ("token-principal", AuthAction.consume, OTHER_T, "s", True),  # namespace grant covers every topic
    ("token-principal", AuthAction.produce, PUBLIC_T, None, False),
    ("reader", AuthAction.consume, T, "s", True),
    ("reader", AuthAction.produce, T, None, False),
    ("reader", AuthAction.consume, OTHER_T, "s", False),  # topic grant covers only its topic
    ("writer", AuthAction.produce, "persistent://private/auth/parted-partition-3", None, True),  # inherited
    ("writer", AuthAction.produce, "persistent://private/auth/parted-2", None, False),
    ("nobody", AuthAction.consume, T, "s", False),
    (None, AuthAction.produce, PUBLIC_T, None, False),
]


@pytest.mark.parametrize(("role", "action", "topic", "subscription", "expected"), PRODUCE_CONSUME_TABLE)
def test_produce_consume_decisions(
    role: str | None, action: AuthAction, topic: str, subscription: str | None, expected: bool
) -> None:
    assert _model().allowed(role, action, topic, subscription) is expected


# role, operation, topic -> allowed
OPERATION_TABLE = [
    ("reader", TopicOperation.LOOKUP, T, True),
    ("reader", TopicOperation.GET_STATS, T, True),
    ("reader", TopicOperation.PEEK_MESSAGES, T, True),
    ("writer", TopicOperation.LOOKUP, "persistent://private/auth/parted", True),
    ("writer", TopicOperation.PEEK_MESSAGES, "persistent://private/auth/parted", False),
    ("nobody", TopicOperation.LOOKUP, T, False),
    ("nobody", TopicOperation.GET_STATS, T, False),
    ("token-principal", TopicOperation.TERMINATE, T, False),
    ("token-principal", TopicOperation.DELETE, T, False),
    ("token-principal", TopicOperation.GRANT_PERMISSION, T, False),
    ("anonymous", TopicOperation.DELETE, PUBLIC_T, True),  # tenant admin of public
    ("anonymous", TopicOperation.LOOKUP, T, False),
    ("superUser", TopicOperation.COMPACT, T, True),
]


@pytest.mark.parametrize(("role", "operation", "topic", "expected"), OPERATION_TABLE)
def test_topic_operation_decisions(role: str, operation: TopicOperation, topic: str, expected: bool) -> None:
    assert _model().allow_topic_operation(role, operation, topic) is expected


def test_check_raises_authorization_error_with_pulsar_code() -> None:
    model = _model()
    model.check_topic_operation("reader", TopicOperation.CONSUME, T, "s")
    with pytest.raises(AccessDeniedError) as info:
        model.check_topic_operation("reader", TopicOperation.PRODUCE, T)
    assert info.value.code == 4 and info.value.http_status == 403
    assert "reader" in str(info.value) and T in str(info.value)


def test_tenant_admin_and_superuser() -> None:
    model = _model()
    assert model.is_superuser("superUser") and not model.is_superuser("anonymous") and not model.is_superuser(None)
    assert model.is_tenant_admin("anonymous", "public") and not model.is_tenant_admin("anonymous", "private")
    assert model.is_tenant_admin("admin", "private")  # superusers administer every tenant
    assert model.allow_tenant_operation("anonymous", "public")
    model.load_tenant("public", {"adminRoles": []})
    assert not model.is_tenant_admin("anonymous", "public")
    model.drop_tenant("private")
    assert not model.is_tenant_admin("someone", "private")


def test_namespace_operations() -> None:
    model = _model()
    assert model.allow_namespace_operation("token-principal", NamespaceOperation.GET_TOPICS, "private/auth")
    assert not model.allow_namespace_operation("reader", NamespaceOperation.GET_TOPICS, "private/auth")
    assert not model.allow_namespace_operation("token-principal", NamespaceOperation.GRANT_PERMISSION, "private/auth")
    assert model.allow_namespace_operation("anonymous", NamespaceOperation.CREATE_TOPIC, "public/default")
    assert not model.allow_namespace_operation("token-principal", NamespaceOperation.PACKAGES, "private/auth")
    with pytest.raises(AccessDeniedError):
        model.check_namespace_operation("nobody", NamespaceOperation.GET_TOPICS, "private/auth")


def test_subscription_permissions() -> None:
    auth = grants.grant_namespace(None, "token-principal", ["consume"])
    auth = grants.grant_namespace(auth, "other", ["consume"])
    auth = grants.grant_subscription(auth, "locked", ["other"])
    model = _model()
    model.load_namespace("private/auth", {"auth_policies": auth})
    assert not model.allowed("token-principal", AuthAction.consume, T, "locked")
    assert model.allowed("other", AuthAction.consume, T, "locked")
    assert model.allowed("token-principal", AuthAction.consume, T, "open")
    assert model.allowed("token-principal", AuthAction.consume, T)  # lookup-style check without a name
    assert model.allowed("superUser", AuthAction.consume, T, "locked")
    # An emptied role list opens the subscription again, as in Pulsar.
    model.load_namespace("private/auth", {"auth_policies": grants.revoke_subscription(auth, "locked", "other")})
    assert model.allowed("token-principal", AuthAction.consume, T, "locked")


def test_subscription_prefix_mode() -> None:
    model = _model(subscription_auth_mode="Prefix")
    assert model.allowed("token-principal", AuthAction.consume, T, "token-principal-sub")
    assert not model.allowed("token-principal", AuthAction.consume, T, "sub")
    assert model.allowed("token-principal", AuthAction.produce, T)


def test_wildcards_only_when_enabled() -> None:
    auth = grants.grant_namespace(None, "app-*", ["produce"])
    auth = grants.grant_namespace(auth, "*-reader", ["consume"])
    for enabled in (False, True):
        model = AuthorizationModel(allow_wildcards=enabled)
        model.load_namespace("t/ns", {"auth_policies": auth})
        assert model.allowed("app-1", AuthAction.produce, "persistent://t/ns/x") is enabled
        assert model.allowed("x-reader", AuthAction.consume, "persistent://t/ns/x", "s") is enabled
        assert not model.allowed("app-1", AuthAction.consume, "persistent://t/ns/x", "s")
        assert not model.allowed("other", AuthAction.produce, "persistent://t/ns/x")


def test_revocation_takes_effect_on_reload() -> None:
    model = _model()
    auth = grants.revoke_namespace(model.namespace_auth("private/auth") and grants.grant_namespace(None, "x", []), "x")
    model.load_namespace("private/auth", {"auth_policies": auth})
    assert not model.allowed("token-principal", AuthAction.produce, T)
    model.drop_namespace("private/auth")
    assert not model.allowed("token-principal", AuthAction.produce, T)


def test_policies_that_do_not_parse_grant_nothing() -> None:
    model = AuthorizationModel()
    for policies in (
        {"auth_policies": "junk"},
        {"auth_policies": {"namespace_auth": {"r": "produce"}}},
        {"auth_policies": {"namespace_auth": {"r": ["fly"]}}},
        {"subscription_auth_mode": "Odd"},
    ):
        model.load_namespace("t/ns", policies)
        assert not model.allowed("r", AuthAction.produce, "persistent://t/ns/x")


# ---------------------------------------------------------------------------- stored grants


def test_grant_functions_build_pulsars_json_without_mutating_their_input() -> None:
    start: dict[str, Any] = {"namespace_auth": {"a": ["consume"]}}
    auth = grants.grant_namespace(start, "b", ["produce", "consume", "produce"])
    assert start == {"namespace_auth": {"a": ["consume"]}}
    assert auth["namespace_auth"] == {"a": ["consume"], "b": ["consume", "produce"]}
    auth = grants.grant_topic(auth, "private/auth/t", "c", ["consume"])  # short names are normalised
    assert auth["destination_auth"] == {T: {"c": ["consume"]}}
    assert grants.namespace_permissions(auth) == {"a": ["consume"], "b": ["consume", "produce"]}
    assert grants.topic_permissions(auth, T) == {"a": ["consume"], "b": ["consume", "produce"], "c": ["consume"]}
    assert grants.topic_permissions(auth, T + "-partition-0")["c"] == ["consume"]
    auth = grants.revoke_topic(auth, T, "c")
    assert auth["destination_auth"] == {}
    with pytest.raises(PreconditionFailedError, match="not set at the topic level"):
        grants.revoke_topic(auth, T, "b")
    assert grants.revoke_namespace(auth, "nobody") == auth
    auth = grants.grant_subscription(auth, "s", ["r2", "r1"])
    assert grants.subscription_permissions(auth) == {"s": ["r1", "r2"]}
    with pytest.raises(PreconditionFailedError):
        grants.revoke_subscription(auth, "missing", "r1")
    auth = grants.grant_topic(auth, T, "d", ["produce"])
    assert T not in grants.drop_topic(auth, T)["destination_auth"]


def test_the_suites_namespace_body_is_accepted() -> None:
    body = {"namespace_auth": {"anonymous": ["produce", "consume"]}}
    assert grants.normalize(body) == {
        "namespace_auth": {"anonymous": ["consume", "produce"]},
        "destination_auth": {},
        "subscription_auth_roles": {},
    }


@pytest.mark.parametrize(
    "body",
    ["produce", ["produce", "fly"], [1], {"produce": True}, None],
)
def test_bad_grant_bodies_are_invalid_grant_errors(body: Any) -> None:
    with pytest.raises(InvalidGrantError):
        grants.grant_namespace(None, "r", body)


@pytest.mark.parametrize(
    "value",
    [
        "junk",
        {"namespace_auth": []},
        {"namespace_auth": {"": ["produce"]}},
        {"destination_auth": {T: ["produce"]}},
        {"subscription_auth_roles": {"s": "r"}},
    ],
)
def test_bad_auth_policies_are_invalid_grant_errors(value: Any) -> None:
    with pytest.raises(InvalidGrantError):
        grants.normalize(value)


def test_subscription_auth_mode_values() -> None:
    assert grants.parse_subscription_auth_mode("Prefix") == "Prefix"
    with pytest.raises(InvalidGrantError):
        grants.parse_subscription_auth_mode("prefix")
